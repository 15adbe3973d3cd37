#include "runtime/builtins.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>

#include "core/dtypes.h"
#include "core/op_signature.h"
#include "runtime/device.h"
#include "runtime/kernel_ref.h"
#include "runtime/task.h"
#include "runtime/tensor_util.h"
#include "simpler/simpler.h"
#include "tensorcore/tensorcore.h"

namespace simpler {
namespace {

Error parse_params(const std::string& text, const std::vector<std::string>& allowed,
                   std::map<std::string, std::string>* out) {
  size_t i = 0;
  while (i < text.size()) {
    size_t end = text.find(';', i);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(i, end - i);
    i = end + 1;
    if (item.empty()) continue;
    size_t eq = item.find('=');
    if (eq == std::string::npos)
      return make_error(TC_ERR_INVALID_ARG, "built-in parameter '%s' is not key=value", item.c_str());
    std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    bool ok = false;
    for (const std::string& a : allowed) ok |= a == key;
    if (!ok) {
      std::string list;
      for (const std::string& a : allowed) list += (list.empty() ? "" : ", ") + a;
      return make_error(TC_ERR_INVALID_ARG, "unknown built-in parameter '%s' (known: %s)", key.c_str(), list.c_str());
    }
    (*out)[key] = value;
  }
  return {};
}

bool parse_double(const std::string& s, double* v) {
  char* end = nullptr;
  *v = std::strtod(s.c_str(), &end);
  return !s.empty() && end && *end == 0 && std::isfinite(*v);
}

bool parse_flag(const std::string& s, int32_t* v) {
  if (s == "1" || s == "true" || s == "True") return *v = 1, true;
  if (s == "0" || s == "false" || s == "False") return *v = 0, true;
  return false;
}

// simpler dtype -> tensorcore dtype; -1 where tensorcore has none.
int32_t to_tc_dtype(int32_t d) { return tc::tc_from_simpler(d); }

// A view wrapped as a tensorcore buffer starting at its first element.
struct Wrapped {
  tc_buffer buf = nullptr;
  ~Wrapped() {
    if (buf) tc_buffer_free(buf);
  }
};

Error wrap(Device* dev, const ChipTensor& t, Wrapped* w) {
  ByteRange r = byte_range(t);
  void* p = reinterpret_cast<void*>(t.buffer.addr + r.lo);
  tc_status st = tc_buffer_from_ptr(dev->context(), p, r.hi - r.lo, &w->buf);
  if (st != TC_OK) return make_error(st, "tensorcore cannot wrap %s: %s", describe(t).c_str(), tc_last_error_detail());
  return {};
}

// ---- gemm / gemm_batched ---------------------------------------------------
//
//   C[b] = alpha * op(A[b]) @ op(B[b]) + beta * C[b]
//
// gemm takes 2-D views (rows x cols, unit inner stride: the row pitch is
// strides[0]); gemm_batched takes 3-D views [batch, rows, cols] (batch
// stride strides[0], row pitch strides[1]). M, N, K come from the shapes.

struct GemmState {
  bool batched;
  int32_t transpose_a = 0, transpose_b = 0;
  double alpha = 1.0, beta = 0.0;
  int32_t allow_tf32 = 0;
  std::string accum;  // "" = f32 (i32 for i8)
};

Error gemm_prepare(bool batched, const std::string& params, std::vector<int32_t>* sig,
                   std::shared_ptr<const void>* state) {
  std::map<std::string, std::string> p;
  if (Error e = parse_params(params, {"transpose_a", "transpose_b", "alpha", "beta", "accum", "allow_tf32"}, &p);
      !e.ok())
    return e;
  auto s = std::make_shared<GemmState>();
  s->batched = batched;
  for (auto& kv : p) {
    bool ok = true;
    if (kv.first == "transpose_a") ok = parse_flag(kv.second, &s->transpose_a);
    if (kv.first == "transpose_b") ok = parse_flag(kv.second, &s->transpose_b);
    if (kv.first == "allow_tf32") ok = parse_flag(kv.second, &s->allow_tf32);
    if (kv.first == "alpha") ok = parse_double(kv.second, &s->alpha);
    if (kv.first == "beta") ok = parse_double(kv.second, &s->beta);
    if (kv.first == "accum") {
      s->accum = kv.second;
      ok = kv.second == "f32" || kv.second == "f16" || kv.second == "i32";
    }
    if (!ok)
      return make_error(TC_ERR_INVALID_ARG, "built-in %s: bad value '%s' for %s", batched ? "gemm_batched" : "gemm",
                        kv.second.c_str(), kv.first.c_str());
  }
  *sig = {SIMPLER_ARG_IN, SIMPLER_ARG_IN, s->beta != 0.0 ? SIMPLER_ARG_INOUT : SIMPLER_ARG_OUT};
  *state = s;
  return {};
}

Error gemm_prepare_2d(const Builtin&, const std::string& p, std::vector<int32_t>* sig,
                      std::shared_ptr<const void>* st) {
  return gemm_prepare(false, p, sig, st);
}
Error gemm_prepare_3d(const Builtin&, const std::string& p, std::vector<int32_t>* sig,
                      std::shared_ptr<const void>* st) {
  return gemm_prepare(true, p, sig, st);
}

Error gemm_run(const void* state, const TaskSlot& t, Device* dev) {
  const GemmState& s = *static_cast<const GemmState*>(state);
  const char* op = s.batched ? "gemm_batched" : "gemm";
  const ChipTensor& A = t.tensors[0];
  const ChipTensor& B = t.tensors[1];
  const ChipTensor& C = t.tensors[2];
  const uint32_t nd = s.batched ? 3 : 2;
  const char* names[3] = {"A", "B", "C"};
  const ChipTensor* ts[3] = {&A, &B, &C};
  for (int i = 0; i < 3; i++) {
    if (ts[i]->ndims != nd)
      return make_error(TC_ERR_INVALID_SHAPE, "%s: %s must be %u-D, got %s", op, names[i], nd, describe(*ts[i]).c_str());
    if (ts[i]->shapes[nd - 1] > 1 && ts[i]->strides[nd - 1] != 1)
      return make_error(TC_ERR_INVALID_SHAPE, "%s: %s needs unit inner stride, got %lld", op, names[i],
                        (long long)ts[i]->strides[nd - 1]);
  }
  const int32_t dt = to_tc_dtype(int32_t(A.dtype));
  if (dt < 0 || B.dtype != A.dtype)
    return make_error(TC_ERR_UNSUPPORTED_DTYPE, "%s: A and B must share a dtype tensorcore multiplies (got %s, %s)",
                      op, dtype_name(int32_t(A.dtype)), dtype_name(int32_t(B.dtype)));
  const int o = s.batched ? 1 : 0;  // index of the row dimension
  const int64_t M = s.transpose_a ? A.shapes[o + 1] : A.shapes[o];
  const int64_t K = s.transpose_a ? A.shapes[o] : A.shapes[o + 1];
  const int64_t Kb = s.transpose_b ? B.shapes[o + 1] : B.shapes[o];
  const int64_t N = s.transpose_b ? B.shapes[o] : B.shapes[o + 1];
  if (K != Kb || int64_t(C.shapes[o]) != M || int64_t(C.shapes[o + 1]) != N)
    return make_error(TC_ERR_INVALID_SHAPE, "%s: shapes do not chain: A %s, B %s, C %s (transpose_a=%d, transpose_b=%d)",
                      op, describe(A).c_str(), describe(B).c_str(), describe(C).c_str(), s.transpose_a,
                      s.transpose_b);
  tc_gemm_desc d{};
  d.M = M, d.N = N, d.K = K;
  d.dtype = dt;
  d.accum = s.accum.empty() ? (dt == TC_DTYPE_I8 ? TC_DTYPE_I32 : TC_DTYPE_F32)
            : s.accum == "f16" ? TC_DTYPE_F16
            : s.accum == "i32" ? TC_DTYPE_I32
                               : TC_DTYPE_F32;
  d.alpha = s.alpha, d.beta = s.beta;
  d.transpose_a = s.transpose_a, d.transpose_b = s.transpose_b;
  d.lda = A.shapes[o] > 1 ? A.strides[o] : A.shapes[o + 1];
  d.ldb = B.shapes[o] > 1 ? B.strides[o] : B.shapes[o + 1];
  d.ldc = C.shapes[o] > 1 ? C.strides[o] : C.shapes[o + 1];
  d.batch = 1;
  d.allow_tf32 = s.allow_tf32;
  if (s.batched) {
    d.batch = A.shapes[0];
    if (B.shapes[0] != A.shapes[0] || C.shapes[0] != A.shapes[0])
      return make_error(TC_ERR_INVALID_SHAPE, "gemm_batched: batch sizes differ (%u, %u, %u)", A.shapes[0],
                        B.shapes[0], C.shapes[0]);
    d.stride_a = A.strides[0], d.stride_b = B.strides[0], d.stride_c = C.strides[0];
  }
  Wrapped wa, wb, wc;
  if (Error e = wrap(dev, A, &wa); !e.ok()) return e;
  if (Error e = wrap(dev, B, &wb); !e.ok()) return e;
  if (Error e = wrap(dev, C, &wc); !e.ok()) return e;
  tc_status st = s.batched ? tc_gemm_batched(dev->context(), wa.buf, wb.buf, wc.buf, &d)
                           : tc_gemm(dev->context(), wa.buf, wb.buf, wc.buf, &d);
  if (st != TC_OK) return make_error(st, "tc_%s: %s", op, tc_last_error_detail());
  return {};
}

// ---- the op table's built-ins ------------------------------------------------

struct TableOp {
  std::string name, c_name, help;
  std::vector<tc::sig::Param> params;
  Builtin builtin;
};

struct TableState {
  const TableOp* op;
  std::map<std::string, double> scalars;  // the parameters, parsed
};

Error table_prepare(const Builtin& self, const std::string& text, std::vector<int32_t>* sig,
                    std::shared_ptr<const void>* state) {
  const TableOp& op = *static_cast<const TableOp*>(self.op);
  std::vector<std::string> allowed;
  for (const tc::sig::Param& p : op.params)
    if (p.kind != tc::sig::Param::Ctx && p.kind != tc::sig::Param::Buffer && !p.is_dim &&
        p.kind != tc::sig::Param::Dtype)
      allowed.push_back(p.name);
  auto s = std::make_shared<TableState>();
  s->op = &op;
  std::map<std::string, std::string> given;
  if (Error e = parse_params(text, allowed, &given); !e.ok()) return e;
  for (const std::string& a : allowed) {
    auto it = given.find(a);
    if (it == given.end())
      return make_error(TC_ERR_INVALID_ARG, "built-in %s: parameter %s is required (%s)", op.name.c_str(), a.c_str(),
                        op.help.c_str());
    if (!parse_double(it->second, &s->scalars[a]))
      return make_error(TC_ERR_INVALID_ARG, "built-in %s: bad value '%s' for %s", op.name.c_str(), it->second.c_str(),
                        a.c_str());
  }
  sig->clear();
  for (const tc::sig::Param& p : op.params)
    if (p.kind == tc::sig::Param::Buffer)
      sig->push_back(p.input && p.output ? SIMPLER_ARG_INOUT : p.output ? SIMPLER_ARG_OUT : SIMPLER_ARG_IN);
  *state = s;
  return {};
}

// Dimensions from the views' shapes (a 1-D rule takes a view's element
// count), element types from their dtypes; every view packed row-major.
Error table_run(const void* state, const TaskSlot& t, Device* dev) {
  const TableState& s = *static_cast<const TableState*>(state);
  const TableOp& op = *s.op;
  const char* name = op.name.c_str();
  const size_t n = op.params.size();
  std::vector<int64_t> dim(n, -1);
  std::vector<int32_t> dtype(n, -1);
  std::vector<const ChipTensor*> view(n, nullptr);
  size_t next = 0;
  for (size_t i = 0; i < n; ++i) {
    const tc::sig::Param& p = op.params[i];
    if (p.kind != tc::sig::Param::Buffer) continue;
    const ChipTensor& v = t.tensors[next++];
    view[i] = &v;
    ByteRange r = byte_range(v);
    int64_t numel = 1;
    for (uint32_t d = 0; d < v.ndims; ++d) numel *= v.shapes[d];
    if (int64_t(r.hi - r.lo) != numel * int64_t(elem_size(v)))
      return make_error(TC_ERR_INVALID_SHAPE, "%s: %s must be a packed view, got %s", name, p.name.c_str(),
                        describe(v).c_str());
    const bool flat = p.dim_at.size() == 1;
    if (!flat && v.ndims != p.dim_at.size())
      return make_error(TC_ERR_INVALID_SHAPE, "%s: %s must be %zu-D, got %s", name, p.name.c_str(), p.dim_at.size(),
                        describe(v).c_str());
    for (size_t k = 0; k < p.dim_at.size(); ++k) {
      const int64_t got = flat ? numel : int64_t(v.shapes[k]);
      int64_t& d = dim[size_t(p.dim_at[k])];
      if (d >= 0 && d != got)
        return make_error(TC_ERR_INVALID_SHAPE, "%s: %s = %lld from %s disagrees with %lld from another operand", name,
                          op.params[size_t(p.dim_at[k])].name.c_str(), (long long)got, p.name.c_str(), (long long)d);
      d = got;
    }
    if (p.elem_at >= 0) {
      const int32_t dt = to_tc_dtype(int32_t(v.dtype));
      int32_t& d = dtype[size_t(p.elem_at)];
      if (d >= 0 && d != dt)
        return make_error(TC_ERR_UNSUPPORTED_DTYPE, "%s: %s is %s, another operand of the same element type is not",
                          name, p.name.c_str(), dtype_name(int32_t(v.dtype)));
      d = dt;
    }
  }
  std::vector<Wrapped> wrapped(n);
  std::vector<tc_op_value> args(n);
  for (size_t i = 0; i < n; ++i) {
    const tc::sig::Param& p = op.params[i];
    tc_op_value& a = args[i];
    a = tc_op_value{nullptr, 0, 0.0};
    switch (p.kind) {
      case tc::sig::Param::Ctx: a.handle = dev->context(); break;
      case tc::sig::Param::Buffer:
        if (Error e = wrap(dev, *view[i], &wrapped[i]); !e.ok()) return e;
        a.handle = wrapped[i].buf;
        break;
      case tc::sig::Param::Dtype: a.i = dtype[i]; break;
      default:
        if (p.is_dim) {
          a.i = dim[i];
        } else {
          const double v = s.scalars.at(p.name);
          a.i = int64_t(v);
          a.f = v;
        }
    }
  }
  tc_status st = tc_op_call(op.c_name.c_str(), args.data(), int32_t(n), nullptr);
  if (st != TC_OK) return make_error(st, "%s: %s", op.c_name.c_str(), tc_last_error_detail());
  return {};
}

const Builtin kBuiltins[] = {
    {"gemm", "transpose_a, transpose_b (0/1), alpha, beta (numbers), accum (f32/f16/i32), allow_tf32 (0/1)",
     gemm_prepare_2d, gemm_run},
    {"gemm_batched", "as gemm; views are [batch, rows, cols]", gemm_prepare_3d, gemm_run},
};

// The op table's entries that a built-in can run generically: every buffer
// shaped by the signature, no descriptor.
const std::deque<TableOp>& table_ops() {
  static const std::deque<TableOp> ops = [] {
    std::deque<TableOp> out;
    for (int32_t i = 0; i < tc_op_entry_count(); ++i) {
      const std::string row = tc_op_entry(i);
      const size_t a = row.find('|'), b = row.find('|', a + 1), c = row.find('|', b + 1);
      if (a == std::string::npos || b == std::string::npos || c == std::string::npos) continue;
      TableOp op;
      op.c_name = row.substr(0, a);
      op.name = op.c_name.substr(3);
      try {
        op.params = tc::sig::parse(op.c_name.c_str(), row.c_str() + c + 1);
      } catch (const std::exception&) {
        continue;
      }
      bool generic = true;
      for (const Builtin& fixed : kBuiltins) generic = generic && op.name != fixed.name;
      for (const tc::sig::Param& p : op.params)
        generic = generic && p.kind != tc::sig::Param::Desc && p.kind != tc::sig::Param::Quant &&
                  (p.kind != tc::sig::Param::Buffer || p.ruled);
      if (!generic) continue;
      op.help = "tensors: ";
      std::string scalars;
      for (const tc::sig::Param& p : op.params) {
        if (p.kind == tc::sig::Param::Buffer) op.help += p.name + " ";
        else if (p.kind != tc::sig::Param::Ctx && p.kind != tc::sig::Param::Dtype && !p.is_dim)
          scalars += (scalars.empty() ? "" : ", ") + p.name;
      }
      op.help += "; parameters: " + (scalars.empty() ? std::string("none") : scalars);
      out.push_back(std::move(op));
    }
    for (TableOp& op : out) op.builtin = {op.name.c_str(), op.help.c_str(), table_prepare, table_run, &op};
    return out;
  }();
  return ops;
}

}  // namespace

const Builtin* find_builtin(const std::string& name) {
  for (const Builtin& b : kBuiltins)
    if (name == b.name) return &b;
  for (const TableOp& op : table_ops())
    if (name == op.name) return &op.builtin;
  return nullptr;
}

std::string builtin_names() {
  std::string s;
  for (const Builtin& b : kBuiltins) s += (s.empty() ? "" : ", ") + std::string(b.name);
  for (const TableOp& op : table_ops()) s += ", " + op.name;
  return s;
}

Error run_builtin(const KernelRef& k, const TaskSlot& t, Device* dev) {
  return k.builtin->run(k.builtin_state.get(), t, dev);
}

}  // namespace simpler
