#include "core/handles.h"

#include <cstring>
#include <mutex>
#include <stdexcept>
#include <unordered_map>
#include <vector>

namespace tc {
namespace {

struct Entry {
  uint16_t kind;
  uint16_t generation;
};

struct Registry {
  std::mutex mu;
  std::vector<const char*> kind_names;  // by id
  std::unordered_map<uintptr_t, Entry> live;
  // One counter for all objects: an address reused by the allocator gets a
  // generation other than its previous object's unless exactly 65535 handles
  // were made in between.
  uint16_t next_generation = 0;
};

Registry& registry() {
  static auto* r = new Registry();  // outlives static destructors
  return *r;
}

uintptr_t tagged(uintptr_t addr, uint16_t generation) {
  return addr | (uintptr_t(generation) << kHandleGenerationShift);
}

}  // namespace

const HandleKind& handle_kind(const char* name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  static auto* kinds = new std::vector<HandleKind*>();
  for (HandleKind* k : *kinds)
    if (std::strcmp(k->name, name) == 0) return *k;
  auto* k = new HandleKind{uint16_t(kinds->size()), name};
  kinds->push_back(k);
  r.kind_names.push_back(name);
  return *k;
}

const HandleKind& context_kind() {
  static const HandleKind& k = handle_kind("context");
  return k;
}
const HandleKind& buffer_kind() {
  static const HandleKind& k = handle_kind("buffer");
  return k;
}
const HandleKind& stream_kind() {
  static const HandleKind& k = handle_kind("stream");
  return k;
}

void* register_handle(const void* obj, const HandleKind& kind) {
  auto addr = reinterpret_cast<uintptr_t>(obj);
  if (addr & ~kHandleAddressMask) throw std::runtime_error("object address beyond 48 bits cannot carry a handle");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (++r.next_generation == 0) r.next_generation = 1;  // 0: a plain address, never a handle
  r.live[addr] = Entry{kind.id, r.next_generation};
  return reinterpret_cast<void*>(tagged(addr, r.next_generation));
}

void unregister_handle(const void* obj) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.live.erase(reinterpret_cast<uintptr_t>(obj) & kHandleAddressMask);
}

void* handle_of(const void* obj) {
  if (!obj) return nullptr;
  auto addr = reinterpret_cast<uintptr_t>(obj) & kHandleAddressMask;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.live.find(addr);
  if (it == r.live.end()) throw std::logic_error("handle_of: object is not registered");
  return reinterpret_cast<void*>(tagged(addr, it->second.generation));
}

void* lookup_handle(const void* h, const HandleKind& kind, std::string* why) {
  auto value = reinterpret_cast<uintptr_t>(h);
  auto addr = value & kHandleAddressMask;
  auto generation = uint16_t(value >> kHandleGenerationShift);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.live.find(addr);
  if (generation == 0) {
    // An object address: what a check leaves behind after resolving a
    // handle, never given out, so it cannot be a stale handle.
    if (it != r.live.end() && it->second.kind == kind.id) return reinterpret_cast<void*>(addr);
    *why = "not a handle";
  } else if (it == r.live.end()) {
    *why = "freed, or never a handle";
  } else if (it->second.generation != generation) {
    *why = "stale: its object was freed and the address now holds a newer object";
  } else if (it->second.kind != kind.id) {
    *why = std::string("a ") + r.kind_names[it->second.kind] + " handle";
  } else {
    return reinterpret_cast<void*>(addr);
  }
  return nullptr;
}

}  // namespace tc
