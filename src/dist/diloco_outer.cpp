// The pieces of a DiLoCo outer step: compression with error feedback, the
// exchange, and the outer optimizers.
//
// With u = Delta + e (Delta = anchor - theta, e the residual of the last
// round) and n ranks:
//   NONE        g = allreduce_avg(Delta)                          e unused
//   FP16        q = f16(u / n); g = f32(allreduce_sum_f16(q));    e = u - n f32(q)
//   TOPK_x      S = indices of the k largest |u_i| (k = ceil(x N)); every rank
//               allgathers its (i, u_i) pairs; g_i = (1/n) sum over ranks of
//               their u_i at i (ranks in order, so every rank adds the same
//               numbers in the same order and gets the same bits);
//               e = u with the entries of S zeroed
// Outer optimizers on the anchor a, lr, mu = outer_momentum, b2 = outer_beta2:
//   SGD         a -= lr g
//   NESTEROV    v = mu v + g;  a -= lr (g + mu v)
//   ADAM        t += 1; m = mu m + (1-mu) g; v = b2 v + (1-b2) g^2;
//               a -= lr (m / (1-mu^t)) / (sqrt(v / (1-b2^t)) + eps)
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/half.h"
#include "core/convert.h"
#include "dist/diloco.h"

namespace tc {
namespace dist {

size_t topk_count(int32_t compress, size_t n) {
  double frac = compress == TC_DILOCO_COMPRESS_TOPK_1PCT ? 0.01 : compress == TC_DILOCO_COMPRESS_TOPK_01PCT ? 0.001 : 0;
  if (frac == 0) return 0;
  size_t k = size_t(std::ceil(double(n) * frac));
  return std::max<size_t>(1, std::min(k, n));
}

namespace {

tc_status exchange_topk(Comm& comm, size_t k, const std::vector<float>& delta, std::vector<float>* residual,
                        std::vector<float>* g, uint64_t* bytes) {
  const size_t n = delta.size();
  const int world = comm.size();
  std::vector<float> u(n);
  for (size_t i = 0; i < n; ++i) u[i] = delta[i] + (*residual)[i];
  // The k largest magnitudes; ties broken by index so the choice is a
  // function of u alone.
  std::vector<uint32_t> idx(n);
  for (size_t i = 0; i < n; ++i) idx[i] = uint32_t(i);
  auto larger = [&](uint32_t a, uint32_t b) {
    float fa = std::fabs(u[a]), fb = std::fabs(u[b]);
    return fa > fb || (fa == fb && a < b);
  };
  std::nth_element(idx.begin(), idx.begin() + std::ptrdiff_t(k - 1), idx.end(), larger);
  idx.resize(k);
  std::sort(idx.begin(), idx.end());
  // Pairs (index bits, value) as 2k 32-bit words.
  std::vector<float> mine(2 * k), all(2 * k * size_t(world));
  for (size_t j = 0; j < k; ++j) {
    std::memcpy(&mine[2 * j], &idx[j], 4);
    mine[2 * j + 1] = u[idx[j]];
  }
  if (tc_status st = comm.allgather(mine.data(), all.data(), 2 * k, TC_DTYPE_F32)) return st;
  g->assign(n, 0.0f);
  const float inv = 1.0f / float(world);
  for (int r = 0; r < world; ++r) {
    const float* p = all.data() + size_t(r) * 2 * k;
    for (size_t j = 0; j < k; ++j) {
      uint32_t i;
      std::memcpy(&i, &p[2 * j], 4);
      if (i < n) (*g)[i] += p[2 * j + 1] * inv;
    }
  }
  for (size_t i = 0; i < n; ++i) (*residual)[i] = u[i];
  for (uint32_t i : idx) (*residual)[i] = 0.0f;
  *bytes = wire_bytes_allgather(8 * k, world);
  return TC_OK;
}

}  // namespace

tc_status exchange(Comm& comm, int32_t compress, const std::vector<float>& delta, std::vector<float>* residual,
                   std::vector<float>* g, uint64_t* bytes) {
  const size_t n = delta.size();
  const int world = comm.size();
  switch (compress) {
    case TC_DILOCO_COMPRESS_NONE: {
      *g = delta;
      *bytes = wire_bytes_allreduce(4 * n, world);
      return comm.allreduce(g->data(), n, TC_DTYPE_F32, TC_REDUCE_AVG);
    }
    case TC_DILOCO_COMPRESS_FP16: {
      std::vector<float> s(n);
      const float inv = 1.0f / float(world);
      for (size_t i = 0; i < n; ++i) s[i] = (delta[i] + (*residual)[i]) * inv;
      std::vector<uint16_t> q(n);
      narrow_row(false, s.data(), q.data(), int64_t(n));
      std::vector<float> back(n);
      widen_row(false, q.data(), back.data(), int64_t(n));
      for (size_t i = 0; i < n; ++i) (*residual)[i] = (s[i] - back[i]) * float(world);
      if (tc_status st = comm.allreduce(q.data(), n, TC_DTYPE_F16, TC_REDUCE_SUM)) return st;
      g->resize(n);
      widen_row(false, q.data(), g->data(), int64_t(n));
      *bytes = wire_bytes_allreduce(2 * n, world);
      return TC_OK;
    }
    default:
      return exchange_topk(comm, topk_count(compress, n), delta, residual, g, bytes);
  }
}

void outer_update(const tc_diloco_config& cfg, const std::vector<float>& g, OuterState* s) {
  const size_t n = g.size();
  float* a = s->anchor.data();
  const float lr = cfg.outer_lr, mu = cfg.outer_momentum;
  switch (cfg.outer_optimizer) {
    case TC_DILOCO_OUTER_SGD:
      for (size_t i = 0; i < n; ++i) a[i] -= lr * g[i];
      break;
    case TC_DILOCO_OUTER_NESTEROV: {
      float* v = s->m1.data();
      for (size_t i = 0; i < n; ++i) {
        v[i] = mu * v[i] + g[i];
        a[i] -= lr * (g[i] + mu * v[i]);
      }
      break;
    }
    default: {  // ADAM
      s->adam_t++;
      const float b2 = cfg.outer_beta2, eps = cfg.outer_eps;
      const float bc1 = float(1.0 - std::pow(double(mu), double(s->adam_t)));
      const float bc2 = float(1.0 - std::pow(double(b2), double(s->adam_t)));
      float* m = s->m1.data();
      float* v = s->m2.data();
      for (size_t i = 0; i < n; ++i) {
        m[i] = mu * m[i] + (1.0f - mu) * g[i];
        v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
        float mh = bc1 > 0 ? m[i] / bc1 : m[i];
        float vh = bc2 > 0 ? v[i] / bc2 : v[i];
        a[i] -= lr * mh / (std::sqrt(vh) + eps);
      }
    }
  }
}

size_t param_bytes(const DilocoParam& p) { return p.n * (p.dtype == TC_DTYPE_F32 ? 4 : 2); }

tc_status read_param(Stager* stager, const DilocoParam& p, void* host) {
  if (!p.device) {
    std::memcpy(host, p.storage->data, param_bytes(p));
    return TC_OK;
  }
  return stager->read(p.storage->data, param_bytes(p), [&](const char* chunk, size_t off, size_t len) {
    std::memcpy(static_cast<char*>(host) + off, chunk, len);
  });
}

tc_status write_param(Stager* stager, const DilocoParam& p, const void* host) {
  if (!p.device) {
    if (host != p.storage->data) std::memcpy(p.storage->data, host, param_bytes(p));
    return TC_OK;
  }
  return stager->write(p.storage->data, param_bytes(p), [&](char* chunk, size_t off, size_t len) {
    std::memcpy(chunk, static_cast<const char*>(host) + off, len);
  });
}

namespace {

// flat[first .. first + count) <-> `count` elements of the parameter's dtype.
void widen(tc_dtype dtype, const void* src, float* dst, size_t count) {
  if (dtype == TC_DTYPE_F32)
    std::memcpy(dst, src, count * 4);
  else
    widen_row(dtype == TC_DTYPE_BF16, static_cast<const uint16_t*>(src), dst, int64_t(count));
}
void narrow(tc_dtype dtype, const float* src, void* dst, size_t count) {
  if (dtype == TC_DTYPE_F32)
    std::memcpy(dst, src, count * 4);
  else
    narrow_row(dtype == TC_DTYPE_BF16, src, static_cast<uint16_t*>(dst), int64_t(count));
}

}  // namespace

void widen_param(const DilocoParam& p, const void* src, float* flat) { widen(p.dtype, src, flat + p.offset, p.n); }

void gather_theta(const std::vector<DilocoParam>& params, std::vector<float>* flat) {
  for (auto& p : params) widen(p.dtype, p.storage->data, flat->data() + p.offset, p.n);
}

void scatter_theta(const std::vector<DilocoParam>& params, const std::vector<float>& flat) {
  for (auto& p : params) narrow(p.dtype, flat.data() + p.offset, p.storage->data, p.n);
}

}  // namespace dist
}  // namespace tc
