// The signatures of entries.def, parsed once, and the validator that checks
// every op entry point against them (capi/op_call.h).
#include "capi/op_call.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <sstream>
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

[[noreturn]] void bad_signature(const char* c_name, const std::string& why) {
  throw std::logic_error(std::string("entries.def: ") + c_name + ": " + why);
}

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

// Splits at `sep` outside brackets.
std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string item;
  int depth = 0;
  for (char ch : s) {
    depth += ch == '[' ? 1 : ch == ']' ? -1 : 0;
    if (ch == sep && depth == 0) {
      out.push_back(trim(item));
      item.clear();
    } else {
      item += ch;
    }
  }
  out.push_back(trim(item));
  return out;
}

// One parameter: "in? X[N,D]:dtype ~Y|Z", "i64 N", "f32 eps >=0", "desc tc_gemm_desc desc".
Param parse_param(const char* c_name, const std::string& text) {
  Param p;
  std::istringstream words(text);
  std::string kind;
  words >> kind;
  if (kind == "ctx") {
    p.kind = Param::Ctx;
    p.name = "ctx";
    return p;
  }
  std::string rest;
  std::getline(words, rest);
  rest = trim(rest);
  std::string base = kind;
  if (!base.empty() && base.back() == '?') {
    p.optional = true;
    base.pop_back();
  }
  if (base == "in" || base == "out" || base == "inout") {
    p.kind = Param::Buffer;
    p.input = base != "out";
    p.output = base != "in";
    const size_t tilde = rest.find('~');
    if (tilde != std::string::npos) {
      p.alias = split(rest.substr(tilde + 1), '|');
      rest = trim(rest.substr(0, tilde));
    }
    const size_t open = rest.find('['), close = rest.find(']');
    if (open == std::string::npos || close == std::string::npos || close < open)
      bad_signature(c_name, "operand '" + text + "' has no [shape]");
    p.name = rest.substr(0, open);
    const std::string dims = rest.substr(open + 1, close - open - 1);
    if (dims != "*") {
      p.ruled = true;
      p.dims = split(dims, ',');
      if (close + 1 >= rest.size() || rest[close + 1] != ':')
        bad_signature(c_name, "operand '" + p.name + "' has a shape but no :element type");
      p.elem = rest.substr(close + 2);
    }
    return p;
  }
  if (p.optional) bad_signature(c_name, "only buffers may be optional: '" + text + "'");
  if (kind == "desc") {
    p.kind = Param::Desc;
    std::istringstream r(rest);
    r >> p.ctype >> p.name;
    return p;
  }
  static const std::pair<const char*, Param::Kind> scalars[] = {
      {"i64", Param::I64}, {"i32", Param::I32}, {"f32", Param::F32}, {"f64", Param::F64},
      {"dtype", Param::Dtype}, {"quant", Param::Quant}};
  for (const auto& s : scalars)
    if (kind == s.first) {
      p.kind = s.second;
      std::istringstream r(rest);
      std::string rule;
      r >> p.name >> rule;
      if (rule == ">=0") p.nonneg = true;
      else if (!rule.empty()) bad_signature(c_name, "unknown scalar rule '" + rule + "'");
      return p;
    }
  bad_signature(c_name, "unknown parameter kind '" + kind + "'");
}

const Param* find_param(const std::vector<Param>& ps, const std::string& name) {
  for (const Param& p : ps)
    if (p.name == name) return &p;
  return nullptr;
}

EntryDecl parse_entry(const char* c_name, OpId op, const char* signature) {
  EntryDecl d{c_name, op, signature, {}, std::string(c_name) + "_async"};
  for (const std::string& text : split(signature, ',')) d.params.push_back(parse_param(c_name, text));
  if (d.params.size() > 16) bad_signature(c_name, "more than 16 parameters");
  // Names a shape or alias uses must be parameters of the right kind;
  // resolved to positions here so that a call compares no names.
  auto at = [&](const std::string& name) { return int(find_param(d.params, name) - d.params.data()); };
  for (Param& p : d.params) {
    for (const std::string& dim : p.dims) {
      const Param* q = find_param(d.params, dim);
      if (!q || q->kind != Param::I64) bad_signature(c_name, p.name + ": dimension " + dim + " is not an i64 parameter");
      p.dim_at.push_back(at(dim));
      d.params[size_t(at(dim))].is_dim = true;
    }
    if (p.ruled && p.elem != "f32" && p.elem != "i32") {
      const Param* q = find_param(d.params, p.elem);
      if (!q || q->kind != Param::Dtype) bad_signature(c_name, p.name + ": element type " + p.elem + " is unknown");
      p.elem_at = at(p.elem);
    }
    for (const std::string& a : p.alias) {
      const Param* q = find_param(d.params, a);
      if (!q || q->kind != Param::Buffer) bad_signature(c_name, p.name + ": alias " + a + " is not an operand");
      p.alias_at.push_back(at(a));
    }
  }
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
int64_t OpCall::i64(const char* name) const { return slot(name).value.i64; }
float OpCall::f32(const char* name) const { return slot(name).value.f32; }
int32_t OpCall::i32(const char* name) const { return slot(name).value.i32; }
tc_dtype OpCall::dtype(const char* name) const { return tc_dtype(slot(name).value.i32); }
const void* OpCall::desc_ptr() const {
  for (const Slot& s : slots())
    if (s.param->kind == Param::Desc) return s.value.desc;
  throw std::logic_error(std::string(fn_) + ": no descriptor");
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
