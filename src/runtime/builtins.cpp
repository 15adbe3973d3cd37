#include "runtime/builtins.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>

#include "core/dtypes.h"
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

Error gemm_prepare_2d(const std::string& p, std::vector<int32_t>* sig, std::shared_ptr<const void>* st) {
  return gemm_prepare(false, p, sig, st);
}
Error gemm_prepare_3d(const std::string& p, std::vector<int32_t>* sig, std::shared_ptr<const void>* st) {
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

const Builtin kBuiltins[] = {
    {"gemm", "transpose_a, transpose_b (0/1), alpha, beta (numbers), accum (f32/f16/i32), allow_tf32 (0/1)",
     gemm_prepare_2d, gemm_run},
    {"gemm_batched", "as gemm; views are [batch, rows, cols]", gemm_prepare_3d, gemm_run},
};

}  // namespace

const Builtin* find_builtin(const std::string& name) {
  for (const Builtin& b : kBuiltins)
    if (name == b.name) return &b;
  return nullptr;
}

std::string builtin_names() {
  std::string s;
  for (const Builtin& b : kBuiltins) s += (s.empty() ? "" : ", ") + std::string(b.name);
  return s;
}

Error run_builtin(const KernelRef& k, const TaskSlot& t, Device* dev) {
  return k.builtin->run(k.builtin_state.get(), t, dev);
}

}  // namespace simpler
