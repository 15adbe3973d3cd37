// The registry that tells a live handle from a freed, stale or foreign one.
//
// A handle given out is the object's address with a generation in its top
// 16 bits (x86-64 and AArch64 user addresses fit in 48). The allocator may
// hand a freed object's address to a new object; the new one gets another
// generation, so the old handle value no longer matches and is refused
// instead of reaching the wrong object. Internal code holds plain object
// pointers: the capi check functions turn a caller's handle into its object,
// and handle_of() turns an object back into the handle to give out.
//
// Core knows no feature area: each area (gguf, model, dist, ...) registers
// its own kinds by name.
#pragma once

#include <cstdint>
#include <string>

namespace tc {

struct HandleKind {
  uint16_t id;
  const char* name;  // "buffer", "gguf file", ... (for messages)
};

// The kind named `name`, registered on first use; the same object afterwards.
const HandleKind& handle_kind(const char* name);

// The kinds of core's own objects.
const HandleKind& context_kind();
const HandleKind& buffer_kind();
const HandleKind& stream_kind();

constexpr int kHandleGenerationShift = 48;
constexpr uintptr_t kHandleAddressMask = (uintptr_t(1) << kHandleGenerationShift) - 1;

// Registers a new object (not registered before) and returns the handle to
// give out for it.
void* register_handle(const void* obj, const HandleKind& kind);
template <class T>
T* register_handle(T* obj, const HandleKind& kind) {
  return static_cast<T*>(register_handle(static_cast<const void*>(obj), kind));
}
// Unregisters a live object (its handle stops working).
void unregister_handle(const void* obj);

// The handle of a live registered object (its current generation); null for
// null. Used wherever a stored object goes back to a caller.
void* handle_of(const void* obj);
template <class T>
T* handle_of(T* obj) {
  return static_cast<T*>(handle_of(static_cast<const void*>(obj)));
}

// The live object of `kind` behind handle `h`, or null with *why saying what
// is wrong with it (freed, stale, another kind, not a handle). A live
// object's plain address is accepted too: checks resolve handles in place and
// may meet the same one twice.
void* lookup_handle(const void* h, const HandleKind& kind, std::string* why);

// The object address inside a handle value, without any check: for tests
// and code that holds handles it made itself.
template <class T>
T* handle_address(T* h) {
  return reinterpret_cast<T*>(reinterpret_cast<uintptr_t>(h) & kHandleAddressMask);
}

}  // namespace tc
