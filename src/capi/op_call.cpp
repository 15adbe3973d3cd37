// The signatures of entries.def, parsed once, and the validator that checks
// every op entry point against them (capi/op_call.h).
#include "capi/op_call.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "core/half.h"
#include "tensorcore/diagnostics.h"

namespace tc {
namespace capi {

std::string fmt(const char* f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

namespace {

EntryDecl parse_entry(const char* c_name, OpId op, const char* signature) {
  EntryDecl d{c_name, op, signature, sig::parse(c_name, signature), std::string(c_name) + "_async"};
  if (d.params.size() > 16) throw std::logic_error(std::string(c_name) + ": more than 16 parameters");
  return d;
}

bool float_dtype(int32_t d) { return d == TC_DTYPE_F16 || d == TC_DTYPE_BF16 || d == TC_DTYPE_F32; }

}  // namespace

const std::vector<EntryDecl>& entry_decls() {
  static const std::vector<EntryDecl> decls = {
#define TC_ENTRY(entry, op, sig) parse_entry("tc_" #entry, OpId::op, sig),
#include "capi/entries.def"
#undef TC_ENTRY
  };
  return decls;
}

const EntryDecl& entry_decl(EntryId id) { return entry_decls().at(size_t(id)); }

OpCall::OpCall(EntryId id, bool async, tc_stream stream, std::initializer_list<Value> values)
    : decl_(entry_decl(id)), fn_(async ? decl_.async_name.c_str() : decl_.c_name), async_(async),
      stream_(async ? stream : nullptr) {
  if (values.size() != decl_.params.size())
    throw std::logic_error(std::string(fn_) + ": " + std::to_string(values.size()) +
                           " arguments for a signature of " + std::to_string(decl_.params.size()));
  for (const Value& v : values) {
    const Param& p = decl_.params[size_t(count_)];
    const bool same = v.kind == p.kind || (v.kind == Param::I32 && (p.kind == Param::Dtype || p.kind == Param::Quant));
    if (!same) throw std::logic_error(std::string(fn_) + ": argument " + p.name + " does not have its signature's type");
    slots_[count_].param = &p;
    slots_[count_++].value = v;
    if (p.kind == Param::Ctx) ctx_ = v.ctx;
  }
}

const OpCall::Slot& OpCall::slot(const char* name) const {
  for (int i = 0; i < count_; ++i)
    if (!std::strcmp(slots_[i].param->name.c_str(), name)) return slots_[i];
  throw std::logic_error(std::string(fn_) + ": no parameter " + name);
}
OpCall::Slot& OpCall::slot(const char* name) {
  return const_cast<Slot&>(static_cast<const OpCall*>(this)->slot(name));
}

tc_buffer OpCall::buffer(const char* name) const { return slot(name).value.buf; }
void* OpCall::data(const char* name) const {
  const Slot& s = slot(name);
  return s.value.buf ? s.value.buf->bytes() + s.offset : nullptr;
}

tc_status OpCall::span(const char* name, int64_t bytes, const std::string& what, int64_t offset) {
  Slot& s = slot(name);
  s.sized = true;
  s.offset = offset;
  s.bytes = bytes;
  if (!s.value.buf) return TC_OK;
  int64_t end;
  if (!add_ok(offset, bytes, &end))
    return fail(TC_ERR_INVALID_SHAPE, "%s: %s %s overflows 64 bits", fn(), name, what.c_str());
  if (uint64_t(end) > s.value.buf->size())
    return fail(TC_ERR_INVALID_ARG, "%s: %s %s needs %lld bytes but its buffer has %zu", fn(), name,
                what.empty() ? "" : what.c_str(), (long long)end, s.value.buf->size());
  return TC_OK;
}

tc_status OpCall::span(const char* name, std::initializer_list<int64_t> shape, int64_t elem, const std::string& what) {
  int64_t n = elem;
  for (int64_t d : shape)
    if (!mul_ok(n, d, &n)) return fail(TC_ERR_INVALID_SHAPE, "%s: %s %s overflows 64 bits", fn(), name, what.c_str());
  return span(name, n, what);
}

tc_status OpCall::check_handles_dtypes_dims() {
  // 1. handles, then the stream
  if (tc_status st = check_context(fn(), ctx_)) return st;
  for (Slot& s : slots()) {  // each handle is resolved in place (core/handles.h)
    if (s.param->kind != Param::Buffer || (!s.value.buf && s.param->optional)) continue;
    if (tc_status st = check_buffer(fn(), s.param->name.c_str(), ctx_, s.value.buf)) return st;
  }
  if (async_)
    if (tc_status st = check_stream(fn(), ctx_, stream_)) return st;
  // 2. dtypes
  for (const Slot& s : slots())
    if (s.param->kind == Param::Dtype && !float_dtype(s.value.i32))
      return fail(TC_ERR_UNSUPPORTED_DTYPE, "%s: %s %s is not supported (f16, bf16 or f32)", fn(),
                  s.param->name.c_str(), dtype_label(s.value.i32).c_str());
  // 3. dimensions named by shape rules
  for (const Slot& s : slots())
    if (s.param->is_dim && s.value.i64 < 1)
      return fail(TC_ERR_INVALID_SHAPE, "%s: %s must be >= 1 (got %lld)", fn(), s.param->name.c_str(),
                  (long long)s.value.i64);
  return TC_OK;
}

tc_status OpCall::check_sizes_overlaps_scalars() {
  // 5. sizes of the ruled operands
  for (Slot& s : slots()) {
    const Param& p = *s.param;
    if (!p.ruled) continue;
    const int64_t elem = p.elem_at < 0 ? 4 : int64_t(dtype_size(tc_dtype(slots_[p.elem_at].value.i32)));
    int64_t n = elem;
    bool overflow = false;
    for (int d : p.dim_at) overflow = overflow || !mul_ok(n, slots_[d].value.i64, &n);
    if (!overflow && (!s.value.buf || uint64_t(n) <= s.value.buf->size())) {
      s.sized = true, s.offset = 0, s.bytes = n;
      continue;
    }
    std::string dims, values;  // only for the message
    for (int d : p.dim_at) {
      dims += (dims.empty() ? "" : ", ") + slots_[d].param->name;
      values += (values.empty() ? "" : ", ") + std::to_string(slots_[d].value.i64);
    }
    const std::string what = "[" + dims + "] = [" + values + "]" + (p.elem == "f32" ? " f32" : "");
    if (overflow) return fail(TC_ERR_INVALID_SHAPE, "%s: %s %s overflows 64 bits", fn(), p.name.c_str(), what.c_str());
    if (tc_status st = span(p.name.c_str(), n, what)) return st;
  }
  for (const Slot& s : slots())
    if (s.param->kind == Param::Buffer && s.value.buf && !s.sized)
      throw std::logic_error(std::string(fn_) + ": operand " + s.param->name + " was not sized");
  // 6. overlaps
  if (tc_status st = check_overlaps()) return st;
  // 7. scalar rules
  for (const Slot& s : slots()) {
    if (!s.param->nonneg) continue;
    const double v = s.param->kind == Param::F32 ? double(s.value.f32)
                     : s.param->kind == Param::F64 ? s.value.f64
                                                   : double(s.value.i64);
    if (!(std::isfinite(v) && v >= 0))
      return fail(TC_ERR_INVALID_ARG, "%s: %s must be finite and >= 0 (got %g)", fn(), s.param->name.c_str(), v);
  }
  return TC_OK;
}

// No output may share a byte with another operand, except the exact aliases
// its signature allows. Byte ranges are compared, not handles: two buffers
// may wrap the same caller memory (tc_buffer_from_ptr).
tc_status OpCall::check_overlaps() const {
  for (int i = 0; i < count_; ++i) {
    const Slot& o = slots_[i];
    if (o.param->kind != Param::Buffer || !o.param->output || !o.value.buf || o.bytes == 0) continue;
    for (int j = 0; j < count_; ++j) {
      const Slot& t = slots_[j];
      if (j == i || t.param->kind != Param::Buffer || !t.value.buf || t.bytes == 0) continue;
      if (t.param->output && j < i) continue;  // a pair of outputs: reported once
      const char *o0 = o.value.buf->bytes() + o.offset, *t0 = t.value.buf->bytes() + t.offset;
      if (!(o0 < t0 + t.bytes && t0 < o0 + o.bytes)) continue;
      bool allowed = false;
      for (int a : o.param->alias_at) allowed = allowed || a == j;
      for (int a : t.param->alias_at) allowed = allowed || (t.param->output && a == i);
      if (allowed && o0 == t0 && o.bytes == t.bytes) continue;
      const char* how = allowed ? " (they may be the same memory, but not partly overlap)"
                        : o.value.buf->storage == t.value.buf->storage ? " (the same buffer)"
                                                                        : " (buffers over the same memory)";
      return fail(TC_ERR_INVALID_ARG, "%s: %s overlaps %s in memory%s", fn(), o.param->name.c_str(),
                  t.param->name.c_str(), how);
    }
  }
  return TC_OK;
}

void OpCall::fill_name_and_keep(OpInfo* info, const char* op_name) const {
  info->name = op_name ? op_name : tc::op_name(decl_.op);
  info->keep.reserve(size_t(count_));
  for (const Slot& s : slots())
    if (s.param->kind == Param::Buffer && s.value.buf) info->keep.push_back(s.value.buf->storage);
}

std::string OpCall::default_shapes() const {
  std::string out;
  for (const Slot& s : slots()) {
    const Param& p = *s.param;
    std::string v;
    if (p.kind == Param::I64) v = std::to_string(s.value.i64);
    else if (p.kind == Param::Dtype) v = dtype_label(s.value.i32);
    else if (p.kind == Param::Quant) v = std::to_string(s.value.i32);
    else continue;
    out += (out.empty() ? "" : ",") + p.name + "=" + v;
  }
  return out;
}

}  // namespace capi
}  // namespace tc

// The table for the binding and the consistency test: "c_name|op|capabilities|signature".
int32_t tc_op_entry_count(void) { return int32_t(tc::capi::entry_decls().size()); }

namespace tc {
namespace capi {

// Filled by TC_DEFINE_ENTRY during static initialisation of each entry's file.
std::vector<BoxedEntry>& boxed_entries() {
  static std::vector<BoxedEntry> table(size_t(EntryId::count), nullptr);
  return table;
}

bool register_boxed(EntryId id, BoxedEntry fn) {
  boxed_entries()[size_t(id)] = fn;
  return true;
}

}  // namespace capi
}  // namespace tc

tc_status tc_op_call(const char* c_name, const struct tc_op_value* args, int32_t nargs, tc_stream stream) {
  using namespace tc::capi;
  return guarded("tc_op_call", [&]() -> tc_status {
    if (!c_name) return tc::fail(TC_ERR_INVALID_ARG, "tc_op_call: c_name is null");
    const std::vector<EntryDecl>& decls = entry_decls();
    for (size_t i = 0; i < decls.size(); ++i) {
      if (std::strcmp(decls[i].c_name, c_name) != 0) continue;
      if (nargs != int32_t(decls[i].params.size()))
        return tc::fail(TC_ERR_INVALID_ARG, "tc_op_call: %s takes %zu arguments (%s), got %d", c_name,
                        decls[i].params.size(), decls[i].signature, nargs);
      if (nargs > 0 && !args) return tc::fail(TC_ERR_INVALID_ARG, "tc_op_call: args is null");
      BoxedEntry fn = boxed_entries()[i];
      if (!fn) return tc::fail(TC_ERR_INTERNAL, "tc_op_call: %s has no boxed form", c_name);
      return fn(stream != nullptr, stream, args);
    }
    return tc::fail(TC_ERR_INVALID_ARG, "tc_op_call: '%s' is not an op entry point (tc_op_entry lists them)", c_name);
  });
}

const char* tc_op_entry(int32_t index) {
  static const std::vector<std::string> rows = []() noexcept {
    static const uint64_t caps[] = {
#define TC_OP(name, Args, c) uint64_t(c),
#include "core/ops.def"
#undef TC_OP
    };
    std::vector<std::string> out;
    for (const tc::capi::EntryDecl& d : tc::capi::entry_decls())
      out.push_back(std::string(d.c_name) + "|" + tc::op_name(d.op) + "|" + std::to_string(caps[int(d.op)]) + "|" +
                    d.signature);
    return out;
  }();
  return index >= 0 && size_t(index) < rows.size() ? rows[size_t(index)].c_str() : nullptr;
}
