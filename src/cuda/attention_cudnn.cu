// Attention through cuDNN's fused flash-attention engines (cuDNN 9 backend
// graph API, plain C; semantics: tensorcore/attention.h).
//
// cuDNN has no single "attention" call in the versions this targets: its
// fused SDPA engines recognise an operation graph of a fixed shape, the one
// the cudnn-frontend library emits. We build that graph ourselves.
//
// Forward ("cudnn_sdpa_fprop"), all intermediates virtual, f32 unless said:
//   S    = matmul(Q, K^T)          K^T: K's buffer seen as [B, Hkv, D, Skv]
//                                  (strides swapped); GQA by head broadcast
//   S    = S * scale               pointwise MUL, scale a by-value f32
//   S    = select(S, -FLT_MAX, m)  causal (or window): m = (r >= c) from
//                                  GEN_INDEX rows r and columns c (int32);
//                                  bottom-right alignment as r + Skv - Sq
//                                  (pointwise ADD/SUB of by-value int32s)
//   S    = select(S, -2^30, w)     window W only: w = (c + W - Skv + Sq > r)
//                                  on f32 GEN_INDEX rows/columns (ADD of a
//                                  by-value f32), i.e. keys j > p - W
//   M    = max_j S                 reduction MAX -> [B, H, Sq, 1]
//   E    = exp(S - M)              pointwise SUB, EXP
//   Z    = sum_j E                 reduction ADD -> [B, H, Sq, 1]
//   LSE  = M + log Z               pointwise LOG, ADD: the "Stats" output,
//                                  natural log, f32 [B, H, Sq, 1], i.e. our
//                                  LSE buffer (virtual when no LSE is wanted)
//   P    = E / Z                   pointwise DIV, stored in the io dtype
//   O    = matmul(P, V)
//
// Backward ("cudnn_sdpa_bprop"), with the forward's LSE:
//   Dd   = sum_d dO * O  (* 1)     MUL, reduction ADD, MUL by a by-value 1;
//                                  non-virtual f32 [B, H, Sq, 1] in workspace
//   P    = exp(scale Q K^T - LSE)  matmul, MUL, SUB, [causal/window selects], EXP
//   dV   = P^T dO                  P^T: a reshape of P to [B, H, Skv, Sq]
//                                  with swapped strides, io dtype
//   dS   = (dO V^T * 1 - Dd) * P * scale
//   dK   = dS^T Q                  dS^T: reshape as for P^T, io dtype
//   dQacc= dS K                    K: a reshape of K^T back to [B,Hkv,Skv,D];
//                                  dQacc non-virtual f32 in workspace (we
//                                  zero it before cuDNN 9.6; later cuDNN
//                                  does),
//   dQ   = identity(dQacc)         converted to the io dtype
// With GQA (H > Hkv) dV and dK are first formed per query head ([B, H, Skv,
// D], io dtype, virtual) and summed over the group by a reduction ADD into
// [B, Hkv, Skv, D], as cuDNN's engines expect.
//
// What cuDNN runs (otherwise our kernels, attention.cu / attention_backward.cu):
// f16/bf16, Sq > 1 (not decode steps), head_dim % 8 == 0 and <= 256 (<= 128
// for the backward before sm_90), sm_80 or later, no ALiBi, 16-byte aligned buffers; causal or a
// window (which never looks ahead, so it brings the causal mask) only with
// Sq <= Skv (cuDNN's bottom-right mask cannot give rows that see no key O = 0
// and LSE = -inf), and with Sq < Skv only from cuDNN 9.3 (before 9.6 only
// with Sq and Skv multiples of 64, and no window); a window from cuDNN 9.2;
// not on cuDNN 9.10.0/9.10.1 (known SDPA bugs there). Masked scores are large
// negative numbers, not -inf, as cuDNN expects: every row here sees at least
// one key (key p itself), so that changes nothing.
//
// Plans: one per (direction, dtype, B, H, Hkv, Sq, Skv, D, K/V rows a kv
// head, causal, window or not, LSE on/off, device), whose build starts at the shape's
// TC_CUDNN_PLAN_AFTER-th call (64 by default: a model's forward calls one
// shape per layer, so a prompt length met once stays on our kernels) from
// the first engine configs of CUDNN_HEUR_MODE_A that finalise (up to
// kMaxCandidates, timed against each other at the first call that runs the
// plan: tune()) and cached with the largest workspace among them; a shape no
// engine takes is cached as unsupported (at most kMaxPlans shapes; beyond,
// our kernels). cuDNN compiles its engines as it finalises them (0.1-2 s a
// shape), so by default the build runs on a helper thread (PlanBuilder) and
// the shape's calls go on through our kernels until it is ready: no call
// waits for a compiler. The
// softmax scale and the window length are by-value inputs, so they are not
// part of the key. Execution runs on the caller's stream with the per-stream
// scratch as workspace. TC_CUDA_ATTENTION_CUDNN=0 turns this path off;
// TC_CUDNN_DEBUG=1 prints to stderr which step or engine rejected a shape
// and which engine was chosen.
#include "cuda/attention_cudnn.h"

#include "core/config.h"
#include "cuda/device.h"

#ifndef TC_HAVE_CUDNN

namespace tc {
namespace cuda {
bool try_cudnn_forward(StreamState*, const AttentionArgs&, tc_status*) { return false; }
bool try_cudnn_backward(StreamState*, const AttentionBackwardArgs&, tc_status*) { return false; }
void drain_cudnn_builds(int) {}
}  // namespace cuda
}  // namespace tc

#else

#include <cudnn.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cfloat>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "core/error.h"

#if CUDNN_MAJOR < 9
#error "the cuDNN attention path needs the cuDNN 9 backend API (cudnn_graph.h)"
#endif

namespace tc {
namespace cuda {
namespace {

using Desc = cudnnBackendDescriptor_t;
using Dims = std::array<int64_t, 4>;

bool debug_on() {
  static const bool on = config::on(config::Key::kCudnnDebug);
  return on;
}

void debug(const char* fmt, ...) {
  if (!debug_on()) return;
  va_list ap;
  va_start(ap, fmt);
  std::fputs("[tensorcore cudnn] ", stderr);
  std::vfprintf(stderr, fmt, ap);
  std::fputc('\n', stderr);
  va_end(ap);
}

// "CUDNN_STATUS_X (cuDNN's last error message)".
std::string status_text(cudnnStatus_t st) {
  std::string m = cudnnGetErrorString(st);
  char last[1024] = {0};
  cudnnGetLastErrorString(last, sizeof last);
  if (last[0]) m += std::string(" (") + last + ")";
  return m;
}

// ---- the plan cache ------------------------------------------------------------------------

struct Key {
  int device;
  bool backward;
  int dtype;
  int64_t B, H, Hkv, Sq, Skv, D;
  int64_t kv_rows;  // K / V rows between kv heads (AttentionArgs::kv_rows; Skv when packed)
  bool causal, window, lse;  // causal: the right-bound mask (also set by a window)
  bool operator<(const Key& o) const {
    return std::tie(device, backward, dtype, B, H, Hkv, Sq, Skv, D, kv_rows, causal, window, lse) <
           std::tie(o.device, o.backward, o.dtype, o.B, o.H, o.Hkv, o.Sq, o.Skv, o.D, o.kv_rows, o.causal, o.window,
                    o.lse);
  }
};

// A finalised execution plan, or the reason there is none (empty while its
// build is in flight on the helper thread). Owns every descriptor the graph
// was built from (the plan refers to them).
struct Plan {
  bool ok = false;
  std::string why;  // when !ok: the step that failed and cuDNN's status
  Desc plan = nullptr;  // the one executed: candidates[0] until tuned
  int64_t workspace = 0;  // the most any candidate needs
  std::vector<Desc> candidates;  // finalised plans, in the heuristics' order
  bool tuned = false;
  std::vector<Desc> owned;
  ~Plan() {
    for (auto it = owned.rbegin(); it != owned.rend(); ++it) cudnnBackendDestroyDescriptor(*it);
  }
};

// Two locks: `mu` for the cache (taken first, held through a call), and
// `cudnn_mu` for cuDNN's handles, held by whoever builds, tunes or executes
// with one (a handle is not thread-safe). The helper thread holds cudnn_mu
// through a build and takes mu only after releasing it, so a caller holding
// mu can wait for cudnn_mu without a deadlock.
struct State {
  std::mutex mu;
  std::map<Key, std::unique_ptr<Plan>> plans;
  std::map<Key, int64_t> calls;  // shapes without a plan yet: calls so far (TC_CUDNN_PLAN_AFTER)
  bool cap_noted = false;
  std::mutex cudnn_mu;
  std::map<int, cudnnHandle_t> handles;  // one per device, under cudnn_mu
  std::map<int, std::string> handle_failed;
};

// Shapes (with their verdicts) kept; a workload cycling through more shapes
// than this runs the rest on our kernels.
constexpr size_t kMaxPlans = 1024;

// Never destroyed: descriptors and handles would otherwise be released after
// the CUDA runtime during process exit.
State& state() {
  static State* s = new State;
  return *s;
}

// ---- building a graph ----------------------------------------------------------------------

// Records the first failure (which step, cuDNN's status) and turns every
// later call into a no-op, so a build reads as straight-line code.
class Builder {
 public:
  explicit Builder(Plan* p) : p_(p) {}
  bool ok() const { return st_ == CUDNN_STATUS_SUCCESS; }
  const std::string& why() const { return why_; }
  std::vector<Desc>& ops() { return ops_; }

  Desc create(cudnnBackendDescriptorType_t type, const char* what) {
    if (!ok()) return nullptr;
    Desc d = nullptr;
    note(cudnnBackendCreateDescriptor(type, &d), what, "create");
    if (d) p_->owned.push_back(d);
    return d;
  }
  void set(Desc d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
           const void* values, const char* what) {
    if (ok()) note(cudnnBackendSetAttribute(d, name, type, count, values), what, "set attribute");
  }
  void link(Desc d, cudnnBackendAttributeName_t name, Desc value, const char* what) {
    set(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value, what);
  }
  void finalize(Desc d, const char* what) {
    if (ok()) note(cudnnBackendFinalize(d), what, "finalize");
  }

  // A tensor of rank 4; every tensor of the graph has a unique id (the
  // variant pack binds the non-virtual ones by it).
  Desc tensor(int64_t uid, cudnnDataType_t type, const Dims& dims, const Dims& strides, bool is_virtual,
              bool by_value, const char* what) {
    Desc t = create(CUDNN_BACKEND_TENSOR_DESCRIPTOR, what);
    const int64_t alignment = 16;
    set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, what);
    set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, what);
    set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data(), what);
    set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data(), what);
    set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment, what);
    set(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual, what);
    set(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, what);
    finalize(t, what);
    return t;
  }
  Desc io(int64_t uid, cudnnDataType_t type, const Dims& dims, const Dims& strides, const char* what) {
    return tensor(uid, type, dims, strides, false, false, what);
  }
  Desc scalar(int64_t uid, cudnnDataType_t type, const char* what) {
    return tensor(uid, type, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true, what);
  }
  Desc virt(cudnnDataType_t type, const Dims& dims, const char* what) { return virt(type, dims, packed(dims), what); }
  Desc virt(cudnnDataType_t type, const Dims& dims, const Dims& strides, const char* what) {
    return tensor(next_virtual_++, type, dims, strides, true, false, what);
  }

  // y = op(x[, b[, t]]); `math` is the compute type, `axis` GEN_INDEX's.
  void pointwise(cudnnPointwiseMode_t mode, Desc x, Desc b, Desc t, Desc y, cudnnDataType_t math, const char* what,
                 int64_t axis = -1) {
    Desc pw = create(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, what);
    set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, what);
    set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math, what);
    if (axis >= 0) set(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, what);
    finalize(pw, what);
    operation(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR,
              {{CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw},
               {CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x},
               {CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b},
               {CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t},
               {CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y}},
              what);
  }
  void reduction(cudnnReduceTensorOp_t mode, Desc x, Desc y, const char* what) {
    Desc r = create(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, what);
    set(r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode, what);
    set(r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &kF32, what);
    finalize(r, what);
    operation(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR,
              {{CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x},
               {CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y},
               {CUDNN_ATTR_OPERATION_REDUCTION_DESC, r}},
              what);
  }
  // c = a b over the last two dims, batched over the first two (b's head
  // dimension may divide a's: the GQA broadcast).
  void matmul(Desc a, Desc b, Desc c, const char* what) {
    Desc m = create(CUDNN_BACKEND_MATMUL_DESCRIPTOR, what);
    set(m, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &kF32, what);
    finalize(m, what);
    operation(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR,
              {{CUDNN_ATTR_OPERATION_MATMUL_ADESC, a},
               {CUDNN_ATTR_OPERATION_MATMUL_BDESC, b},
               {CUDNN_ATTR_OPERATION_MATMUL_CDESC, c},
               {CUDNN_ATTR_OPERATION_MATMUL_DESC, m}},
              what);
  }
  void reshape(Desc x, Desc y, const char* what) {
    operation(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR,
              {{CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x}, {CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y}}, what);
  }

  static Dims packed(const Dims& d) { return {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1}; }

 private:
  static constexpr cudnnDataType_t kF32 = CUDNN_DATA_FLOAT;  // the compute type of reductions and matmuls

  // An operation node: its descriptors linked in order (null ones, optional
  // operands, left out), finalised and added to the graph's operations.
  void operation(cudnnBackendDescriptorType_t type,
                 std::initializer_list<std::pair<cudnnBackendAttributeName_t, Desc>> links, const char* what) {
    Desc op = create(type, what);
    for (const auto& l : links)
      if (l.second) link(op, l.first, l.second, what);
    finalize(op, what);
    ops_.push_back(op);
  }

  void note(cudnnStatus_t st, const char* what, const char* step) {
    if (st == CUDNN_STATUS_SUCCESS) return;
    st_ = st;
    why_ = std::string(what) + ": " + step + ": " + status_text(st);
  }
  Plan* p_;
  cudnnStatus_t st_ = CUDNN_STATUS_SUCCESS;
  std::string why_;
  std::vector<Desc> ops_;
  int64_t next_virtual_ = 1000;
};

// Tensor ids of the variant pack.
enum Uid : int64_t {
  kQ = 1, kK, kV, kO, kStats, kScale, kSkv, kSq, kMaskFill, kDO, kDQ, kDK, kDV, kOne, kDd, kDQAcc, kWindow,
  kWindowFill,
};

// The by-value scalars, in host memory for cudnnBackendExecute to read.
struct Scalars {
  float scale = 1.0f, one = 1.0f, fill = -FLT_MAX, window = 0.0f, window_fill = -1073741824.0f;
  int32_t skv = 0, sq = 0;
};

// Causal mask on scores `s` [B, H, Sq, Skv]: keeps column c of row r where
// r + (Skv - Sq) >= c, else -FLT_MAX. With Sq == Skv the shift is left out
// (the top-left form every cuDNN 9 takes).
Desc causal_mask(Builder& g, Desc s, const Dims& sdims, const Key& k) {
  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT, i32 = CUDNN_DATA_INT32;
  Desc row = g.virt(i32, sdims, "causal: row index");
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, s, nullptr, nullptr, row, f32, "causal: row index", 2);
  Desc col = g.virt(i32, sdims, "causal: column index");
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, s, nullptr, nullptr, col, f32, "causal: column index", 3);
  if (k.Sq != k.Skv) {
    Desc skv = g.scalar(kSkv, i32, "causal: Skv scalar");
    Desc sq = g.scalar(kSq, i32, "causal: Sq scalar");
    Desc r1 = g.virt(i32, sdims, "causal: row + Skv");
    g.pointwise(CUDNN_POINTWISE_ADD, row, skv, nullptr, r1, i32, "causal: row + Skv");
    Desc r2 = g.virt(i32, sdims, "causal: row + Skv - Sq");
    g.pointwise(CUDNN_POINTWISE_SUB, r1, sq, nullptr, r2, i32, "causal: row + Skv - Sq");
    row = r2;
  }
  Desc keep = g.virt(CUDNN_DATA_BOOLEAN, sdims, "causal: row >= column");
  g.pointwise(CUDNN_POINTWISE_CMP_GE, row, col, nullptr, keep, CUDNN_DATA_BOOLEAN, "causal: row >= column");
  Desc fill = g.scalar(kMaskFill, f32, "causal: fill scalar");
  Desc out = g.virt(f32, sdims, "causal: select");
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, s, fill, keep, out, f32, "causal: select");
  return out;
}

// Window on scores `s` already causally masked: keeps column c of row r
// where c + W - Skv + Sq > r (key j > p - W), else -2^30. The indices are
// f32 here, as in the pattern cuDNN matches (exact below 2^24).
Desc window_mask(Builder& g, Desc s, const Dims& sdims) {
  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
  Desc row = g.virt(f32, sdims, "window: row index");
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, s, nullptr, nullptr, row, f32, "window: row index", 2);
  Desc col = g.virt(f32, sdims, "window: column index");
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, s, nullptr, nullptr, col, f32, "window: column index", 3);
  Desc shift = g.scalar(kWindow, f32, "window: W - Skv + Sq scalar");
  Desc c1 = g.virt(f32, sdims, "window: column + W - Skv + Sq");
  g.pointwise(CUDNN_POINTWISE_ADD, col, shift, nullptr, c1, f32, "window: column + W - Skv + Sq", 3);
  Desc keep = g.virt(CUDNN_DATA_BOOLEAN, sdims, "window: column + W - Skv + Sq > row");
  g.pointwise(CUDNN_POINTWISE_CMP_GT, c1, row, nullptr, keep, CUDNN_DATA_BOOLEAN,
              "window: column + W - Skv + Sq > row");
  Desc fill = g.scalar(kWindowFill, f32, "window: fill scalar");
  Desc out = g.virt(f32, sdims, "window: select");
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, s, fill, keep, out, f32, "window: select");
  return out;
}

cudnnDataType_t io_type(const Key& k) { return k.dtype == TC_DTYPE_F16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16; }

void build_forward(Builder& g, const Key& k) {
  const cudnnDataType_t io = io_type(k), f32 = CUDNN_DATA_FLOAT;
  const int64_t B = k.B, H = k.H, G = k.Hkv, Sq = k.Sq, Skv = k.Skv, D = k.D;
  const Dims qd{B, H, Sq, D}, sd{B, H, Sq, Skv}, rd{B, H, Sq, 1};
  Desc q = g.io(kQ, io, qd, Builder::packed(qd), "Q");
  const int64_t R = k.kv_rows;  // K / V rows a kv head (Skv when packed; a cache's n_ctx read in place)
  Desc kt = g.io(kK, io, {B, G, D, Skv}, {G * R * D, R * D, 1, D}, "K^T");
  Desc v = g.io(kV, io, {B, G, Skv, D}, {G * R * D, R * D, D, 1}, "V");
  Desc o = g.io(kO, io, qd, Builder::packed(qd), "O");
  Desc scale = g.scalar(kScale, f32, "scale scalar");

  Desc s = g.virt(f32, sd, "S = Q K^T");
  g.matmul(q, kt, s, "S = Q K^T");
  Desc ss = g.virt(f32, sd, "S * scale");
  g.pointwise(CUDNN_POINTWISE_MUL, s, scale, nullptr, ss, f32, "S * scale");
  if (k.causal) ss = causal_mask(g, ss, sd, k);
  if (k.window) ss = window_mask(g, ss, sd);

  Desc m = g.virt(f32, rd, "softmax: row max");
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, ss, m, "softmax: row max");
  Desc x = g.virt(f32, sd, "softmax: S - max");
  g.pointwise(CUDNN_POINTWISE_SUB, ss, m, nullptr, x, f32, "softmax: S - max");
  Desc e = g.virt(f32, sd, "softmax: exp");
  g.pointwise(CUDNN_POINTWISE_EXP, x, nullptr, nullptr, e, f32, "softmax: exp");
  Desc z = g.virt(f32, rd, "softmax: row sum");
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, z, "softmax: row sum");
  Desc lz = g.virt(f32, rd, "softmax: log sum");
  g.pointwise(CUDNN_POINTWISE_LOG, z, nullptr, nullptr, lz, f32, "softmax: log sum");
  Desc stats = k.lse ? g.io(kStats, f32, rd, Builder::packed(rd), "LSE (stats)") : g.virt(f32, rd, "LSE (virtual)");
  g.pointwise(CUDNN_POINTWISE_ADD, m, lz, nullptr, stats, f32, "softmax: LSE = max + log sum");
  Desc p = g.virt(io, sd, "softmax: P = exp / sum");
  g.pointwise(CUDNN_POINTWISE_DIV, e, z, nullptr, p, f32, "softmax: P = exp / sum");
  g.matmul(p, v, o, "O = P V");
}

void build_backward(Builder& g, const Key& k) {
  const cudnnDataType_t io = io_type(k), f32 = CUDNN_DATA_FLOAT;
  const int64_t B = k.B, H = k.H, G = k.Hkv, Sq = k.Sq, Skv = k.Skv, D = k.D;
  const Dims qd{B, H, Sq, D}, kd{B, G, Skv, D}, sd{B, H, Sq, Skv}, rd{B, H, Sq, 1};
  const Dims ktd{B, G, D, Skv}, kts{G * Skv * D, Skv * D, 1, D};   // K, V seen transposed
  const Dims std_{B, H, Skv, Sq}, sts{H * Sq * Skv, Sq * Skv, 1, Skv};  // S^T over S's storage
  const Dims fd{B, H, Skv, D};                                       // dK, dV per query head (GQA)
  Desc q = g.io(kQ, io, qd, Builder::packed(qd), "Q");
  Desc kt = g.io(kK, io, ktd, kts, "K^T");
  Desc vt = g.io(kV, io, ktd, kts, "V^T");
  Desc o = g.io(kO, io, qd, Builder::packed(qd), "O");
  Desc d_o = g.io(kDO, io, qd, Builder::packed(qd), "dO");
  Desc stats = g.io(kStats, f32, rd, Builder::packed(rd), "LSE (stats)");
  Desc dq = g.io(kDQ, io, qd, Builder::packed(qd), "dQ");
  Desc dk = g.io(kDK, io, kd, Builder::packed(kd), "dK");
  Desc dv = g.io(kDV, io, kd, Builder::packed(kd), "dV");
  Desc scale = g.scalar(kScale, f32, "scale scalar");
  Desc one = g.scalar(kOne, f32, "one scalar");

  // Dd = rowsum(dO * O), kept in the workspace.
  Desc t = g.virt(f32, qd, "Dd: dO * O");
  g.pointwise(CUDNN_POINTWISE_MUL, d_o, o, nullptr, t, f32, "Dd: dO * O");
  Desc r = g.virt(f32, rd, "Dd: row sum");
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, t, r, "Dd: row sum");
  Desc dd = g.io(kDd, f32, rd, Builder::packed(rd), "Dd (workspace)");
  g.pointwise(CUDNN_POINTWISE_MUL, r, one, nullptr, dd, f32, "Dd: * 1");

  // P = exp(scale Q K^T - LSE), masked.
  Desc s = g.virt(f32, sd, "S = Q K^T");
  g.matmul(q, kt, s, "S = Q K^T");
  Desc ss = g.virt(f32, sd, "S * scale");
  g.pointwise(CUDNN_POINTWISE_MUL, s, scale, nullptr, ss, f32, "S * scale");
  Desc sl = g.virt(f32, sd, "S - LSE");
  g.pointwise(CUDNN_POINTWISE_SUB, ss, stats, nullptr, sl, f32, "S - LSE");
  if (k.causal) sl = causal_mask(g, sl, sd, k);
  if (k.window) sl = window_mask(g, sl, sd);
  Desc p = g.virt(f32, sd, "P = exp");
  g.pointwise(CUDNN_POINTWISE_EXP, sl, nullptr, nullptr, p, f32, "P = exp");

  // out = x^T rhs, x^T through a reshape; with GQA per query head, then
  // summed over each kv head's group.
  auto transposed_product = [&](Desc x, Desc rhs, Desc out, const char* what) {
    Desc xt = g.virt(io, std_, sts, what);
    g.reshape(x, xt, what);
    if (H == G) {
      g.matmul(xt, rhs, out, what);
      return;
    }
    Desc per_head = g.virt(io, fd, what);
    g.matmul(xt, rhs, per_head, what);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, per_head, out, what);
  };
  transposed_product(p, d_o, dv, "dV = P^T dO");

  // dS = (dO V^T - Dd) * P * scale.
  Desc dp = g.virt(f32, sd, "dP = dO V^T");
  g.matmul(d_o, vt, dp, "dP = dO V^T");
  Desc dp1 = g.virt(f32, sd, "dP * 1");
  g.pointwise(CUDNN_POINTWISE_MUL, dp, one, nullptr, dp1, f32, "dP * 1");
  Desc dp2 = g.virt(f32, sd, "dP - Dd");
  g.pointwise(CUDNN_POINTWISE_SUB, dp1, dd, nullptr, dp2, f32, "dP - Dd");
  Desc dp3 = g.virt(f32, sd, "(dP - Dd) * P");
  g.pointwise(CUDNN_POINTWISE_MUL, dp2, p, nullptr, dp3, f32, "(dP - Dd) * P");
  Desc ds = g.virt(f32, sd, "dS = ... * scale");
  g.pointwise(CUDNN_POINTWISE_MUL, dp3, scale, nullptr, ds, f32, "dS = ... * scale");

  transposed_product(ds, q, dk, "dK = dS^T Q");

  // dQ = dS K through an f32 accumulator in the workspace.
  Desc kk = g.virt(f32, kd, Builder::packed(kd), "K (K^T reshaped back)");
  g.reshape(kt, kk, "K (K^T reshaped back)");
  Desc acc = g.io(kDQAcc, f32, qd, Builder::packed(qd), "dQ accumulator (workspace)");
  g.matmul(ds, kk, acc, "dQ accumulator = dS K");
  g.pointwise(CUDNN_POINTWISE_IDENTITY, acc, nullptr, nullptr, dq, f32, "dQ = dQ accumulator");
}

// Plans wanting more workspace than this are passed over (the fused
// engines need little; a larger figure means the scores are materialised).
constexpr int64_t kMaxWorkspace = int64_t(1) << 30;
// Finalised plans kept per shape for the first call to time.
constexpr size_t kMaxCandidates = 4;

// The operation graph, the heuristics' engine configs, and the first
// kMaxCandidates plans that finalise.
void finish(Builder& g, Plan* p, cudnnHandle_t handle, const char* dir) {
  Desc graph = g.create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
  g.set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, "operation graph");
  g.set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(g.ops().size()), g.ops().data(),
        "operation graph");
  g.finalize(graph, "operation graph");
  Desc heur = g.create(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics");
  g.link(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph, "heuristics");
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  g.set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics");
  g.finalize(heur, "heuristics");
  if (!g.ok()) {
    p->why = g.why();
    return;
  }
  int64_t count = 0;
  cudnnStatus_t st = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                              &count, nullptr);
  if (st != CUDNN_STATUS_SUCCESS || count <= 0) {
    p->why = st != CUDNN_STATUS_SUCCESS ? "heuristics: count results: " + status_text(st)
                                        : std::string("heuristics: no engine config for this graph");
    return;
  }
  std::vector<Desc> cfgs(size_t(count), nullptr);
  for (Desc& c : cfgs) c = g.create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config");
  if (!g.ok()) {
    p->why = g.why();
    return;
  }
  int64_t got = 0;
  st = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                                cfgs.data());
  if (st != CUDNN_STATUS_SUCCESS) {
    p->why = "heuristics: get results: " + status_text(st);
    return;
  }
  std::string tried;
  for (int64_t i = 0; i < got && i < count; ++i) {
    Desc plan = nullptr;
    st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan);
    if (st == CUDNN_STATUS_SUCCESS)
      st = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    if (st == CUDNN_STATUS_SUCCESS)
      st = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                    &cfgs[size_t(i)]);
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(plan);
    int64_t ws = 0, n = 0;
    if (st == CUDNN_STATUS_SUCCESS)
      st = cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws);
    if (st == CUDNN_STATUS_SUCCESS && ws > kMaxWorkspace) {
      // An engine that would materialise the scores is not what this path is for.
      tried += "; config " + std::to_string(i + 1) + ": workspace " + std::to_string(ws) + " bytes";
      debug("%s: engine config %lld of %lld skipped: workspace %lld bytes", dir, (long long)i + 1, (long long)got,
            (long long)ws);
      cudnnBackendDestroyDescriptor(plan);
      continue;
    }
    if (st == CUDNN_STATUS_SUCCESS) {
      p->owned.push_back(plan);
      p->candidates.push_back(plan);
      if (!p->plan) p->plan = plan;
      p->workspace = std::max<int64_t>(p->workspace, ws < 0 ? 0 : ws);
      p->ok = true;
      // Which engine, for the log (best effort).
      int64_t engine_index = -1;
      Desc engine = nullptr;
      if (debug_on() &&
          cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine) == CUDNN_STATUS_SUCCESS) {
        if (cudnnBackendGetAttribute(cfgs[size_t(i)], CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                     &n, &engine) == CUDNN_STATUS_SUCCESS)
          cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &engine_index);
        cudnnBackendDestroyDescriptor(engine);
      }
      debug("%s: engine config %lld of %lld finalised (global engine %lld), workspace %lld bytes%s", dir,
            (long long)i + 1, (long long)got, (long long)engine_index, (long long)ws, tried.c_str());
      if (p->candidates.size() >= kMaxCandidates) return;
      continue;
    }
    const std::string why = status_text(st);
    tried += "; config " + std::to_string(i + 1) + ": " + why;
    debug("%s: engine config %lld of %lld rejected: %s", dir, (long long)i + 1, (long long)got, why.c_str());
    if (plan) cudnnBackendDestroyDescriptor(plan);
  }
  if (!p->ok) p->why = "no engine config finalised (" + std::to_string(got) + " tried" + tried + ")";
}

// ---- when cuDNN is asked at all --------------------------------------------------------------

int runtime_version() {
  static const int v = int(cudnnGetVersion());
  return v;
}

// Whether cuDNN's engines take the case, from what the key holds only (the
// verdict is cached per key); ALiBi is ruled out per call.
const char* unsupported(const tc_attention_desc& d, bool backward, int device) {
  if (d.dtype != TC_DTYPE_F16 && d.dtype != TC_DTYPE_BF16) return "dtype is not f16/bf16";
  if (d.head_dim % 8 != 0 || d.head_dim > 256) return "head_dim is not a multiple of 8 up to 256";
  // A decode loop changes Skv every step: a plan per step would cost far more
  // to build than our kernels take to run.
  if (d.seq_q == 1) return "decode (Sq == 1)";
  const int v = runtime_version();
  if (v < 90000) return "cuDNN runtime older than 9.0";
  if (v == 91000 || v == 91001) return "cuDNN 9.10.0/9.10.1 (known SDPA bugs)";
  int major = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    cudaGetLastError();
    return "compute capability unknown";
  }
  if (major < 8) return "GPU older than sm_80";
  if (backward && major < 9 && d.head_dim > 128) return "backward head_dim > 128 before sm_90";
  const bool window = d.window_size > 0;
  if (window && v < 90200) return "a window needs cuDNN 9.2";
  if (window && d.seq_kv >= (int64_t(1) << 24)) return "a window with Skv >= 2^24 (f32 indices)";
  if ((d.causal || window) && d.seq_q != d.seq_kv) {
    if (d.seq_q > d.seq_kv) return "causal or window with Sq > Skv (rows without keys)";
    if (v < 90300) return "bottom-right causal needs cuDNN 9.3";
    if (v < 90600 && (d.seq_q % 64 != 0 || d.seq_kv % 64 != 0))
      return "bottom-right causal with Sq or Skv not a multiple of 64 needs cuDNN 9.6";
    if (v < 90600 && window) return "a window with Sq != Skv needs cuDNN 9.6";
  }
  return nullptr;
}

const char* direction(const Key& k) { return k.backward ? "bprop" : "fprop"; }

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &cap) == cudaSuccess) return cap != cudaStreamCaptureStatusNone;
  cudaGetLastError();
  return true;  // unknown: take the path that is safe under capture
}

void note_unsupported(const Key& k, const Plan& p) {
  debug("%s B=%lld H=%lld Hkv=%lld Sq=%lld Skv=%lld D=%lld %s causal=%d window=%d lse=%d: not supported, "
        "using our kernels: %s",
        direction(k), (long long)k.B, (long long)k.H, (long long)k.Hkv, (long long)k.Sq, (long long)k.Skv,
        (long long)k.D, k.dtype == TC_DTYPE_F16 ? "f16" : "bf16", int(k.causal), int(k.window), int(k.lse),
        p.why.c_str());
}

// Builds k's plan on the device's handle (created at its first build), on
// whichever thread calls: state().cudnn_mu held, state().mu not needed.
std::unique_ptr<Plan> build_plan_locked(const Key& k) {
  State& S = state();
  std::unique_ptr<Plan> p(new Plan);
  if (cudaSetDevice(k.device) != cudaSuccess) {
    cudaGetLastError();
    p->why = "cudaSetDevice failed";
    return p;
  }
  if (S.handle_failed.count(k.device)) {
    p->why = S.handle_failed[k.device];
    return p;
  }
  if (!S.handles.count(k.device)) {
    cudnnHandle_t h = nullptr;
    cudnnStatus_t st = cudnnCreate(&h);
    if (st != CUDNN_STATUS_SUCCESS) {
      S.handle_failed[k.device] = "cudnnCreate: " + status_text(st);
      p->why = S.handle_failed[k.device];
      return p;
    }
    S.handles[k.device] = h;
    debug("cuDNN %d (built against %d.%d.%d) on device %d", runtime_version(), CUDNN_MAJOR, CUDNN_MINOR,
          CUDNN_PATCHLEVEL, k.device);
  }
  const auto t0 = std::chrono::steady_clock::now();
  Builder g(p.get());
  if (k.backward)
    build_backward(g, k);
  else
    build_forward(g, k);
  if (!g.ok())
    p->why = g.why();
  else
    finish(g, p.get(), S.handles[k.device], direction(k));
  debug("%s Sq=%lld Skv=%lld: plan built in %.1f ms", direction(k), (long long)k.Sq, (long long)k.Skv,
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  return p;
}

// build_plan_locked under the handles' lock, a rejection logged.
std::unique_ptr<Plan> build_plan(const Key& k) {
  std::unique_ptr<Plan> p;
  {
    std::lock_guard<std::mutex> handles(state().cudnn_mu);
    p = build_plan_locked(k);
  }
  if (!p->ok) note_unsupported(k, *p);
  return p;
}

// The helper thread that builds queued shapes' plans, one at a time, and
// puts each in the cache in place of its in-flight entry. Started by the
// first shape queued. A device's destruction drains its builds: processes
// that exited with a build in flight ended in a segmentation fault after
// their work was done (libraries cuDNN loaded during the build, on this
// thread, are torn down at exit while it runs). Never destroyed, never
// joined: at exit the thread waits idle and ends with the process, its own
// exit never running under torn-down libraries. A child
// forked from the process has no such thread (nor a usable CUDA context):
// builds in flight at the fork never land there.
class PlanBuilder {
 public:
  // state().mu held.
  void enqueue(const Key& k) {
    queue_.push_back(k);
    if (!owner_) {
      owner_ = getpid();
      std::thread([this] { loop(); }).detach();
    }
    wake_.notify_one();
  }
  // state().mu not held.
  void drain(int device) {
    State& S = state();
    std::unique_lock<std::mutex> lock(S.mu);
    if (getpid() != owner_) return;  // never started (or not in this process)
    for (auto it = queue_.begin(); it != queue_.end();) {
      if (it->device != device) {
        ++it;
        continue;
      }
      S.plans.erase(*it);  // not built: the shape counts its calls again
      it = queue_.erase(it);
    }
    idle_.wait(lock, [&] { return building_ != device; });
  }

 private:
  void loop() {
    State& S = state();
    std::unique_lock<std::mutex> lock(S.mu);
    for (;;) {
      wake_.wait(lock, [this] { return !queue_.empty(); });
      const Key k = queue_.front();
      queue_.pop_front();
      building_ = k.device;
      lock.unlock();
      std::unique_ptr<Plan> p = build_plan(k);
      lock.lock();
      S.plans[k] = std::move(p);
      building_ = -1;
      idle_.notify_all();
    }
  }
  pid_t owner_ = 0;               // the process that started the thread (0: none yet)
  std::condition_variable wake_;  // waits on state().mu
  std::condition_variable idle_;  // a build finished (drain)
  int building_ = -1;             // the device of the build in flight
  std::deque<Key> queue_;
};

PlanBuilder& plan_builder() {
  static PlanBuilder* b = new PlanBuilder;
  return *b;
}

}  // namespace

void drain_cudnn_builds(int device) { plan_builder().drain(device); }

namespace {

// The cached plan for `k`, or null while the shape runs on our kernels:
// cuDNN does not take it (the reason goes to the TC_CUDNN_DEBUG log once),
// it has not reached its TC_CUDNN_PLAN_AFTER-th call, or its plan is being
// built on the helper thread. Called with state().mu held.
Plan* plan_for(const Key& k, const tc_attention_desc& d, cudaStream_t stream) {
  State& S = state();
  auto it = S.plans.find(k);
  if (it != S.plans.end()) return it->second->ok ? it->second.get() : nullptr;
  if (S.plans.size() >= kMaxPlans) {
    // Shapes beyond the cap run on our kernels rather than building forever.
    if (!S.cap_noted) debug("plan cache full (%zu shapes): new shapes use our kernels", S.plans.size());
    S.cap_noted = true;
    return nullptr;
  }
  // Building calls into cuDNN in ways a stream capture would not allow;
  // while capturing, an unbuilt shape runs on our kernels (not cached).
  if (capturing(stream)) return nullptr;
  if (const char* no = unsupported(d, k.backward, k.device)) {
    std::unique_ptr<Plan> p(new Plan);
    p->why = no;
    note_unsupported(k, *p);
    S.plans.emplace(k, std::move(p));
    return nullptr;
  }
  // A shape runs on our kernels until its TC_CUDNN_PLAN_AFTER-th call, so
  // shapes met in one forward only (a new prompt length: one call a layer)
  // never pay for a plan.
  const int64_t after = config::number(config::Key::kCudnnPlanAfter);
  if (after > 1) {
    if (S.calls.size() >= kMaxPlans * 4) S.calls.clear();  // shapes that did not come back
    if (++S.calls[k] < after) return nullptr;
    S.calls.erase(k);
  }
  if (config::on(config::Key::kCudnnPlanBackground)) {
    S.plans.emplace(k, std::unique_ptr<Plan>(new Plan));  // in flight: not ok, no reason yet
    plan_builder().enqueue(k);
    return nullptr;
  }
  Plan* built = S.plans.emplace(k, build_plan(k)).first->second.get();
  return built->ok ? built : nullptr;
}

// The handle lock for running k's plan: waited for when builds run inline;
// with background builds, a call that finds the helper thread building runs
// on our kernels instead of waiting (owns_lock() false).
std::unique_lock<std::mutex> handle_lock() {
  State& S = state();
  if (!config::on(config::Key::kCudnnPlanBackground)) return std::unique_lock<std::mutex>(S.cudnn_mu);
  return std::unique_lock<std::mutex>(S.cudnn_mu, std::try_to_lock);
}

// A window never looks ahead, so it brings the causal (right-bound) mask.
Key make_key(int device, bool backward, const tc_attention_desc& d, bool lse, int64_t kv_rows) {
  const bool window = d.window_size > 0;
  return Key{device, backward, int(d.dtype), d.batch, d.heads, d.kv_heads, d.seq_q, d.seq_kv, d.head_dim, kv_rows,
             d.causal != 0 || window, window, lse};
}

bool aligned16(std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs)
    if (uintptr_t(p) & 15) return false;
  return true;
}

constexpr size_t kAlign = 256;
size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

tc_status cudnn_fail(cudnnStatus_t st, const char* what) {
  return fail(st == CUDNN_STATUS_ALLOC_FAILED ? TC_ERR_ALLOC : TC_ERR_DISPATCH, "%s: %s", what,
              status_text(st).c_str());
}

// Binds the buffers and runs the plan on s->stream (state().mu held).
tc_status execute(StreamState* s, cudnnHandle_t h, Desc plan, const std::vector<int64_t>& uids,
                  std::vector<void*>& ptrs, void* workspace, const char* what) {
  cudnnStatus_t st = cudnnSetStream(h, s->stream);
  if (st != CUDNN_STATUS_SUCCESS) return cudnn_fail(st, what);
  Desc pack = nullptr;
  st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, int64_t(uids.size()),
                                  uids.data());
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                                  int64_t(ptrs.size()), ptrs.data());
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(pack);
  if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendExecute(h, plan, pack);
  if (pack) cudnnBackendDestroyDescriptor(pack);
  // A launch failure inside cuDNN comes back as its status (EXECUTION_FAILED).
  return st == CUDNN_STATUS_SUCCESS ? TC_OK : cudnn_fail(st, what);
}

// The first call of a shape with several candidate plans times each on the
// call's own buffers (one warm-up, then kTuneRuns runs between two events)
// and keeps the fastest, as cuDNN's frontend autotuning does: the
// heuristics' first choice is not always the fastest on this GPU. Every
// candidate computes the same result, and the call's own execute follows,
// so the outputs are the plan's. A one-time host synchronisation per shape;
// TC_CUDNN_AUTOTUNE=0 keeps the heuristics' first plan.
constexpr int kTuneRuns = 3;

template <class Run>
tc_status tune(StreamState* s, Plan* p, const char* dir, Run&& run) {
  p->tuned = true;
  if (p->candidates.size() < 2 || !config::on(config::Key::kCudnnAutotune)) return TC_OK;
  const auto t0 = std::chrono::steady_clock::now();
  cudaEvent_t start = nullptr, stop = nullptr;
  if (cudaEventCreate(&start) != cudaSuccess || cudaEventCreate(&stop) != cudaSuccess) {
    if (start) cudaEventDestroy(start);
    cudaGetLastError();
    return TC_OK;  // no timing: keep the heuristics' choice
  }
  float best = 0.0f;
  Desc best_plan = p->plan;
  tc_status st = TC_OK;
  for (size_t i = 0; i < p->candidates.size() && st == TC_OK; ++i) {
    Desc c = p->candidates[i];
    if ((st = run(c)) != TC_OK) break;
    cudaEventRecord(start, s->stream);
    for (int r = 0; r < kTuneRuns && st == TC_OK; ++r) st = run(c);
    cudaEventRecord(stop, s->stream);
    float ms = 0.0f;
    if (st == TC_OK && cudaEventSynchronize(stop) == cudaSuccess && cudaEventElapsedTime(&ms, start, stop) == cudaSuccess) {
      debug("%s: candidate %zu of %zu: %.3f ms per run", dir, i + 1, p->candidates.size(), ms / kTuneRuns);
      if (i == 0 || ms < best) best = ms, best_plan = c;
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (st == TC_OK) {
    p->plan = best_plan;
    if (tc_status e = check(cudaGetLastError(), "cuDNN autotuning")) st = e;
  }
  debug("%s: %zu candidates timed in %.1f ms", dir, p->candidates.size(),
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  return st;
}

// Per call, before any cache lookup: the switch, and ALiBi, which the key
// does not hold (cuDNN's ALiBi uses its own slopes, not the caller's).
bool wanted(const float* alibi) { return config::on(config::Key::kCudaAttentionCudnn) && !alibi; }

}  // namespace

bool try_cudnn_forward(StreamState* s, const AttentionArgs& a, tc_status* out) {
  const tc_attention_desc& d = a.d;
  if (!wanted(a.alibi)) return false;
  if (!aligned16({a.q, a.k, a.v, a.o, a.lse})) return false;
  State& S = state();
  std::lock_guard<std::mutex> lock(S.mu);
  const Key k = make_key(s->device, false, d, a.lse != nullptr, a.kv_stride_rows());
  Plan* p = plan_for(k, d, s->stream);
  if (!p) return false;
  // A plan's first run times its candidates, synchronising with the host,
  // which a capture would not allow.
  if (!p->tuned && capturing(s->stream)) return false;
  std::unique_lock<std::mutex> handle = handle_lock();
  if (!handle.owns_lock()) return false;
  cudnnHandle_t h = S.handles[k.device];

  void* ws = nullptr;
  if (p->workspace > 0) {
    if (tc_status st = stream_scratch(s, size_t(p->workspace), "attention_forward: cuDNN workspace", &ws)) {
      *out = st;
      return true;
    }
  }
  Scalars c;
  c.scale = float(d.softmax_scale);
  c.skv = int32_t(d.seq_kv);
  c.sq = int32_t(d.seq_q);
  c.window = float(d.window_size - d.seq_kv + d.seq_q);
  std::vector<int64_t> uids{kQ, kK, kV, kO, kScale};
  std::vector<void*> ptrs{const_cast<void*>(a.q), const_cast<void*>(a.k), const_cast<void*>(a.v), a.o, &c.scale};
  if (a.lse) uids.push_back(kStats), ptrs.push_back(a.lse);
  if (k.causal) {
    uids.push_back(kMaskFill), ptrs.push_back(&c.fill);
    if (k.Sq != k.Skv) uids.insert(uids.end(), {kSkv, kSq}), ptrs.insert(ptrs.end(), {&c.skv, &c.sq});
  }
  if (k.window)
    uids.insert(uids.end(), {kWindow, kWindowFill}), ptrs.insert(ptrs.end(), {&c.window, &c.window_fill});
  s->last_kernel = "cudnn_sdpa_fprop";
  auto run = [&](Desc plan) { return execute(s, h, plan, uids, ptrs, ws, "attention_forward: cuDNN execute"); };
  if (!p->tuned) {
    if (tc_status st = tune(s, p, "fprop", run)) {
      *out = st;
      return true;
    }
  }
  *out = run(p->plan);
  return true;
}

bool try_cudnn_backward(StreamState* s, const AttentionBackwardArgs& a, tc_status* out) {
  const tc_attention_desc& d = a.d;
  if (!wanted(a.alibi)) return false;
  if (!aligned16({a.q, a.k, a.v, a.o, a.d_o, a.lse, a.dq, a.dk, a.dv})) return false;
  State& S = state();
  std::lock_guard<std::mutex> lock(S.mu);
  const Key k = make_key(s->device, true, d, true, d.seq_kv);
  Plan* p = plan_for(k, d, s->stream);
  if (!p) return false;
  // A plan's first run times its candidates, synchronising with the host,
  // which a capture would not allow.
  if (!p->tuned && capturing(s->stream)) return false;
  std::unique_lock<std::mutex> handle = handle_lock();
  if (!handle.owns_lock()) return false;
  cudnnHandle_t h = S.handles[k.device];

  // Workspace: the plan's, then Dd [B, H, Sq] and the dQ accumulator [B, H, Sq, D] (f32).
  const size_t rows = size_t(d.batch * d.heads * d.seq_q);
  const size_t plan_bytes = round_up(size_t(p->workspace)), dd_bytes = round_up(rows * sizeof(float));
  const size_t acc_bytes = rows * size_t(d.head_dim) * sizeof(float);
  void* ws = nullptr;
  if (tc_status st = stream_scratch(s, plan_bytes + dd_bytes + acc_bytes, "attention_backward: cuDNN workspace", &ws)) {
    *out = st;
    return true;
  }
  char* base = static_cast<char*>(ws);
  void* dd = base + plan_bytes;
  void* acc = base + plan_bytes + dd_bytes;
  Scalars c;
  c.scale = float(d.softmax_scale);
  c.skv = int32_t(d.seq_kv);
  c.sq = int32_t(d.seq_q);
  c.window = float(d.window_size - d.seq_kv + d.seq_q);
  std::vector<int64_t> uids{kQ, kK, kV, kO, kDO, kStats, kDQ, kDK, kDV, kScale, kOne, kDd, kDQAcc};
  std::vector<void*> ptrs{const_cast<void*>(a.q),   const_cast<void*>(a.k),   const_cast<void*>(a.v),
                          const_cast<void*>(a.o),   const_cast<void*>(a.d_o), const_cast<float*>(a.lse),
                          a.dq,                     a.dk,                     a.dv,
                          &c.scale,                 &c.one,                   dd,
                          acc};
  if (k.causal) {
    uids.push_back(kMaskFill), ptrs.push_back(&c.fill);
    if (k.Sq != k.Skv) uids.insert(uids.end(), {kSkv, kSq}), ptrs.insert(ptrs.end(), {&c.skv, &c.sq});
  }
  if (k.window)
    uids.insert(uids.end(), {kWindow, kWindowFill}), ptrs.insert(ptrs.end(), {&c.window, &c.window_fill});
  s->last_kernel = "cudnn_sdpa_bprop";
  auto run = [&](Desc plan) {
    // cuDNN before 9.6 expects the accumulator zeroed by the caller, before every run.
    if (runtime_version() < 90600) {
      if (tc_status st =
              check(cudaMemsetAsync(acc, 0, acc_bytes, s->stream), "attention_backward: zero dQ accumulator"))
        return st;
    }
    return execute(s, h, plan, uids, ptrs, plan_bytes ? base : nullptr, "attention_backward: cuDNN execute");
  };
  if (!p->tuned) {
    if (tc_status st = tune(s, p, "bprop", run)) {
      *out = st;
      return true;
    }
  }
  *out = run(p->plan);
  return true;
}

}  // namespace cuda
}  // namespace tc

#endif  // TC_HAVE_CUDNN
