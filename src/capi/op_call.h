// The one validator of the op entry points (src/capi/entries.def).
//
// An entry point hands its arguments, in the order of its signature, to an
// OpCall; validate() checks them against the signature in this order:
//   1. the context and every buffer handle (null, stale, foreign: INVALID_ARG);
//      optional ones may be null; then the stream of an _async call
//   2. dtype parameters (UNSUPPORTED_DTYPE unless f16, bf16, f32)
//   3. every dimension a shape rule names is >= 1 (INVALID_SHAPE)
//   4. the entry's own rule (`rule`): descriptors, formats, the sizes of the
//      [*] operands through span()
//   5. the sizes of the ruled operands (overflow: INVALID_SHAPE; a buffer
//      too small: INVALID_ARG)
//   6. no output shares a byte with another operand, except the exact
//      aliases the signature allows (INVALID_ARG)
//   7. scalar rules (>=0: finite and not negative; INVALID_ARG)
// Nothing is enqueued unless every check passes. run() then hands the op's
// arguments to the backend, on the call's stream or synchronously.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "capi/api.h"
#include "core/backend.h"
#include "core/op_signature.h"
#include "core/trace.h"
#include "tensorcore/diagnostics.h"

namespace tc {
namespace capi {

enum class EntryId : int {
#define TC_ENTRY(entry, op, sig) entry,
#include "capi/entries.def"
#undef TC_ENTRY
  count
};

using sig::Param;

struct EntryDecl {
  const char* c_name;  // "tc_rmsnorm_forward"
  OpId op;
  const char* signature;
  std::vector<Param> params;
  std::string async_name;  // "tc_rmsnorm_forward_async"
};
// Every entry of entries.def, parsed once.
const std::vector<EntryDecl>& entry_decls();
const EntryDecl& entry_decl(EntryId id);

// A value handed to an entry point: converts from every parameter type.
struct Value {
  Param::Kind kind;
  union {
    tc_context ctx;
    tc_buffer buf;
    int64_t i64;
    int32_t i32;
    float f32;
    double f64;
    const void* desc;
  };
  Value(tc_context v) : kind(Param::Ctx), ctx(v) {}
  Value(tc_buffer v) : kind(Param::Buffer), buf(v) {}
  Value(int64_t v) : kind(Param::I64), i64(v) {}
  Value(int32_t v) : kind(Param::I32), i32(v) {}  // also tc_dtype, tc_quant_type
  Value(float v) : kind(Param::F32), f32(v) {}
  Value(double v) : kind(Param::F64), f64(v) {}
  template <class T>
  Value(const T* v) : kind(Param::Desc), desc(v) {}
};

class OpCall {
 public:
  // `async`: the call is tc_<entry>_async and `stream` its stream.
  OpCall(EntryId id, bool async, tc_stream stream, std::initializer_list<Value> values);

  const char* fn() const { return fn_; }
  // Steps 1-7; `rule` (step 4) returns a tc_status.
  tc_status validate() {
    return validate([] { return TC_OK; });
  }
  template <class Rule>
  tc_status validate(Rule&& rule) {
    if (tc_status st = check_handles_dtypes_dims()) return st;
    if (tc_status st = rule()) return st;
    return check_sizes_overlaps_scalars();
  }

  // For the entry's rule: operand `name` touches `bytes` bytes from byte
  // `offset` of its buffer (a null optional one: ignored; 0 bytes: not
  // touched, no overlap); `what` names the shape in the message.
  tc_status span(const char* name, int64_t bytes, const std::string& what = "", int64_t offset = 0);
  // Elements x elem bytes, overflow-checked, then span().
  tc_status span(const char* name, std::initializer_list<int64_t> shape, int64_t elem, const std::string& what);

  tc_buffer buffer(const char* name) const;
  void* data(const char* name) const;  // the operand's first byte (after its offset); null when absent
  template <class T>
  T* ptr(const char* name) const { return static_cast<T*>(data(name)); }

  // The op's name (the backend op unless given), the storage it keeps alive
  // and, when TC_TRACE is on, its shapes: `shapes()` when given, else the
  // scalars ("N=3,D=7,dtype=f16").
  void fill_info(OpInfo* info, const char* op_name = nullptr) const {
    fill_name_and_keep(info, op_name);
    if (trace::enabled()) info->shapes = default_shapes();
  }
  template <class Shapes>
  void fill_info(OpInfo* info, const char* op_name, Shapes&& shapes) const {
    fill_name_and_keep(info, op_name);
    if (trace::enabled()) info->shapes = shapes();
  }
  // Runs the backend op on the call's stream, or synchronously.
  template <class Args>
  tc_status run(tc_status (Backend::*op)(const Args&, Queue*), const Args& args) {
    note_backend(ctx_->backend->kind());
    return ((*ctx_->backend).*op)(args, stream_ ? stream_->queue.get() : nullptr);
  }
  tc_context context() const { return ctx_; }
  tc_stream stream() const { return stream_; }

 private:
  struct Slot {
    const Param* param = nullptr;
    Value value{int64_t(0)};
    int64_t offset = 0, bytes = 0;
    bool sized = false;
  };
  const Slot& slot(const char* name) const;
  Slot& slot(const char* name);
  struct Range {
    Slot *b, *e;
    Slot* begin() const { return b; }
    Slot* end() const { return e; }
  };
  Range slots() const { return {const_cast<Slot*>(slots_), const_cast<Slot*>(slots_) + count_}; }
  void fill_name_and_keep(OpInfo* info, const char* op_name) const;
  std::string default_shapes() const;
  tc_status check_handles_dtypes_dims();
  tc_status check_sizes_overlaps_scalars();
  tc_status check_overlaps() const;

  static constexpr int kMaxParams = 16;
  const EntryDecl& decl_;
  const char* fn_;
  bool async_;
  tc_context ctx_ = nullptr;
  tc_stream stream_ = nullptr;
  int count_ = 0;
  Slot slots_[kMaxParams];
};

// ---- Calls by name (tc_op_call): each entry's `_impl` with its arguments
// unboxed from tc_op_value slots by the types of its parameters.
using BoxedEntry = tc_status (*)(bool async, tc_stream stream, const tc_op_value* args);
bool register_boxed(EntryId id, BoxedEntry fn);

template <class T>
struct Unbox;
template <>
struct Unbox<tc_context> {
  static tc_context get(const tc_op_value& v) { return static_cast<tc_context>(v.handle); }
};
template <>
struct Unbox<tc_buffer> {
  static tc_buffer get(const tc_op_value& v) { return static_cast<tc_buffer>(v.handle); }
};
template <>
struct Unbox<int64_t> {
  static int64_t get(const tc_op_value& v) { return v.i; }
};
template <>
struct Unbox<int32_t> {  // i32, tc_dtype, tc_quant_type
  static int32_t get(const tc_op_value& v) { return int32_t(v.i); }
};
template <>
struct Unbox<float> {
  static float get(const tc_op_value& v) { return float(v.f); }
};
template <class D>
struct Unbox<const D*> {  // descriptors
  static const D* get(const tc_op_value& v) { return static_cast<const D*>(v.handle); }
};

template <auto Impl>
struct Boxed;
template <class... Ts, tc_status (*Impl)(bool, tc_stream, Ts...)>
struct Boxed<Impl> {
  static tc_status call(bool async, tc_stream stream, const tc_op_value* args) {
    return call(async, stream, args, std::index_sequence_for<Ts...>{});
  }
  template <size_t... I>
  static tc_status call(bool async, tc_stream stream, const tc_op_value* args, std::index_sequence<I...>) {
    return Impl(async, stream, Unbox<Ts>::get(args[I])...);
  }
};

// Defines tc_<entry>(PARAMS) and tc_<entry>_async(PARAMS, tc_stream stream),
// both running `entry_impl(async, stream, ARGS...)`, and registers the
// entry for calls by name.
#define TC_PARAMS_WITH_STREAM(...) (__VA_ARGS__, tc_stream stream)
#define TC_DEFINE_ENTRY(entry, PARAMS, ...)                                                              \
  extern "C" tc_status tc_##entry PARAMS {                                                               \
    return ::tc::capi::guarded("tc_" #entry, [&] { return entry##_impl(false, nullptr, __VA_ARGS__); }); \
  }                                                                                                      \
  extern "C" tc_status tc_##entry##_async TC_PARAMS_WITH_STREAM PARAMS {                                 \
    return ::tc::capi::guarded("tc_" #entry "_async",                                                    \
                               [&] { return entry##_impl(true, stream, __VA_ARGS__); });                 \
  }                                                                                                      \
  static const bool entry##_registered [[maybe_unused]] =                                                \
      ::tc::capi::register_boxed(::tc::capi::EntryId::entry, &::tc::capi::Boxed<&entry##_impl>::call);

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));

}  // namespace capi
}  // namespace tc
