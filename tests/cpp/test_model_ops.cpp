// The decoder's model ops (core/backend.h, "model ops") on every device
// present, called through the context's backend (they have no C ABI), each
// against a double-precision reference on fresh random inputs, outputs
// poisoned first:
//   embed_rows       every weight format, bit-identical to tc_dequantize_weights
//                    on the CPU (ggml's dequantize_row_*)
//   rope_kv_append   padded token rows, cache rows outside [P, P + n) untouched;
//                    a batch of rows in their own slots and positions; with
//                    and without q / k / v biases and Q/K norms (the inputs
//                    untouched); queries in f32 or f16
//   attention_forward over kv heads in place (a cache's rows a head): the
//                    bits of the packed heads
//   decode_attention (batch) rows of several slots against the reference and
//                    against each row alone
//   decode_attention GQA (1, 2, 3, 4 and 8 heads a group), positions at the start,
//                    middle and end of caches split into several pieces and of
//                    one much longer than the position; head dims from 3 to
//                    300 (multiples of 4 or not); two calls give the same bits
//   rope_kv_append, decode_attention and convert over a Q8_0 cache (ggml's
//                    blocks): quantisation against the float64 rotation, the
//                    attention against the dequantised values (tight) and the
//                    unquantised ones (within the bound the quantisation allows)
//   gemv_q8 with RoPE rows: bit for bit the product, then rope_kv_append
//   add (plain, a bias row, RMS-normed rows), convert, heads_to_tokens, copy_2d
//   argmax_rows      NumPy's argmax of each row: ties, -inf, NaN, rows of every
//                    length mod 4, at an offset (the scalar loads)
//   gemm with an f32 C from f16 / bf16 X and W (the prefill's products)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/half.h"
#include "core/objects.h"
#include "quant/formats.h"
#include "tensorcore/cuda.h"
#include "tensorcore/tensorcore.h"
#include "backend_op_fixture.h"

namespace {

using op_test::Dev;
using op_test::devices;
using op_test::randn;
using op_test::rng;

class ModelOps : public ::testing::TestWithParam<std::string> {};

// Random blocks of `fmt` with finite, initialised-model-sized scales.
std::vector<uint8_t> random_rows(int32_t fmt, int64_t rows, int64_t K) {
  const tc::quant::FormatInfo* fi = tc::quant::format_info(fmt);
  const int64_t nb = K / fi->block_elems, bb = fi->block_bytes;
  std::vector<uint8_t> raw(size_t(rows * nb * bb));
  for (uint8_t& b : raw) b = uint8_t(rng()());
  std::uniform_real_distribution<float> scale(0.01f, 0.1f);
  for (int64_t blk = 0; blk < rows * nb; ++blk) {
    uint8_t* p = raw.data() + blk * bb;
    auto h = [&](size_t at) {
      const uint16_t v = tc::f32_to_f16(scale(rng()));
      std::memcpy(p + at, &v, 2);
    };
    switch (fmt) {
      case tc::quant::Q4_0: case tc::quant::Q8_0: case tc::quant::Q5_0: h(0); break;
      case tc::quant::Q4_1: case tc::quant::Q4_K: case tc::quant::Q5_K: case tc::quant::Q5_1: h(0), h(2); break;
      case tc::quant::Q6_K: h(208); break;
      case tc::quant::Q8_K: { const float d = scale(rng()); std::memcpy(p, &d, 4); break; }
      case tc::quant::F16: for (int64_t i = 0; i < bb; i += 2) h(size_t(i)); break;
      case tc::quant::BF16: for (int64_t i = 0; i < bb; i += 2) { const uint16_t v = tc::f32_to_bf16(scale(rng())); std::memcpy(p + i, &v, 2); } break;
      case tc::quant::F32: { const float v = scale(rng()); std::memcpy(p, &v, 4); break; }
    }
  }
  return raw;
}

TEST_P(ModelOps, EmbedRowsEveryFormat) {
  Dev dev(GetParam());
  Dev cpu("cpu");
  const int64_t rows = 7, K = 512;
  for (int32_t fmt = 0; fmt < tc::quant::kNumFormats; ++fmt) {
    SCOPED_TRACE(tc::quant::format_info(fmt)->name);
    const std::vector<uint8_t> table = random_rows(fmt, rows, K);
    const uint64_t row_bytes = table.size() / rows;
    // The reference: the whole table dequantised on the CPU.
    tc_buffer tq = nullptr, ty = nullptr;
    ASSERT_EQ(tc_buffer_alloc(cpu.ctx, table.size(), &tq), TC_OK);
    ASSERT_EQ(tc_buffer_alloc(cpu.ctx, size_t(rows * K) * 4, &ty), TC_OK);
    ASSERT_EQ(tc_buffer_write(tq, 0, table.data(), table.size()), TC_OK);
    ASSERT_EQ(tc_dequantize_weights(cpu.ctx, tq, ty, tc_quant_type(fmt), 0, rows, K, TC_DTYPE_F32), TC_OK);
    std::vector<float> ref(size_t(rows * K));
    ASSERT_EQ(tc_buffer_read(ty, 0, ref.data(), ref.size() * 4), TC_OK);
    tc_buffer_free(tq);
    tc_buffer_free(ty);

    const std::vector<int32_t> tokens{3, 0, 6, 3, 1};
    tc::EmbedRowsArgs a;
    a.info.name = "test.embed_rows";
    a.fmt = fmt, a.n = int64_t(tokens.size()), a.K = K, a.row_bytes = row_bytes;
    a.table = dev.put(table);
    a.tokens = dev.put(tokens);
    a.dst = dev.put(std::vector<float>(tokens.size() * K, NAN));
    ASSERT_EQ(dev.be().embed_rows(a, nullptr), TC_OK);
    const std::vector<float> out = dev.get(a.dst, tokens.size() * K);
    for (size_t i = 0; i < tokens.size(); ++i)
      for (int64_t k = 0; k < K; ++k)
        ASSERT_EQ(out[i * K + k], ref[tokens[i] * K + k]) << "token " << i << " weight " << k;
  }
}

// A cache's elements as f32: f32 as they are, f16 widened.
std::vector<float> cache_values(Dev& dev, const void* p, size_t n, tc_dtype t) {
  if (t == TC_DTYPE_F32) return dev.get(static_cast<const float*>(p), n);
  const std::vector<uint16_t> h = dev.get(static_cast<const uint16_t*>(p), n);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = tc::f16_to_f32(h[i]);
  return out;
}
// Puts f32 values into a cache of t (f16: rounded to nearest even).
void* put_cache(Dev& dev, const std::vector<float>& x, tc_dtype t) {
  if (t == TC_DTYPE_F32) return dev.put(x);
  std::vector<uint16_t> h(x.size());
  for (size_t i = 0; i < x.size(); ++i) h[i] = tc::f32_to_f16(x[i]);
  return dev.put(h);
}
// x rounded to the cache's type.
float cache_round(float x, tc_dtype t) { return t == TC_DTYPE_F32 ? x : tc::f16_to_f32(tc::f32_to_f16(x)); }
// x (rows of 32) as Q8_0 blocks by ggml's reference quantiser
// (tc_quantize_weights on the CPU), and such blocks dequantised (q d).
std::vector<uint8_t> q8_quantize(const std::vector<float>& x) {
  Dev cpu("cpu");
  const int64_t rows = int64_t(x.size()) / 32;
  const float* src = cpu.put(x);
  uint8_t* dst = cpu.put(std::vector<uint8_t>(size_t(rows) * sizeof(tc::quant::BlockQ8_0)));
  auto buf = [&](const void* p) {
    for (tc_buffer b : cpu.bufs)
      if (tc::handle_address(b)->bytes() == p) return b;
    return tc_buffer(nullptr);
  };
  EXPECT_EQ(tc_quantize_weights(cpu.ctx, buf(src), buf(dst), TC_QUANT_Q8_0, rows, 32, TC_DTYPE_F32), TC_OK);
  return cpu.get(dst, size_t(rows) * sizeof(tc::quant::BlockQ8_0));
}
std::vector<float> q8_dequantize(const std::vector<uint8_t>& blocks) {
  Dev cpu("cpu");
  const int64_t rows = int64_t(blocks.size() / sizeof(tc::quant::BlockQ8_0));
  const uint8_t* src = cpu.put(blocks);
  float* dst = cpu.put(std::vector<float>(size_t(rows) * 32, NAN));
  auto buf = [&](const void* p) {
    for (tc_buffer b : cpu.bufs)
      if (tc::handle_address(b)->bytes() == p) return b;
    return tc_buffer(nullptr);
  };
  EXPECT_EQ(tc_dequantize_weights(cpu.ctx, buf(src), buf(dst), TC_QUANT_Q8_0, 0, rows, 32, TC_DTYPE_F32), TC_OK);
  return cpu.get(dst, size_t(rows) * 32);
}
// Rounds x to the values a cache of t holds (f16: to nearest even; Q8_0:
// each block of 32 quantised by ggml's reference quantiser and
// dequantised, q d) and puts them on the device in t's layout.
void* put_cache_values(Dev& dev, std::vector<float>& x, tc_dtype t) {
  if (t == TC_DTYPE_Q8_0) {
    const std::vector<uint8_t> blocks = q8_quantize(x);
    x = q8_dequantize(blocks);
    return dev.put(blocks);
  }
  for (float& v : x) v = cache_round(v, t);
  return put_cache(dev, x, t);
}

// A gated epilogue's activation in f64: silu(g) = g sigmoid(g) or GELU's
// tanh form 0.5 g (1 + tanh(sqrt(2 / pi) (g + 0.044715 g^3))).
double gate_ref(int epilogue, double g) {
  if (epilogue == tc::GemvQ8Args::kSwiglu) return g / (1 + std::exp(-g));
  return 0.5 * g * (1 + std::tanh(std::sqrt(2 / M_PI) * (g + 0.044715 * g * g * g)));
}

// Element d of the row x rotated to position p in f64: pair k is (x[2k],
// x[2k+1]), or (x[k], x[k + half]) with NEOX, d its first or second element.
double rotated(const float* x, const std::vector<float>& cs, const std::vector<float>& sn, int64_t half, bool neox,
               int64_t p, int64_t d) {
  const int64_t k = neox ? d % half : d / 2;
  const bool first = neox ? d < half : d % 2 == 0;
  const double c = cs[p * half + k], s = sn[p * half + k];
  const double a0 = neox ? x[k] : x[2 * k], b0 = neox ? x[k + half] : x[2 * k + 1];
  return first ? a0 * c - b0 * s : b0 * c + a0 * s;
}

// What rope_kv_append rotates and appends of n token rows of `heads` head
// rows of D (ld apart): each row plus its bias (one f32 sum, if given),
// then, with gamma, RMS-normed per head in f64 (y = x gamma / sqrt(mean x^2 + eps)).
void bias_and_norm(std::vector<float>& x, int64_t n, int64_t ld, int64_t heads, int64_t D, const float* bias,
                   const float* gamma, double eps) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t h = 0; h < heads; ++h) {
      float* row = &x[size_t(i * ld + h * D)];
      if (bias)
        for (int64_t d = 0; d < D; ++d) row[d] += bias[h * D + d];
      if (!gamma) continue;
      double ss = 0;
      for (int64_t d = 0; d < D; ++d) ss += double(row[d]) * row[d];
      const double rs = 1 / std::sqrt(ss / double(D) + eps);
      for (int64_t d = 0; d < D; ++d) row[d] = float(row[d] * rs * gamma[d]);
    }
}

// RoPE tables of C positions for head size D (base 10000): cos and sin [C][D / 2].
void rope_tables(int64_t C, int64_t D, std::vector<float>& cs, std::vector<float>& sn) {
  const int64_t half = D / 2;
  cs.assign(size_t(C * half), 0.0f), sn.assign(size_t(C * half), 0.0f);
  for (int64_t p = 0; p < C; ++p)
    for (int64_t j = 0; j < half; ++j) {
      const double th = double(p) * std::pow(10000.0, -2.0 * double(j) / double(D));
      cs[p * half + j] = float(std::cos(th)), sn[p * half + j] = float(std::sin(th));
    }
}

// rope_kv_append's inputs for n tokens (rows padded past H D and Hkv D) in
// one of three forms (0: plain; 1: q / k / v biases; 2: biases and Q/K
// norms), and the rows it should rotate and append (derive()).
struct RopeRows {
  static constexpr double kEps = 1e-6;
  int64_t n, H, Hkv, D, C, ldq, ldk, ldv;
  bool biases, norms;
  std::vector<float> q_in, k_in, v_in, bq, bk, bv, qn, kn;  // inputs
  std::vector<float> q, k, v;                               // what the op takes of them
  std::vector<float> cs, sn;                                // the cos / sin tables of C positions
  RopeRows(int64_t n_, int64_t H_, int64_t Hkv_, int64_t D_, int64_t C_, int form)
      : n(n_), H(H_), Hkv(Hkv_), D(D_), C(C_), ldq(H_ * D_ + 3), ldk(Hkv_ * D_ + 1), ldv(Hkv_ * D_ + 5),
        biases(form >= 1), norms(form == 2) {
    q_in = randn(n * ldq), k_in = randn(n * ldk), v_in = randn(n * ldv);
    bq = randn(H * D), bk = randn(Hkv * D), bv = randn(Hkv * D), qn = randn(D), kn = randn(D);
    rope_tables(C, D, cs, sn);
    derive();
  }
  std::string name(bool neox) const {
    return std::string(neox ? "NEOX pairs" : "interleaved pairs") + (biases ? ", biases" : "") +
           (norms ? ", Q/K norms" : "");
  }
  void derive() {  // again after a change to the inputs
    q = q_in, k = k_in, v = v_in;
    bias_and_norm(q, n, ldq, H, D, biases ? bq.data() : nullptr, norms ? qn.data() : nullptr, kEps);
    bias_and_norm(k, n, ldk, Hkv, D, biases ? bk.data() : nullptr, norms ? kn.data() : nullptr, kEps);
    bias_and_norm(v, n, ldv, Hkv, D, biases ? bv.data() : nullptr, nullptr, kEps);
  }
  // Element d of row x rotated to position p (float64).
  double rot(const float* x, int64_t p, int64_t d, bool neox) const { return rotated(x, cs, sn, D / 2, neox, p, d); }
  // The op's rows and tables on the device; positions and caches are the caller's.
  tc::RopeKvAppendArgs args(Dev& dev) const {
    tc::RopeKvAppendArgs a;
    a.n = n, a.H = H, a.Hkv = Hkv, a.D = D, a.C = C, a.ldq = ldq, a.ldk = ldk, a.ldv = ldv;
    a.cos_t = dev.put(cs), a.sin_t = dev.put(sn);
    a.q = dev.put(q_in), a.k = dev.put(k_in), a.v = dev.put(v_in);
    if (biases) a.bq = dev.put(bq), a.bk = dev.put(bk), a.bv = dev.put(bv);
    if (norms) a.q_norm = dev.put(qn), a.k_norm = dev.put(kn), a.norm_eps = float(kEps);
    a.qt = dev.put(std::vector<float>(size_t(H * n * D), NAN));
    return a;
  }
};

TEST_P(ModelOps, RopeKvAppend) {
  Dev dev(GetParam());
  for (tc_dtype cache : {TC_DTYPE_F32, TC_DTYPE_F16})
  for (bool neox : {false, true})
  for (int form : {0, 1, 2})  // plain; q / k / v biases; biases and Q/K norms
  for (bool q16 : {false, true}) {  // the queries in f32 (qt) or f16 (qt16)
  const int64_t n = 3, H = 4, Hkv = 2, D = 8, C = 16, P = 5, half = D / 2;
  const RopeRows rows(n, H, Hkv, D, C, form);
  SCOPED_TRACE(rows.name(neox) + (cache == TC_DTYPE_F16 ? ", f16 cache" : "") + (q16 ? ", f16 queries" : ""));
  const std::vector<float>&q = rows.q, &k = rows.k, &v = rows.v;
  const int64_t ldq = rows.ldq, ldk = rows.ldk, ldv = rows.ldv;
  const std::vector<float> cache_init(Hkv * C * D, -7.0f);
  tc::RopeKvAppendArgs a = rows.args(dev);
  a.info.name = "test.rope_kv_append";
  a.pos = dev.put(std::vector<int32_t>{int32_t(P)});
  a.k_cache = put_cache(dev, cache_init, cache), a.v_cache = put_cache(dev, cache_init, cache);
  a.cache = cache;
  a.neox = neox;
  if (q16) a.qt16 = dev.put(std::vector<uint16_t>(size_t(H * n * D), 0x7e00));  // NaN
  ASSERT_EQ(dev.be().rope_kv_append(a, nullptr), TC_OK);
  EXPECT_EQ(dev.get(a.q, n * ldq), rows.q_in) << "q rows changed";
  const auto kc = cache_values(dev, a.k_cache, Hkv * C * D, cache), vc = cache_values(dev, a.v_cache, Hkv * C * D, cache);
  std::vector<float> qt = dev.get(a.qt, H * n * D);
  if (q16) {
    for (float x : qt) ASSERT_TRUE(std::isnan(x)) << "qt written with qt16 given";
    qt = cache_values(dev, a.qt16, size_t(H * n * D), TC_DTYPE_F16);
  }
  // An f16 key or query is the f32 rotation rounded: within half an f16 step of the exact one.
  auto key_tol = [&](double x) { return 1e-5 + (cache == TC_DTYPE_F16 ? std::fabs(x) * 0x1p-11 : 0.0); };
  auto q_tol = [&](double x) { return 1e-5 + (q16 ? std::fabs(x) * 0x1p-11 : 0.0); };
  auto rot = [&](const float* x, int64_t p, int64_t d) { return rows.rot(x, p, d, neox); };
  for (int64_t i = 0; i < n; ++i)
    for (int64_t d = 0; d < D; ++d) {
      for (int64_t h = 0; h < H; ++h) {
        const double qr = rot(&q[i * ldq + h * D], P + i, d);
        EXPECT_NEAR(qt[(h * n + i) * D + d], qr, q_tol(qr));
      }
      for (int64_t g = 0; g < Hkv; ++g) {
        const double kr = rot(&k[i * ldk + g * D], P + i, d);
        EXPECT_NEAR(kc[(g * C + P + i) * D + d], kr, key_tol(kr));
        EXPECT_EQ(vc[(g * C + P + i) * D + d], cache_round(v[i * ldv + g * D + d], cache));
      }
    }
  for (int64_t g = 0; g < Hkv; ++g)
    for (int64_t p = 0; p < C; ++p)
      if (p < P || p >= P + n)
        for (int64_t d = 0; d < D; ++d) {
          ASSERT_EQ(kc[(g * C + p) * D + d], -7.0f) << "k cache row " << p << " written";
          ASSERT_EQ(vc[(g * C + p) * D + d], -7.0f) << "v cache row " << p << " written";
        }
  }
}

TEST_P(ModelOps, DecodeAttention) {
  Dev dev(GetParam());
  struct Case {
    int64_t H, Hkv, D, C;
    std::vector<int32_t> pos;
    int64_t window = 0;  // sliding window (keys in (pos - window, pos])
    float cap = 0.0f;    // soft-capping of the scores
    float qmul = 1.0f;   // q's magnitude (the GPU's f16 halves of q are scaled to its largest element)
  };
  const Case cases[] = {
      {8, 2, 64, 300, {0, 57, 60, 299}},  // decode_attention_splits(300) = 5
      {9, 3, 64, 500, {0, 15, 16, 17, 260, 499}},  // G = 3 (SmolLM2's groups): 3 of a block's 4 head columns
      {4, 2, 128, 1000, {0, 47, 48, 999}},          // G = 2
      {8, 2, 40, 300, {0, 57, 60, 299}},  // D % 4 == 0, a row over 10 of 16 lanes
      {8, 2, 128, 4096, {0, 1, 63, 64, 1000, 4095}},  // G = 4, C much larger than S
      {4, 4, 128, 4096, {0, 1, 63, 64, 1000, 4095}},  // G = 1 (LLaMA-7B's shape)
      {32, 32, 128, 4096, {0, 63, 64, 580, 4095}},    // LLaMA-7B's heads: few pieces a head on a GPU
      {48, 48, 64, 700, {0, 65, 699}},                // many 64-dim heads
      {64, 16, 256, 1024, {0, 300, 1023}},            // many 256-dim heads, 4 a block
      {16, 2, 128, 700, {0, 5, 129, 699}},            // G = 8
      {32, 8, 128, 2048, {0, 70, 2047}},              // G = 4, enough blocks for 4 heads a block
      {64, 8, 128, 2048, {0, 40, 2047}},              // G = 8, 8 heads a block
      {16, 4, 256, 4096, {70, 4095}},                 // 4 heads a block of two float4s a lane
      {4, 1, 256, 4096, {0, 1, 63, 64, 1000, 4095}},  // two float4s a lane, G = 4
      {2, 2, 200, 500, {0, 333, 499}},                // second float4 on 18 of 32 lanes
      {6, 3, 37, 500, {0, 1, 100, 499}},              // D % 4 != 0: scalar loads, G = 2
      {8, 1, 8, 700, {0, 5, 699}},                    // 2 lanes a key, 16 keys a warp, G = 8
      {3, 3, 3, 200, {0, 77, 199}},                   // one lane a key, D % 4 != 0
      {2, 1, 300, 260, {0, 259}},                     // D above 256: four float4s a lane
      {4, 1, 256, 4096, {0, 511, 512, 1000, 4095}, 512},          // Gemma 3's windowed layers
      {8, 4, 256, 700, {0, 15, 16, 333, 699}},                    // Gemma 3 4B's groups (G = 2)
      {8, 4, 256, 700, {0, 5, 699}, 0, 0.7f},                     // 256-dim heads with soft-capping (Gemma 2)
      {8, 2, 64, 700, {0, 5, 299, 300, 699}, 300, 0.7f},          // window and soft-capping (Gemma 2)
      {6, 3, 37, 500, {0, 100, 499}, 0, 0.7f},                    // soft-capping, scalar loads
      {16, 4, 128, 2048, {0, 64, 65, 2047}, 65},                  // window of 65: pieces not aligned
      {4, 1, 128, 600, {0, 333, 599}, 0, 0.0f, 30.0f},            // large q: peaked weights
      {4, 4, 64, 600, {0, 599}, 0, 0.0f, 1e-4f},                  // tiny q: nearly uniform weights
  };
  // A Q8_0 cache (rows of whole blocks: D a multiple of 32) holds the
  // quantised-dequantised values; the reference attends over those.
  for (tc_dtype cache : {TC_DTYPE_F32, TC_DTYPE_F16, TC_DTYPE_Q8_0})
  for (const Case& c : cases) {
    if (cache == TC_DTYPE_Q8_0 && c.D % 32 != 0) continue;
    const int64_t H = c.H, Hkv = c.Hkv, D = c.D, C = c.C, G = H / Hkv;
    std::vector<float> q = randn(H * D), K = randn(Hkv * C * D), V = randn(Hkv * C * D);
    for (float& x : q) x *= c.qmul;
    const float scale = float(1.0 / std::sqrt(double(D)));
    const float* qd = dev.put(q);
    const void* Kd = put_cache_values(dev, K, cache);  // K, V: the values the cache holds
    const void* Vd = put_cache_values(dev, V, cache);
    for (int32_t pos : c.pos) {
      SCOPED_TRACE("H " + std::to_string(H) + " Hkv " + std::to_string(Hkv) + " D " + std::to_string(D) + " C " +
                   std::to_string(C) + " pos " + std::to_string(pos) + " window " + std::to_string(c.window) +
                   " cap " + std::to_string(c.cap) + " qmul " + std::to_string(c.qmul) + " " +
                   tc_dtype_name(cache) + " cache");
      tc::DecodeAttentionArgs a;
      a.info.name = "test.decode_attention";
      a.H = H, a.Hkv = Hkv, a.D = D, a.C = C, a.scale = scale;
      a.window = c.window, a.softcap = c.cap;
      a.pos = dev.put(std::vector<int32_t>{pos});
      a.q = qd, a.k_cache = Kd, a.v_cache = Vd, a.cache = cache;
      a.o = dev.put(std::vector<float>(H * D, NAN));
      a.partial = dev.put(std::vector<float>(H * tc::decode_attention_splits(C) * (D + 2), NAN));
      a.arrivals = dev.put(std::vector<uint32_t>(size_t(H), 0u));
      ASSERT_EQ(dev.be().decode_attention(a, nullptr), TC_OK);
      const auto o = dev.get(a.o, H * D);
      const auto counts = dev.get(a.arrivals, size_t(H));
      for (int64_t h = 0; h < H; ++h) ASSERT_EQ(counts[size_t(h)], 0u) << "arrivals left at head " << h;
      for (int64_t h = 0; h < H; ++h) {
        const int64_t g = h / G;
        const int64_t first = c.window > 0 ? std::max<int64_t>(0, pos + 1 - c.window) : 0;
        std::vector<double> s(size_t(pos + 1 - first));
        double m = -INFINITY, l = 0;
        for (int64_t j = first; j <= pos; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += double(q[h * D + d]) * K[(g * C + j) * D + d];
          double x = dot * scale;
          if (c.cap > 0) x = c.cap * std::tanh(x / c.cap);
          m = std::max(m, s[size_t(j - first)] = x);
        }
        for (double& x : s) l += (x = std::exp(x - m));
        // f32 scores carry an error proportional to their size, and the
        // weights e^t one of that size: the bound grows with q.
        const double tol = 1e-5 * std::max(1.0, double(c.qmul));
        for (int64_t d = 0; d < D; ++d) {
          double ref = 0;
          for (int64_t j = first; j <= pos; ++j) ref += s[size_t(j - first)] * V[(g * C + j) * D + d];
          ASSERT_NEAR(o[h * D + d], ref / l, tol * (1 + std::fabs(ref / l))) << "head " << h << " d " << d;
        }
      }
      // Deterministic: a second call (scratch poisoned again) gives the same
      // bits; where D is whole blocks of 32 it also quantises o (oq, od), to
      // the bits of quantize_q8 (no norm) on o.
      a.o = dev.put(std::vector<float>(H * D, NAN));
      a.partial = dev.put(std::vector<float>(H * tc::decode_attention_splits(C) * (D + 2), NAN));
      if (D % 32 == 0) {
        a.oq = dev.put(std::vector<int8_t>(size_t(H * D + 1), int8_t(-77)));
        a.od = dev.put(std::vector<float>(size_t(H * D / 16 + 2), NAN));
      } else {
        a.oq = dev.put(std::vector<int8_t>(size_t(H * D), int8_t(-77)));  // refused: D not whole blocks
        a.od = dev.put(std::vector<float>(size_t(H * D), NAN));
        ASSERT_EQ(dev.be().decode_attention(a, nullptr), TC_ERR_UNSUPPORTED);
        a.oq = nullptr, a.od = nullptr;
      }
      ASSERT_EQ(dev.be().decode_attention(a, nullptr), TC_OK);  // the counters the first call left
      const auto o2 = dev.get(a.o, H * D);
      ASSERT_EQ(std::memcmp(o.data(), o2.data(), o.size() * sizeof(float)), 0) << "two calls differ";
      if (GetParam() != "cpu") {  // the GPU's pieces need their counters
        tc::DecodeAttentionArgs none = a;
        none.arrivals = nullptr;
        ASSERT_EQ(dev.be().decode_attention(none, nullptr), TC_ERR_INVALID_ARG);
      }
      if (!a.oq) continue;
      tc::QuantizeQ8Args qa;
      qa.info.name = "test.quantize_q8";
      qa.M = 1, qa.K = H * D;
      qa.x = dev.put(o);
      qa.xq = dev.put(std::vector<int8_t>(size_t(H * D), int8_t(-77)));
      qa.xd = dev.put(std::vector<float>(size_t(H * D / 16), NAN));
      ASSERT_EQ(dev.be().quantize_q8(qa, nullptr), TC_OK);
      const auto rq = dev.get(qa.xq, size_t(H * D)), oq = dev.get(a.oq, size_t(H * D + 1));
      const auto rd = dev.get(qa.xd, size_t(H * D / 16)), od = dev.get(a.od, size_t(H * D / 16 + 2));
      ASSERT_EQ(std::memcmp(rq.data(), oq.data(), size_t(H * D)), 0) << "quantised o";
      ASSERT_EQ(std::memcmp(rd.data(), od.data(), size_t(H * D / 16) * 4), 0) << "o's (dx, sx)";
      EXPECT_EQ(oq[size_t(H * D)], int8_t(-77)) << "written past oq";
      EXPECT_TRUE(std::isnan(od[size_t(H * D / 16)])) << "written past od";
      a.od = nullptr;  // oq without od: refused
      ASSERT_EQ(dev.be().decode_attention(a, nullptr), TC_ERR_INVALID_ARG);
    }
  }
}

// A batch step: rows of different sequences, each at its own position in
// its own cache slot (rows need not be in slot order, slots may be skipped).
TEST_P(ModelOps, RopeKvAppendBatch) {
  Dev dev(GetParam());
  for (tc_dtype cache : {TC_DTYPE_F32, TC_DTYPE_F16})
  for (bool neox : {false, true})
  for (int form : {0, 1, 2}) {  // plain; q / k / v biases; biases and Q/K norms
  const int64_t H = 4, Hkv = 2, D = 8, C = 16, half = D / 2, slots_total = 5, stride = Hkv * C * D;
  const std::vector<int32_t> pos{0, 15, 7, 3}, slot{3, 0, 4, 1};
  const int64_t n = int64_t(pos.size());
  const RopeRows rows(n, H, Hkv, D, C, form);
  SCOPED_TRACE(rows.name(neox) + (cache == TC_DTYPE_F16 ? ", f16 cache" : ""));
  const std::vector<float>&q = rows.q, &k = rows.k, &v = rows.v;
  const int64_t ldq = rows.ldq, ldk = rows.ldk, ldv = rows.ldv;
  const std::vector<float> cache_init(slots_total * stride, -7.0f);
  tc::RopeKvAppendArgs a = rows.args(dev);
  a.info.name = "test.rope_kv_append_batch";
  a.pos = dev.put(pos), a.slots = dev.put(slot), a.slot_stride = stride;
  a.k_cache = put_cache(dev, cache_init, cache), a.v_cache = put_cache(dev, cache_init, cache);
  a.cache = cache;
  a.neox = neox;
  ASSERT_EQ(dev.be().rope_kv_append(a, nullptr), TC_OK);
  EXPECT_EQ(dev.get(a.q, n * ldq), rows.q_in) << "q rows changed";
  const auto qt = dev.get(a.qt, H * n * D), kc = cache_values(dev, a.k_cache, cache_init.size(), cache),
             vc = cache_values(dev, a.v_cache, cache_init.size(), cache);
  auto key_tol = [&](double x) { return 1e-5 + (cache == TC_DTYPE_F16 ? std::fabs(x) * 0x1p-11 : 0.0); };
  auto rot = [&](const float* x, int64_t p, int64_t d) { return rows.rot(x, p, d, neox); };
  std::vector<bool> written(cache_init.size(), false);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t d = 0; d < D; ++d) {
      for (int64_t h = 0; h < H; ++h)
        EXPECT_NEAR(qt[(h * n + i) * D + d], rot(&q[i * ldq + h * D], pos[i], d), 1e-5) << "row " << i;
      for (int64_t g = 0; g < Hkv; ++g) {
        const int64_t cell = slot[i] * stride + (g * C + pos[i]) * D + d;
        const double kr = rot(&k[i * ldk + g * D], pos[i], d);
        EXPECT_NEAR(kc[cell], kr, key_tol(kr)) << "row " << i;
        EXPECT_EQ(vc[cell], cache_round(v[i * ldv + g * D + d], cache)) << "row " << i;
        written[size_t(cell)] = true;
      }
    }
  for (size_t e = 0; e < written.size(); ++e)
    if (!written[e]) {
      ASSERT_EQ(kc[e], -7.0f) << "k cache element " << e << " written";
      ASSERT_EQ(vc[e], -7.0f) << "v cache element " << e << " written";
    }
  }
}

// n query rows over their own slots and positions against the float64
// reference; the same as each row alone (the single-row call on its slot);
// two calls give the same bits.
TEST_P(ModelOps, DecodeAttentionBatch) {
  Dev dev(GetParam());
  struct Case {
    int64_t H, Hkv, D, C;
    std::vector<int32_t> pos, slot;
    int64_t window = 0;
    float cap = 0.0f;
  };
  const Case cases[] = {
      {8, 2, 64, 300, {0, 57, 299, 64}, {2, 0, 1, 3}},
      {32, 8, 128, 2048, {0, 70, 2047, 1000, 5}, {4, 3, 2, 1, 0}},  // G = 4
      {6, 3, 37, 500, {0, 100, 499}, {1, 2, 0}},                     // scalar loads
      {4, 1, 256, 1024, {1023, 0, 511}, {0, 2, 1}, 300},             // window
      {8, 2, 64, 700, {5, 699, 300}, {2, 1, 0}, 300, 0.7f},          // window and soft-capping
      {16, 2, 128, 700, {3}, {1}},                                   // one row in a later slot
      {8, 8, 32, 300, {299, 0, 150}, {1, 2, 0}},                     // 8 lanes a key (D = 32), G = 1
  };
  for (tc_dtype cache : {TC_DTYPE_F32, TC_DTYPE_F16, TC_DTYPE_Q8_0})
  for (const Case& c : cases) {
    if (cache == TC_DTYPE_Q8_0 && c.D % 32 != 0) continue;
    const int64_t H = c.H, Hkv = c.Hkv, D = c.D, C = c.C, G = H / Hkv, n = int64_t(c.pos.size());
    int64_t slots_total = 0;
    for (int32_t s : c.slot) slots_total = std::max<int64_t>(slots_total, s + 1);
    const int64_t stride = Hkv * C * D, splits = tc::decode_attention_splits(C);
    SCOPED_TRACE("H " + std::to_string(H) + " Hkv " + std::to_string(Hkv) + " D " + std::to_string(D) + " C " +
                 std::to_string(C) + " rows " + std::to_string(n) + " window " + std::to_string(c.window) + " " +
                 tc_dtype_name(cache) + " cache");
    std::vector<float> q = randn(H * n * D), K = randn(slots_total * stride), V = randn(slots_total * stride);
    const float scale = float(1.0 / std::sqrt(double(D)));
    const void* Kd = put_cache_values(dev, K, cache);
    const void* Vd = put_cache_values(dev, V, cache);
    tc::DecodeAttentionArgs a;
    a.info.name = "test.decode_attention_batch";
    a.H = H, a.Hkv = Hkv, a.D = D, a.C = C, a.scale = scale;
    a.window = c.window, a.softcap = c.cap;
    a.n = n, a.pos = dev.put(c.pos), a.slots = dev.put(c.slot), a.slot_stride = stride;
    a.q = dev.put(q), a.k_cache = Kd, a.v_cache = Vd, a.cache = cache;
    a.o = dev.put(std::vector<float>(n * H * D, NAN));
    a.partial = dev.put(std::vector<float>(n * H * splits * (D + 2), NAN));
    a.arrivals = dev.put(std::vector<uint32_t>(size_t(n * H), 0u));
    ASSERT_EQ(dev.be().decode_attention(a, nullptr), TC_OK);
    const auto o = dev.get(a.o, n * H * D);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t pos = c.pos[size_t(i)], base = c.slot[size_t(i)] * stride;
      const int64_t first = c.window > 0 ? std::max<int64_t>(0, pos + 1 - c.window) : 0;
      for (int64_t h = 0; h < H; ++h) {
        const int64_t g = h / G;
        std::vector<double> sc(size_t(pos + 1 - first));
        double m = -INFINITY, l = 0;
        for (int64_t j = first; j <= pos; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += double(q[(h * n + i) * D + d]) * K[base + (g * C + j) * D + d];
          double x = dot * scale;
          if (c.cap > 0) x = c.cap * std::tanh(x / c.cap);
          m = std::max(m, sc[size_t(j - first)] = x);
        }
        for (double& x : sc) l += (x = std::exp(x - m));
        for (int64_t d = 0; d < D; ++d) {
          double ref = 0;
          for (int64_t j = first; j <= pos; ++j) ref += sc[size_t(j - first)] * V[base + (g * C + j) * D + d];
          ASSERT_NEAR(o[(i * H + h) * D + d], ref / l, 1e-5 * (1 + std::fabs(ref / l)))
              << "row " << i << " head " << h << " d " << d;
        }
      }
      // Row i alone: the single-sequence call on its slot's cells and its query.
      std::vector<float> qi(size_t(H * D));
      for (int64_t h = 0; h < H; ++h)
        std::copy(q.begin() + (h * n + i) * D, q.begin() + (h * n + i + 1) * D, qi.begin() + h * D);
      tc::DecodeAttentionArgs one = a;
      one.n = 1, one.slots = nullptr, one.slot_stride = 0;
      one.pos = dev.put(std::vector<int32_t>{int32_t(pos)});
      one.q = dev.put(qi);
      one.k_cache = static_cast<const char*>(Kd) + tc::dtype_bytes(cache, base);
      one.v_cache = static_cast<const char*>(Vd) + tc::dtype_bytes(cache, base);
      one.o = dev.put(std::vector<float>(H * D, NAN));
      one.partial = dev.put(std::vector<float>(H * splits * (D + 2), NAN));
      ASSERT_EQ(dev.be().decode_attention(one, nullptr), TC_OK);
      const auto oi = dev.get(one.o, H * D);
      for (int64_t e = 0; e < H * D; ++e)
        ASSERT_NEAR(o[i * H * D + e], oi[e], 1e-6 * (1 + std::fabs(oi[e]))) << "row " << i << " alone";
    }
    a.o = dev.put(std::vector<float>(n * H * D, NAN));
    a.partial = dev.put(std::vector<float>(n * H * splits * (D + 2), NAN));
    ASSERT_EQ(dev.be().decode_attention(a, nullptr), TC_OK);
    const auto o2 = dev.get(a.o, n * H * D);
    ASSERT_EQ(std::memcmp(o.data(), o2.data(), o.size() * sizeof(float)), 0) << "two calls differ";
  }
}

// A Q8_0 cache: keys after RoPE and values quantised per block of 32 as
// ggml's quantize_row_q8_0_ref (d = max|x| / 127 stored as f16, q =
// roundf(x / d)), against the float64 rotation: d within the f16 rounding
// of max|x| / 127 and every code within half a step (plus f32 rounding) of
// x / d, i.e. the nearest code or, at a tie, its neighbour; the values'
// bytes (no rotation: the same f32 input) identical to quant::quantize_row.
// One chunk at P and a batch of rows in their own slots; blocks outside the
// written rows untouched; an all-zero row gives d = 0, q = 0.
TEST_P(ModelOps, RopeKvAppendQ8) {
  Dev dev(GetParam());
  using tc::quant::BlockQ8_0;
  for (bool batch : {false, true})
  for (bool neox : {false, true})
  for (int form : {0, 1, 2}) {  // plain; q / k / v biases; biases and Q/K norms
  const int64_t H = 4, Hkv = 2, D = 96, C = 16, half = D / 2, stride = Hkv * C * D;
  const std::vector<int32_t> pos = batch ? std::vector<int32_t>{15, 0, 7} : std::vector<int32_t>{5, 6, 7};
  const std::vector<int32_t> slot = batch ? std::vector<int32_t>{2, 0, 1} : std::vector<int32_t>{0, 0, 0};
  const int64_t n = 3, slots_total = batch ? 3 : 1, nblocks = slots_total * stride / 32;
  RopeRows rows(n, H, Hkv, D, C, form);
  SCOPED_TRACE(rows.name(neox) + (batch ? ", batch" : ", chunk"));
  for (int64_t d = 0; d < D; ++d) rows.v_in[1 * rows.ldv + 1 * D + d] = 0.0f;  // token 1, kv head 1: d = 0 (no biases)
  for (int64_t d = 32; d < 64; ++d) rows.k_in[2 * rows.ldk + d] *= 1e3f;        // one block far larger than the others
  rows.derive();
  const std::vector<float>&q = rows.q, &k = rows.k, &v = rows.v;
  const int64_t ldq = rows.ldq, ldk = rows.ldk, ldv = rows.ldv;
  const std::vector<uint8_t> init(size_t(nblocks) * sizeof(BlockQ8_0), 0xA5);
  tc::RopeKvAppendArgs a = rows.args(dev);
  a.info.name = "test.rope_kv_append_q8";
  if (batch) a.pos = dev.put(pos), a.slots = dev.put(slot), a.slot_stride = stride;
  else a.pos = dev.put(std::vector<int32_t>{pos[0]});
  a.k_cache = dev.put(init), a.v_cache = dev.put(init);
  a.cache = TC_DTYPE_Q8_0;
  a.neox = neox;
  ASSERT_EQ(dev.be().rope_kv_append(a, nullptr), TC_OK);
  const auto qt = dev.get(a.qt, H * n * D);
  const auto kb = dev.get(static_cast<const uint8_t*>(a.k_cache), init.size());
  const auto vb = dev.get(static_cast<const uint8_t*>(a.v_cache), init.size());
  auto rot = [&](const float* x, int64_t p, int64_t d) { return rows.rot(x, p, d, neox); };
  // Block `b` of the cache bytes against the exact values x[0..32).
  auto check_block = [&](const std::vector<uint8_t>& bytes, int64_t b, const double* x, const char* what) {
    BlockQ8_0 blk;
    std::memcpy(&blk, bytes.data() + b * sizeof(BlockQ8_0), sizeof blk);
    double amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const double d = tc::f16_to_f32(blk.d), dx = amax / 127;
    // d is rounded to f16: half a step, 2^-11 of it, or half the subnormal
    // step 2^-24 below 2^-14 (a block of tiny values: a normed row dominated
    // by another block).
    ASSERT_NEAR(d, dx, std::max(dx * (0x1p-11 + 1e-6), 0x1p-25 * (1 + 1e-6))) << what << " block " << b << ": scale";
    for (int j = 0; j < 32; ++j) {
      const double code = amax == 0 ? 0.0 : x[j] / dx;
      ASSERT_LE(std::fabs(blk.qs[j] - code), 0.5 + 1e-4) << what << " block " << b << " element " << j;
    }
  };
  for (int64_t i = 0; i < n; ++i)
    for (int64_t d = 0; d < D; ++d)
      for (int64_t h = 0; h < H; ++h)
        ASSERT_NEAR(qt[(h * n + i) * D + d], rot(&q[i * ldq + h * D], pos[i], d), 1e-5) << "row " << i;
  std::vector<bool> written(size_t(nblocks), false);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t g = 0; g < Hkv; ++g) {
      const int64_t first = (slot[i] * stride + (g * C + pos[i]) * D) / 32;
      std::vector<double> kr(static_cast<size_t>(D)), vr(static_cast<size_t>(D));
      for (int64_t d = 0; d < D; ++d) kr[d] = rot(&k[i * ldk + g * D], pos[i], d), vr[d] = v[i * ldv + g * D + d];
      const std::vector<uint8_t> vq = q8_quantize(std::vector<float>(&v[i * ldv + g * D], &v[i * ldv + g * D] + D));
      ASSERT_EQ(std::memcmp(vb.data() + first * sizeof(BlockQ8_0), vq.data(), vq.size()), 0)
          << "value row " << i << " kv head " << g << ": not ggml's bytes";
      for (int64_t b = 0; b < D / 32; ++b) {
        check_block(kb, first + b, &kr[size_t(b * 32)], "key");
        check_block(vb, first + b, &vr[size_t(b * 32)], "value");
        written[size_t(first + b)] = true;
      }
    }
  for (int64_t b = 0; b < nblocks; ++b)
    if (!written[size_t(b)])
      for (size_t e = 0; e < sizeof(BlockQ8_0); ++e) {
        ASSERT_EQ(kb[b * sizeof(BlockQ8_0) + e], 0xA5) << "k cache block " << b << " written";
        ASSERT_EQ(vb[b * sizeof(BlockQ8_0) + e], 0xA5) << "v cache block " << b << " written";
      }
  }
}

// Attention over a Q8_0 cache against float64 attention over the
// unquantised K and V: quantisation moves each score s_j by at most
// e_j = scale sum_d |q_d| |dK_jd| (|dK| <= d_b / 2 per element; soft-capping
// is 1-Lipschitz), so the softmax weights by a factor within e^(+-2e)
// (e = max e_j), and
//   |o_d - o*_d| <= (e^(2e) - 1) max_j |V_jd| + max_j |dV_jd|
// (dV: the values' own quantisation). The bound is computed from the
// actual errors; a kernel that skipped the scales or misread a block
// would exceed it by orders of magnitude.
TEST_P(ModelOps, DecodeAttentionQ8AgainstUnquantised) {
  Dev dev(GetParam());
  struct Case {
    int64_t H, Hkv, D, C;
    std::vector<int32_t> pos;
    int64_t window = 0;
    float cap = 0.0f;
  };
  const Case cases[] = {
      {32, 8, 128, 1024, {0, 100, 1023}},          // LLaMA's head dim, G = 4
      {4, 1, 256, 600, {599}, 0, 0.0f},            // two float4s a lane
      {8, 2, 64, 700, {699}, 300, 0.7f},           // window and soft-capping
  };
  for (const Case& c : cases) {
    const int64_t H = c.H, Hkv = c.Hkv, D = c.D, C = c.C, G = H / Hkv;
    const std::vector<float> q = randn(H * D), K = randn(Hkv * C * D), V = randn(Hkv * C * D);
    std::vector<float> Kq = K, Vq = V;
    const float scale = float(1.0 / std::sqrt(double(D)));
    const void* Kd = put_cache_values(dev, Kq, TC_DTYPE_Q8_0);
    const void* Vd = put_cache_values(dev, Vq, TC_DTYPE_Q8_0);
    for (int32_t pos : c.pos) {
      SCOPED_TRACE("H " + std::to_string(H) + " D " + std::to_string(D) + " pos " + std::to_string(pos));
      tc::DecodeAttentionArgs a;
      a.info.name = "test.decode_attention_q8";
      a.H = H, a.Hkv = Hkv, a.D = D, a.C = C, a.scale = scale;
      a.window = c.window, a.softcap = c.cap;
      a.pos = dev.put(std::vector<int32_t>{pos});
      a.q = dev.put(q), a.k_cache = Kd, a.v_cache = Vd, a.cache = TC_DTYPE_Q8_0;
      a.o = dev.put(std::vector<float>(H * D, NAN));
      a.partial = dev.put(std::vector<float>(H * tc::decode_attention_splits(C) * (D + 2), NAN));
      a.arrivals = dev.put(std::vector<uint32_t>(size_t(H), 0u));
      ASSERT_EQ(dev.be().decode_attention(a, nullptr), TC_OK);
      const auto o = dev.get(a.o, H * D);
      const int64_t first = c.window > 0 ? std::max<int64_t>(0, pos + 1 - c.window) : 0;
      double worst = 0;  // the largest error as a fraction of its bound
      for (int64_t h = 0; h < H; ++h) {
        const int64_t g = h / G;
        std::vector<double> s(size_t(pos + 1 - first));
        double m = -INFINITY, l = 0, e = 0;
        for (int64_t j = first; j <= pos; ++j) {
          double dot = 0, err = 0;
          for (int64_t d = 0; d < D; ++d) {
            const int64_t at = (g * C + j) * D + d;
            dot += double(q[h * D + d]) * K[at];
            err += std::fabs(double(q[h * D + d])) * std::fabs(double(Kq[at]) - K[at]);
          }
          double x = dot * scale;
          if (c.cap > 0) x = c.cap * std::tanh(x / c.cap);
          m = std::max(m, s[size_t(j - first)] = x);
          e = std::max(e, err * scale);
        }
        for (double& x : s) l += (x = std::exp(x - m));
        for (int64_t d = 0; d < D; ++d) {
          double ref = 0, vmax = 0, dv = 0;
          for (int64_t j = first; j <= pos; ++j) {
            const int64_t at = (g * C + j) * D + d;
            ref += s[size_t(j - first)] * V[at];
            vmax = std::max(vmax, std::fabs(double(V[at])));
            dv = std::max(dv, std::fabs(double(Vq[at]) - V[at]));
          }
          const double bound = std::expm1(2 * e) * vmax + dv + 1e-5 * (1 + std::fabs(ref / l));
          ASSERT_LE(std::fabs(o[h * D + d] - ref / l), bound) << "head " << h << " d " << d;
          worst = std::max(worst, std::fabs(o[h * D + d] - ref / l) / bound);
        }
      }
      // The quantisation is visible: the outputs are not those of the exact cache.
      EXPECT_GT(worst, 0.0);
    }
  }
}

// A Q8_0 cache's rows widened for a chunk's attention: every element q d,
// exact in f32 (dequantize_row), rounded to nearest even in f16 and bf16;
// pitches of whole blocks, nothing written past n.
TEST_P(ModelOps, ConvertQ8CacheRows) {
  Dev dev(GetParam());
  const int64_t rows = 3, n = 96, src_pitch = 160, dst_pitch = 100;
  std::vector<float> x = randn(rows * src_pitch);
  const void* src = put_cache_values(dev, x, TC_DTYPE_Q8_0);  // x: the dequantised values
  for (tc_dtype to : {TC_DTYPE_F32, TC_DTYPE_F16, TC_DTYPE_BF16}) {
    SCOPED_TRACE(tc_dtype_name(to));
    tc::ConvertArgs c;
    c.info.name = "test.convert_q8";
    c.rows = rows, c.n = n, c.src_pitch = src_pitch, c.dst_pitch = dst_pitch;
    c.src_dtype = TC_DTYPE_Q8_0, c.dst_dtype = to;
    c.src = src;
    float* wide = nullptr;
    uint16_t* narrow = nullptr;
    if (to == TC_DTYPE_F32) c.dst = wide = dev.put(std::vector<float>(rows * dst_pitch, NAN));
    else c.dst = narrow = dev.put(std::vector<uint16_t>(rows * dst_pitch, 0x7FC1));  // NaN in f16 and bf16
    ASSERT_EQ(dev.be().convert(c, nullptr), TC_OK);
    std::vector<float> out(size_t(rows * dst_pitch));
    if (wide) out = dev.get(wide, rows * dst_pitch);
    else {
      const auto bits = dev.get(narrow, rows * dst_pitch);
      for (size_t i = 0; i < bits.size(); ++i)
        out[i] = to == TC_DTYPE_F16 ? tc::f16_to_f32(bits[i]) : tc::bf16_to_f32(bits[i]);
    }
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < dst_pitch; ++i) {
        const float got = out[size_t(r * dst_pitch + i)];
        if (i >= n) {
          ASSERT_TRUE(std::isnan(got)) << "row " << r << " element " << i << " written past n";
          continue;
        }
        const float want = x[size_t(r * src_pitch + i)];
        const float rounded = to == TC_DTYPE_F32   ? want
                              : to == TC_DTYPE_F16 ? tc::f16_to_f32(tc::f32_to_f16(want))
                                                   : tc::bf16_to_f32(tc::f32_to_bf16(want));
        ASSERT_EQ(got, rounded) << "row " << r << " element " << i;
      }
  }
}

TEST_P(ModelOps, AddConvertHeadsToTokens) {
  Dev dev(GetParam());
  const int64_t n = 1000;
  const std::vector<float> x = randn(n), y = randn(n);
  tc::AddArgs a;
  a.info.name = "test.add";
  a.n = n;
  a.x = dev.put(x), a.y = dev.put(y);
  ASSERT_EQ(dev.be().add(a, nullptr), TC_OK);
  const auto sum = dev.get(a.x, n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(sum[i], x[i] + y[i]);
  // Rows of D RMS-normed before the add: x += y rstd gamma, in f64. D 40 and
  // 4800 take the GPU's float4 loads (4800: more loads than a block's
  // threads), D 50 its single floats.
  for (const int64_t D : {int64_t(40), int64_t(50), int64_t(4800)}) {
    const int64_t m = D == 4800 ? 2 * D : n;
    const std::vector<float> xn = randn(m), yn = randn(m), gamma = randn(D);
    a.n = m, a.x = dev.put(xn), a.y = dev.put(yn);
    a.D = D, a.gamma = dev.put(gamma), a.eps = 1e-6f;
    ASSERT_EQ(dev.be().add(a, nullptr), TC_OK);
    const auto normed = dev.get(a.x, m);
    EXPECT_EQ(dev.get(a.y, m), yn) << "y changed";
    for (int64_t r = 0; r < m; r += D) {
      double ss = 0;
      for (int64_t d = 0; d < D; ++d) ss += double(yn[r + d]) * yn[r + d];
      const double rs = 1 / std::sqrt(ss / D + 1e-6);
      for (int64_t d = 0; d < D; ++d)
        ASSERT_NEAR(normed[r + d], xn[r + d] + yn[r + d] * rs * gamma[d], 1e-5)
            << "D " << D << " row " << r / D << " element " << d;
    }
  }
  // With norm_out: the sum's rows normed for the next product, out = s
  // rstd(s) norm_gamma in f32 or f16, after x += y, x += y rstd gamma or no
  // add (y null); in f64, out poisoned, y and the gammas untouched.
  for (const int64_t D : {int64_t(40), int64_t(50), int64_t(4800)})
    for (int add = 0; add < 3; ++add)
      for (tc_dtype ot : {TC_DTYPE_F32, TC_DTYPE_F16}) {
        SCOPED_TRACE("D " + std::to_string(D) + " add " + std::to_string(add) + (ot == TC_DTYPE_F16 ? " f16" : " f32"));
        const int64_t m = D == 4800 ? 64 * D : 7 * D;  // 64 rows: the CPU splits them over its threads
        const std::vector<float> xn = randn(m), yn = randn(m), gamma = randn(D), ng = randn(D);
        tc::AddArgs b;
        b.info.name = "test.residual_norm";
        b.n = m, b.D = D, b.eps = 1e-5f;
        b.x = dev.put(xn);
        b.y = add ? dev.put(yn) : nullptr;
        b.gamma = add == 2 ? dev.put(gamma) : nullptr;
        b.norm_gamma = dev.put(ng);
        b.norm_dtype = ot;
        void* out = ot == TC_DTYPE_F16 ? static_cast<void*>(dev.put(std::vector<uint16_t>(size_t(m), 0x7e00)))
                                       : static_cast<void*>(dev.put(std::vector<float>(size_t(m), NAN)));
        b.norm_out = out;
        ASSERT_EQ(dev.be().add(b, nullptr), TC_OK);
        const auto xs = dev.get(b.x, m);
        if (add) EXPECT_EQ(dev.get(b.y, m), yn) << "y changed";
        EXPECT_EQ(dev.get(b.norm_gamma, D), ng) << "norm_gamma changed";
        std::vector<float> got(static_cast<size_t>(m));
        if (ot == TC_DTYPE_F16) {
          const auto bits = dev.get(static_cast<const uint16_t*>(out), m);
          for (int64_t i = 0; i < m; ++i) got[size_t(i)] = tc::f16_to_f32(bits[size_t(i)]);
        } else {
          got = dev.get(static_cast<const float*>(out), m);
        }
        for (int64_t r = 0; r < m; r += D) {
          double sy = 0;
          for (int64_t d = 0; d < D; ++d) sy += double(yn[r + d]) * yn[r + d];
          const double ry = add == 2 ? 1 / std::sqrt(sy / D + 1e-5) : 1.0;
          std::vector<double> sum(static_cast<size_t>(D));
          double ss = 0;
          for (int64_t d = 0; d < D; ++d) {
            sum[size_t(d)] = double(xn[r + d]) + (add ? double(yn[r + d]) * ry * (add == 2 ? gamma[d] : 1.0) : 0.0);
            ss += sum[size_t(d)] * sum[size_t(d)];
          }
          const double rx = 1 / std::sqrt(ss / D + 1e-5);
          for (int64_t d = 0; d < D; ++d) {
            ASSERT_NEAR(xs[r + d], sum[size_t(d)], 1e-5) << "x row " << r / D << " element " << d;
            const double want = sum[size_t(d)] * rx * ng[d];
            const double tol = ot == TC_DTYPE_F16 ? 1e-3 * std::fabs(want) + 1e-4 : 1e-5 * std::fabs(want) + 1e-5;
            ASSERT_NEAR(got[size_t(r + d)], want, tol) << "out row " << r / D << " element " << d;
          }
        }
      }

  for (tc_dtype t : {TC_DTYPE_F16, TC_DTYPE_BF16}) {
    tc::ConvertArgs c;
    c.info.name = "test.convert";
    c.n = n, c.src_dtype = TC_DTYPE_F32, c.dst_dtype = t;
    c.src = dev.put(x);
    uint16_t* narrow = dev.put(std::vector<uint16_t>(n, 0xFFFF));
    c.dst = narrow;
    ASSERT_EQ(dev.be().convert(c, nullptr), TC_OK);
    const auto bits = dev.get(narrow, n);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(bits[i], t == TC_DTYPE_F16 ? tc::f32_to_f16(x[i]) : tc::f32_to_bf16(x[i])) << i;
    c.src_dtype = t, c.dst_dtype = TC_DTYPE_F32;
    c.src = narrow;
    float* wide = dev.put(std::vector<float>(n, NAN));
    c.dst = wide;
    ASSERT_EQ(dev.be().convert(c, nullptr), TC_OK);
    const auto back = dev.get(wide, n);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(back[i], t == TC_DTYPE_F16 ? tc::f16_to_f32(bits[i]) : tc::bf16_to_f32(bits[i])) << i;
  }

  const int64_t T = 5, H = 3, D = 7;
  const std::vector<float> src = randn(H * T * D);
  // f32 and f16 rows move as they are (the bits of each element), over a poisoned output.
  auto moved = [&](const auto& host, tc_dtype dtype, auto poison) {
    using E = typename std::decay_t<decltype(host)>::value_type;
    tc::HeadsToTokensArgs t;
    t.info.name = "test.heads_to_tokens";
    t.n = T, t.H = H, t.D = D;
    t.dtype = dtype;
    t.src = dev.put(host);
    E* dst = dev.put(std::vector<E>(size_t(T * H * D), poison));
    t.dst = dst;
    ASSERT_EQ(dev.be().heads_to_tokens(t, nullptr), TC_OK);
    const auto out = dev.get(dst, T * H * D);
    for (int64_t i = 0; i < T; ++i)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d) ASSERT_EQ(out[(i * H + h) * D + d], host[(h * T + i) * D + d]);
  };
  moved(src, TC_DTYPE_F32, float(NAN));
  std::vector<uint16_t> src16(src.size());
  for (size_t i = 0; i < src.size(); ++i) src16[i] = tc::f32_to_f16(src[i]);
  moved(src16, TC_DTYPE_F16, uint16_t(0x7e00));
}

// The GLU of [gate | up] rows (row stride ld >= 2F): SiLU and GELU's tanh
// form against float64, into f32 or f16 (poisoned first), the input untouched.
TEST_P(ModelOps, GluRowsOfTheJoinedProduct) {
  Dev dev(GetParam());
  const int64_t n = 9, F = 70, ld = 2 * F + 6;
  std::vector<float> gu = randn(n * ld);
  for (float& v : gu) v *= 3.0f;  // both tails of the gate
  for (bool gelu : {false, true})
    for (tc_dtype ot : {TC_DTYPE_F32, TC_DTYPE_F16}) {
      SCOPED_TRACE(std::string(gelu ? "gelu" : "silu") + (ot == TC_DTYPE_F16 ? " f16" : " f32"));
      tc::GluRowsArgs a;
      a.info.name = "test.glu_rows";
      a.n = n, a.F = F, a.ld = ld, a.gelu = gelu;
      a.gu = dev.put(gu);
      a.out_dtype = ot;
      uint16_t* o16 = ot == TC_DTYPE_F16 ? dev.put(std::vector<uint16_t>(size_t(n * F), 0x7e00)) : nullptr;
      float* o32 = ot == TC_DTYPE_F32 ? dev.put(std::vector<float>(size_t(n * F), NAN)) : nullptr;
      a.out = o16 ? static_cast<void*>(o16) : static_cast<void*>(o32);
      ASSERT_EQ(dev.be().glu_rows(a, nullptr), TC_OK);
      EXPECT_EQ(dev.get(a.gu, n * ld), gu) << "input changed";
      std::vector<float> got(static_cast<size_t>(n * F));
      if (o16) {
        const auto bits = dev.get(o16, n * F);
        for (size_t i = 0; i < got.size(); ++i) got[i] = tc::f16_to_f32(bits[i]);
      } else {
        got = dev.get(o32, n * F);
      }
      for (int64_t i = 0; i < n; ++i)
        for (int64_t f = 0; f < F; ++f) {
          const double g = gu[size_t(i * ld + f)], u = gu[size_t(i * ld + F + f)];
          const double act = gelu ? 0.5 * g * (1 + std::tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)))
                                  : g / (1 + std::exp(-g));
          const double want = act * u;
          const double tol = (ot == TC_DTYPE_F16 ? 1e-3 : 2e-6) * std::fabs(want) + 1e-6;
          ASSERT_NEAR(got[size_t(i * F + f)], want, tol) << "row " << i << " f " << f;
        }
    }
}

// The LLaMA prefill's products: Y[M, N] = alpha X W^T + beta Y with f16 /
// bf16 X and W and an f32 Y (GemmArgs::c_f32), against a float64 reference
// of the rounded inputs; shapes off every tile size, Y poisoned when beta
// is 0 and read when not; K = 0 scales Y alone.
TEST_P(ModelOps, GemmWritesAnF32Output) {
  Dev dev(GetParam());
  const int64_t M = 37, N = 50, K = 96;
  for (tc_dtype t : {TC_DTYPE_F16, TC_DTYPE_BF16})
    for (double beta : {0.0, 0.5})
      for (int64_t k : {K, int64_t(0)}) {
        SCOPED_TRACE(std::string(t == TC_DTYPE_F16 ? "f16" : "bf16") + " beta " + std::to_string(beta) + " K " +
                     std::to_string(k));
        auto narrow = [&](const std::vector<float>& v, std::vector<double>* wide) {
          std::vector<uint16_t> h(v.size());
          wide->resize(v.size());
          for (size_t i = 0; i < v.size(); ++i) {
            h[i] = t == TC_DTYPE_F16 ? tc::f32_to_f16(v[i]) : tc::f32_to_bf16(v[i]);
            (*wide)[i] = t == TC_DTYPE_F16 ? tc::f16_to_f32(h[i]) : tc::bf16_to_f32(h[i]);
          }
          return h;
        };
        std::vector<double> x, w;
        const std::vector<uint16_t> xh = narrow(randn(size_t(M * K)), &x), wh = narrow(randn(size_t(N * K)), &w);
        const std::vector<float> c0 = beta == 0.0 ? std::vector<float>(size_t(M * N), NAN) : randn(size_t(M * N));
        tc::GemmArgs g;
        g.info.name = "test.gemm_f32_out";
        tc_gemm_desc& d = g.d;
        std::memset(&d, 0, sizeof d);
        d.M = M, d.N = N, d.K = k;
        d.dtype = t, d.accum = TC_DTYPE_F32;
        d.alpha = 1.5, d.beta = beta;
        d.transpose_b = 1;
        d.lda = K, d.ldb = K, d.ldc = N;
        d.batch = 1;
        d.stride_a = M * K, d.stride_b = N * K, d.stride_c = M * N;
        g.a = dev.put(xh), g.b = dev.put(wh);
        float* c = dev.put(c0);
        g.c = c;
        g.c_f32 = true;
        ASSERT_EQ(dev.be().gemm(g, nullptr), TC_OK) << tc_last_error_detail();
        const auto got = dev.get(c, size_t(M * N));
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < N; ++n) {
            double ref = 0, mag = 0;
            for (int64_t i = 0; i < k; ++i) {
              ref += x[size_t(m * K + i)] * w[size_t(n * K + i)];
              mag += std::fabs(x[size_t(m * K + i)] * w[size_t(n * K + i)]);
            }
            const double old = beta == 0.0 ? 0.0 : beta * c0[size_t(m * N + n)];
            ref = 1.5 * ref + old;
            ASSERT_NEAR(got[size_t(m * N + n)], ref, 1e-5 * (1.5 * mag + std::fabs(old)) + 1e-6)
                << "row " << m << ", output " << n;
          }
      }
}

TEST_P(ModelOps, Copy2dPacksCachePrefixes) {
  Dev dev(GetParam());
  const int64_t heads = 3, C = 10, D = 4, S = 6;
  const std::vector<float> cache = randn(heads * C * D);
  tc::Copy2dArgs c;
  c.info.name = "test.copy_2d";
  c.rows = heads;
  c.row_bytes = size_t(S * D) * 4, c.src_pitch = size_t(C * D) * 4, c.dst_pitch = c.row_bytes;
  c.src = dev.put(cache);
  float* dst = dev.put(std::vector<float>(heads * S * D + 1, -3.0f));
  c.dst = dst;
  ASSERT_EQ(dev.be().copy_2d(c, nullptr), TC_OK);
  const auto out = dev.get(dst, heads * S * D + 1);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t e = 0; e < S * D; ++e) ASSERT_EQ(out[h * S * D + e], cache[h * C * D + e]);
  EXPECT_EQ(out[heads * S * D], -3.0f);  // nothing past the last piece
}

// The index of the first largest value of a row, a NaN counted largest:
// what NumPy's argmax returns.
int32_t argmax_reference(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) return int32_t(i);
    if (x[i] > x[best]) best = i;
  }
  return int32_t(best);
}

TEST_P(ModelOps, ArgmaxRowsIsNumpysArgmax) {
  Dev dev(GetParam());
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(256), int64_t(1000), int64_t(4099), int64_t(262144)}) {
    for (int64_t offset : {int64_t(0), int64_t(1)}) {  // 1: the rows not 16-byte aligned
      const int64_t rows = n > 5000 ? 3 : 9;
      std::vector<float> x = randn(offset + rows * n);
      std::uniform_int_distribution<int64_t> at(0, n - 1);
      float* r = x.data() + offset;
      // Row 0 as drawn; 1: the maximum twice, the later one first found by a
      // strided pass; 2: all -inf; 3: a NaN after the maximum; 4: two NaNs;
      // 5: every value equal; 6-8 (and the long rows' 1-2): as drawn.
      if (n > 1) {
        const int64_t i = at(rng()), j = at(rng()), lo = std::min(i, j), hi = std::max(i, j);
        r[1 * n + lo] = r[1 * n + hi] = 50.0f;
        for (int64_t k = 0; k < n; ++k) r[2 * n + k] = -INFINITY;
      }
      if (rows > 5) {
        r[3 * n + at(rng())] = 60.0f, r[3 * n + n - 1] = NAN;
        r[4 * n + n / 2] = NAN, r[4 * n + n / 3] = NAN;
        for (int64_t k = 0; k < n; ++k) r[5 * n + k] = 0.25f;
      }
      tc::ArgmaxRowsArgs a;
      a.info.name = "test.argmax_rows";
      a.rows = rows, a.n = n;
      const float* xd = dev.put(x);
      a.x = xd + offset;
      int32_t* out = dev.put(std::vector<int32_t>(size_t(rows + 1), -7));
      a.out = out;
      ASSERT_EQ(dev.be().argmax_rows(a, nullptr), TC_OK);
      const auto got = dev.get(out, size_t(rows + 1));
      for (int64_t row = 0; row < rows; ++row)
        ASSERT_EQ(got[size_t(row)], argmax_reference(r + row * n, n)) << "n " << n << ", offset " << offset << ", row " << row;
      EXPECT_EQ(got[size_t(rows)], -7);  // nothing past the last row
    }
  }
}

// The chunk attention over a cache in place (AttentionArgs::kv_rows): kv
// heads R rows apart, the rows past Skv NaN, against the same call on the
// heads packed Skv rows apart: the same bits (our kernels on the same
// values), f32 and f16, a causal bottom-right mask (Sq < Skv), GQA. On a
// GPU also through cuDNN's plans (built at the first call): within f16's
// rounding of each other.
TEST_P(ModelOps, AttentionReadsKvHeadsInPlace) {
  Dev dev(GetParam());
  const int64_t B = 2, H = 4, Hkv = 2, Sq = 5, Skv = 9, R = 13, D = 16;
  const bool gpu = GetParam() == "cuda";
  for (int pass = 0; pass < (gpu ? 3 : 2); ++pass) {
    const tc_dtype dt = pass == 0 ? TC_DTYPE_F32 : TC_DTYPE_F16;
    const bool cudnn = pass == 2;
    SCOPED_TRACE(cudnn ? "f16 through cuDNN" : dt == TC_DTYPE_F16 ? "f16" : "f32");
    if (gpu) {
      setenv("TC_CUDNN_PLAN_AFTER", cudnn ? "1" : "1000000", 1);
      setenv("TC_CUDNN_PLAN_BACKGROUND", "0", 1);
    }
    const std::vector<float> q = randn(B * H * Sq * D), k = randn(B * Hkv * Skv * D), v = randn(B * Hkv * Skv * D);
    std::vector<float> ks(size_t(B * Hkv * R * D), NAN), vs(size_t(B * Hkv * R * D), NAN);
    for (int64_t h = 0; h < B * Hkv; ++h)
      for (int64_t e = 0; e < Skv * D; ++e) ks[size_t(h * R * D + e)] = k[size_t(h * Skv * D + e)],
                                             vs[size_t(h * R * D + e)] = v[size_t(h * Skv * D + e)];
    auto put = [&](const std::vector<float>& x) { return put_cache(dev, x, dt); };
    auto out = [&](const void* o) { return cache_values(dev, o, size_t(B * H * Sq * D), dt); };
    tc::AttentionArgs a;
    a.info.name = "test.attention_in_place";
    a.d.batch = B, a.d.heads = H, a.d.kv_heads = Hkv, a.d.seq_q = Sq, a.d.seq_kv = Skv, a.d.head_dim = D;
    a.d.dtype = dt, a.d.accum = TC_DTYPE_F32, a.d.softmax_scale = 1.0 / std::sqrt(double(D)), a.d.causal = 1;
    a.q = put(q);
    const std::vector<float> poison(size_t(B * H * Sq * D), NAN);
    a.k = put(k), a.v = put(v), a.o = put(poison);
    ASSERT_EQ(dev.be().attention_forward(a, nullptr), TC_OK);
    const std::vector<float> packed = out(a.o);
    a.k = put(ks), a.v = put(vs), a.o = put(poison), a.kv_rows = R;
    ASSERT_EQ(dev.be().attention_forward(a, nullptr), TC_OK);
    const std::vector<float> in_place = out(a.o);
    if (gpu) std::printf("  %s: %s\n", cudnn ? "cudnn pass" : "our kernels", tc_cuda_last_kernel_name());
    for (size_t i = 0; i < packed.size(); ++i) {
      ASSERT_TRUE(std::isfinite(packed[i])) << i;
      if (cudnn) ASSERT_NEAR(in_place[i], packed[i], 4e-3 * (1.0 + std::fabs(packed[i]))) << "element " << i;
      else ASSERT_EQ(in_place[i], packed[i]) << "element " << i;
    }
  }
  if (gpu) unsetenv("TC_CUDNN_PLAN_AFTER"), unsetenv("TC_CUDNN_PLAN_BACKGROUND");
}

// Random Q4_0 / Q4_1 / Q8_0 rows (scales and mins of either sign, every
// code); the K-quants from random_rows (every code and sub-scale).
std::vector<uint8_t> random_q8_weights(int32_t fmt, int64_t N, int64_t K) {
  using tc::quant::Q4_0, tc::quant::Q4_1, tc::quant::Q8_0;
  if (fmt != Q4_0 && fmt != Q4_1 && fmt != Q8_0) return random_rows(fmt, N, K);
  const int64_t bytes = fmt == Q4_0 ? 18 : fmt == Q4_1 ? 20 : 34, nb = K / 32, scales = fmt == Q4_1 ? 2 : 1;
  std::vector<uint8_t> w(size_t(N * nb * bytes));
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.005f, 0.05f);
  for (int64_t b = 0; b < N * nb; ++b) {
    uint8_t* p = w.data() + b * bytes;
    for (int i = 0; i < scales; ++i) {
      const uint16_t d = tc::f32_to_f16(byte(rng()) & 1 ? scale(rng()) : -scale(rng()));
      std::memcpy(p + 2 * i, &d, 2);
    }
    for (int64_t i = 2 * scales; i < bytes; ++i) p[i] = uint8_t(byte(rng()));
  }
  return w;
}

// Weight k of a row of W (GGUF layout) as a * q + b, every part exact in
// float64: a the scale times the code, b the offset (-dmin m for Q4_K /
// Q5_K, 0 otherwise; the -8 / -32 offsets are folded into q).
struct WeightTerm {
  double aq, b;
};
WeightTerm weight_term(int32_t fmt, const uint8_t* row, int64_t k) {
  using namespace tc::quant;
  auto h = [](const uint8_t* p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return double(tc::f16_to_f32(v));
  };
  switch (fmt) {
    case Q4_0: {
      const uint8_t* blk = row + (k / 32) * 18;
      const int i = int(k % 32), q = (i < 16 ? blk[2 + i] & 15 : blk[2 + i - 16] >> 4) - 8;
      return {h(blk) * q, 0.0};
    }
    case Q5_0: {
      const uint8_t* blk = row + (k / 32) * 22;
      const int i = int(k % 32), nib = i < 16 ? blk[6 + i] & 15 : blk[6 + i - 16] >> 4;
      const uint32_t qh = uint32_t(blk[2]) | uint32_t(blk[3]) << 8 | uint32_t(blk[4]) << 16 | uint32_t(blk[5]) << 24;
      return {h(blk) * ((nib | int((qh >> i) & 1u) << 4) - 16), 0.0};
    }
    case Q4_1: {
      const uint8_t* blk = row + (k / 32) * 20;
      const int i = int(k % 32), q = i < 16 ? blk[4 + i] & 15 : blk[4 + i - 16] >> 4;
      return {h(blk) * q, h(blk + 2)};
    }
    case Q5_1: {
      const uint8_t* blk = row + (k / 32) * 24;
      const int i = int(k % 32), nib = i < 16 ? blk[8 + i] & 15 : blk[8 + i - 16] >> 4;
      const uint32_t qh = uint32_t(blk[4]) | uint32_t(blk[5]) << 8 | uint32_t(blk[6]) << 16 | uint32_t(blk[7]) << 24;
      return {h(blk) * (nib | int((qh >> i) & 1u) << 4), h(blk + 2)};
    }
    case Q8_0: {
      const uint8_t* blk = row + (k / 32) * 34;
      return {h(blk) * int8_t(blk[2 + k % 32]), 0.0};
    }
    case Q4_K: case Q5_K: {
      const bool five = fmt == Q5_K;
      const uint8_t* blk = row + (k / 256) * (five ? 176 : 144);
      const int e = int(k % 256), j = e / 32, l = e % 32;
      uint8_t sc, m;
      scale_min_k4(j, blk + 4, &sc, &m);
      const uint8_t* qs = blk + (five ? 48 : 16) + 32 * (j / 2);
      int q = j % 2 ? qs[l] >> 4 : qs[l] & 15;
      if (five) q |= ((blk[16 + l] >> j) & 1) << 4;
      return {h(blk) * sc * q, -h(blk + 2) * m};
    }
    case Q6_K: {
      const uint8_t* blk = row + (k / 256) * 210;
      const int e = int(k % 256), hf = e / 128, g = (e % 128) / 32, l = e % 32;
      const int lo = (g & 1 ? blk[64 * hf + 32 + l] : blk[64 * hf + l]) >> (g & 2 ? 4 : 0) & 15;
      const int q = (lo | ((blk[128 + 32 * hf + l] >> (2 * g)) & 3) << 4) - 32;
      return {h(blk + 208) * int8_t(blk[192 + 8 * hf + 2 * g + l / 16]) * q, 0.0};
    }
  }
  return {NAN, NAN};
}

// quantize_q8 against its contract (dx = max|v| / 127, |xq dx - v| <= dx / 2,
// sx = dx sum(xq)), then gemv_q8 with each epilogue against the float64 sum of
// the formula on the device's own quantised X, and the product of the
// dequantised weights with v within the 8-bit bound sum |w| dx / 2.
TEST_P(ModelOps, QuantizeAndGemvQ8) {
  Dev dev(GetParam());
  using tc::quant::Q4_0, tc::quant::Q8_0, tc::quant::Q4_1, tc::quant::Q5_1, tc::quant::Q4_K, tc::quant::Q5_K,
      tc::quant::Q6_K;
  struct Case {
    int32_t fmt;
    int64_t N, K;
    int64_t max_m = 70;  // rows of X up to
  };
  // K = 96: rows of 54 / 102 bytes (not 16-byte multiples, W's end mid-chunk);
  // 8192 / 11008 / 4096: several staged segments per row. K-quants: one
  // superblock (fewer than the lanes of a warp), 11008 (43: the lanes'
  // last round partial), 14336 (56). N = 24000 with one row of X: many
  // rows a CTA (on a GPU the streaming kernel's Q4_0 CTAs take 5-6 tiles of
  // 16 rows each, around their ring of 4 stages more than once). K > 4096
  // with one row of X on a GPU: gemv_q8_xreg, a row over 2-4 warps (8192,
  // 11008, 14336: the last slice partly empty), and for K 2049..4096 with
  // X quantised by the product (4096, 3072); N = 3000 / 2500 give its
  // groups of warps a second, partial round of rows. The streaming kernel
  // takes the K-quants with one row of X too: Q6_K at 11008 has 86 bytes of
  // scales a row, so its tiles' scales start anywhere in a 16-byte chunk
  // (N = 24; with N = 10 the rows' scales do not end on a 16-byte boundary
  // and the warp-per-row kernel takes it), Q4_K at 11008 tiles of 4 rows,
  // 16 of them. Q4_1 / Q5_1 (read in place, d q + m): on a GPU the
  // streaming kernel at K 4096 / 512 / 11008 with one row of X, the staged
  // warp-per-row kernel at K 96 / 576 (SmolLM2's) and for several rows;
  // they have no f16 X kernel there (refused). K 576 / 640 / 1536 with one
  // row of X and odd N: the small models' shapes (SmolLM2's n_embd 576,
  // Gemma 3 270M's 640), whole blocks of 32 but not of 256.
  for (const Case& c : {Case{Q4_0, 7, 96}, Case{Q4_0, 64, 8192}, Case{Q4_0, 26, 11008}, Case{Q8_0, 9, 96},
                        Case{Q8_0, 40, 4096}, Case{Q8_0, 3, 32}, Case{Q4_K, 7, 256}, Case{Q4_K, 34, 4096},
                        Case{Q4_K, 10, 11008}, Case{Q5_K, 9, 512}, Case{Q5_K, 16, 4096}, Case{Q6_K, 5, 256},
                        Case{Q6_K, 40, 4096}, Case{Q6_K, 6, 14336}, Case{Q4_0, 4224, 512},
                        Case{Q5_K, 4224, 256}, Case{Q6_K, 4224, 256}, Case{Q4_0, 24000, 512, 1},
                        Case{Q4_K, 24000, 256, 1}, Case{Q6_K, 24000, 256, 1}, Case{Q8_0, 12, 11008, 11},
                        Case{Q4_0, 9, 14336, 1}, Case{Q4_0, 3000, 8192, 1}, Case{Q4_0, 40, 4096, 1},
                        Case{Q4_0, 2500, 3072, 1}, Case{Q6_K, 24, 11008, 1}, Case{Q6_K, 10, 11008, 1},
                        Case{Q4_K, 64, 11008, 1}, Case{Q5_K, 40, 4096, 1}, Case{Q4_1, 7, 96},
                        Case{Q4_1, 40, 4096}, Case{Q4_1, 24000, 512, 1}, Case{Q5_1, 9, 576}, Case{Q5_1, 16, 4096},
                        Case{Q5_1, 30, 11008, 1}, Case{Q4_0, 41, 576, 1}, Case{Q8_0, 33, 576, 1},
                        Case{Q4_1, 37, 640, 1}, Case{Q8_0, 29, 1536, 1}}) {
    // Rows of X: one (a decode step), or a batch: 3 (one pass, rows left
    // over), 8 (a full pass), 11 (a second pass over W); on a GPU from 8
    // rows the tensor-core kernels: 33 (a tile of 64, partly filled), 70
    // (two tiles; with N = 4224, 64 rows of W a CTA, the others take 32).
    for (const int64_t M : {int64_t(1), int64_t(3), int64_t(8), int64_t(11), int64_t(33), int64_t(70)}) {
      if ((M > 11 && c.K < 256) || M > c.max_m) continue;
    for (bool norm : {false, true}) {
      if (M > 1 && norm != (M % 2 == 1)) continue;  // the norm once per batch size
      const int64_t N = c.N, K = c.K, nb = M * K / 32;  // nb: X's blocks, all rows
      SCOPED_TRACE(std::string(tc::quant::format_info(c.fmt)->name) + " M " + std::to_string(M) + " N " +
                   std::to_string(N) + " K " + std::to_string(K) + (norm ? " rmsnorm" : ""));
      const std::vector<float> x = randn(size_t(M * K)), gamma = randn(size_t(K));
      const float eps = 1e-5f;
      tc::QuantizeQ8Args qa;
      qa.info.name = "test.quantize_q8";
      qa.M = M, qa.K = K;
      qa.x = dev.put(x);
      qa.gamma = norm ? dev.put(gamma) : nullptr;
      qa.eps = eps;
      qa.xq = dev.put(std::vector<int8_t>(size_t(M * K), int8_t(-77)));
      qa.xd = dev.put(std::vector<float>(size_t(2 * nb), NAN));
      ASSERT_EQ(dev.be().quantize_q8(qa, nullptr), TC_OK);
      const auto xq = dev.get(qa.xq, size_t(M * K));
      const auto xd = dev.get(qa.xd, size_t(2 * nb));
      std::vector<double> v(static_cast<size_t>(M * K));
      for (int64_t m = 0; m < M; ++m) {  // each row its own norm
        double ss = 0;
        for (int64_t k = 0; k < K; ++k) ss += double(x[m * K + k]) * x[m * K + k];
        const double rstd = 1.0 / std::sqrt(ss / double(K) + eps);
        for (int64_t k = 0; k < K; ++k) v[m * K + k] = norm ? double(x[m * K + k]) * rstd * gamma[k] : x[m * K + k];
      }
      // The kernel normalises in f32: its rstd (a sum of K squares) is off
      // from the float64 one by a few 1e-6 relative, which moves v by that
      // much of |v| (up to 127 dx). A wrong quantisation is off by whole dx.
      const double rel = norm ? 1e-5 : 1e-6;
      for (int64_t b = 0; b < nb; ++b) {
        double amax = 0, sum = 0;
        for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(v[b * 32 + i]));
        const double dx = xd[2 * b];
        ASSERT_NEAR(dx, amax / 127, rel * amax / 127) << "block " << b;
        for (int i = 0; i < 32; ++i) {
          const int64_t k = b * 32 + i;
          ASSERT_LE(std::fabs(xq[k] * dx - v[k]), dx * (0.5 + 1e-6) + rel * std::fabs(v[k])) << "element " << k;
          sum += xq[k];
        }
        ASSERT_NEAR(xd[2 * b + 1], dx * sum, 1e-6 * dx * (std::fabs(sum) + 1)) << "block " << b;
      }

      const std::vector<uint8_t> w = random_q8_weights(c.fmt, N, K);
      const int64_t row_bytes = int64_t(w.size()) / N;
      // r[m N + n] by the formula on the quantised X, the magnitude of its
      // terms, and the exact product with v.
      const size_t outs = static_cast<size_t>(M * N);
      std::vector<double> r(outs), mag(outs), exact(outs), bound(outs);
      for (int64_t n = 0; n < N; ++n) {
        for (int64_t k = 0; k < K; ++k) {
          const WeightTerm t = weight_term(c.fmt, w.data() + n * row_bytes, k);
          const double wk = t.aq + t.b;
          for (int64_t m = 0; m < M; ++m) {
            const int64_t i = m * N + n, mk = m * K + k;
            const double xk = xd[2 * (mk / 32)] * xq[mk];
            r[i] += wk * xk;
            mag[i] += (std::fabs(t.aq) + std::fabs(t.b)) * std::fabs(xk);
            exact[i] += wk * v[mk];
            bound[i] += std::fabs(wk) * xd[2 * (mk / 32)] * 0.5;
          }
        }
      }
      for (size_t i = 0; i < outs; ++i)
        ASSERT_LE(std::fabs(r[i] - exact[i]), bound[i] * (1 + 1e-6) + 1e-6 * mag[i]) << "8-bit bound, output " << i;
      const uint8_t* w_dev = dev.put(w);
      const bool has_split = tc::quant::q8_split_format(c.fmt);
      const bool has_gguf = c.fmt != Q6_K;
      tc::RepackQ8Args ra;
      uint8_t* qs_dev = nullptr;
      if (has_split) {
        // The split layout (repack_q8): each block's quants and scale apart, bytes unchanged.
        const int64_t qb = tc::quant::split_quant_bytes(c.fmt), blocks = N * (K / tc::quant::q8_block_elems(c.fmt));
        const int64_t bytes = row_bytes / (K / tc::quant::q8_block_elems(c.fmt));
        const int64_t d_at = c.fmt == Q6_K ? qb : 0, q_at = c.fmt == Q6_K ? 0 : 2;
        ra.info.name = "test.repack_q8";
        ra.fmt = c.fmt, ra.N = N, ra.K = K;
        ra.w = w_dev;
        qs_dev = dev.put(std::vector<uint8_t>(size_t(blocks * qb), 0xA5));
        ra.qs = qs_dev;
        ra.d = dev.put(std::vector<uint16_t>(size_t(blocks), 0xA5A5));
        ASSERT_EQ(dev.be().repack_q8(ra, nullptr), TC_OK);
        const auto qs = dev.get(qs_dev, size_t(blocks * qb));
        const auto ds = dev.get(ra.d, size_t(blocks));
        for (int64_t i = 0; i < blocks; ++i) {
          ASSERT_EQ(std::memcmp(&ds[size_t(i)], w.data() + i * bytes + d_at, 2), 0) << "scale of block " << i;
          ASSERT_EQ(std::memcmp(qs.data() + i * qb, w.data() + i * bytes + q_at, size_t(qb)), 0)
              << "quants of block " << i;
        }
      }
      tc::GemvQ8Args ga;
      ga.info.name = "test.gemv_q8";
      ga.fmt = c.fmt, ga.M = M, ga.N = N, ga.K = K;
      ga.xq = qa.xq, ga.xd = qa.xd;
      const std::vector<float> y0 = randn(size_t(M * N));
      // Runs 6..11: X in f32, quantised by the product itself (x, gamma) into
      // poisoned scratch: the same 8-bit X as quantize_q8's above, so the
      // same reference (a GPU's streaming kernel takes the cases with M = 1
      // and K a multiple of 256, quantising X itself for K <= 4096).
      for (int run = 0; run < 16; ++run) {
        const bool split = run % 8 >= 4, self = run >= 8;
        const int e = run % 4;  // kStore, kAdd, kSwiglu, kGeglu
        if (tc::GemvQ8Args::gated(e) && N % 2) continue;
        if (split ? !has_split : !has_gguf) continue;
        SCOPED_TRACE(std::string(split ? "split layout" : "GGUF layout") + ", epilogue " + std::to_string(e) +
                     (self ? ", X quantised by the product" : ""));
        ga.w = split ? static_cast<const void*>(qs_dev) : w_dev;
        ga.wd = split ? ra.d : nullptr;
        ga.epilogue = e;
        ga.x = self ? qa.x : nullptr, ga.gamma = self ? qa.gamma : nullptr, ga.eps = eps;
        ga.xq = self ? dev.put(std::vector<int8_t>(size_t(M * K), int8_t(-77))) : qa.xq;
        ga.xd = self ? dev.put(std::vector<float>(size_t(2 * nb), NAN)) : qa.xd;
        ga.y = dev.put(e == tc::GemvQ8Args::kAdd ? y0 : std::vector<float>(size_t(M * N + 1), NAN));
        ASSERT_EQ(dev.be().gemv_q8(ga, nullptr), TC_OK);
        if (GetParam() == "cuda" && M == 1 && c.fmt >= Q4_K && c.fmt <= Q6_K) {
          // One row of X on a GPU: the K-quants take the streaming kernel,
          // Q6_K unless the scales of its N rows end mid-way through 16 bytes.
          const bool streams = c.fmt != Q6_K || N * (K / 256 * 2) % 16 == 0;
          const std::string kernel = tc_cuda_last_kernel_name();
          EXPECT_EQ(kernel.rfind("gemv_q8_stream", 0) == 0, streams) << kernel;
        }
        const int64_t rows = tc::GemvQ8Args::gated(e) ? N / 2 : N;  // Y's [M][rows]
        const auto y = dev.get(ga.y, size_t(M * rows + (e == tc::GemvQ8Args::kAdd ? 0 : 1)));
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < rows; ++n) {
            const int64_t i = m * N + n;
            double ref = r[i], tol = 2e-5 * (mag[i] + 1e-3);
            if (e == tc::GemvQ8Args::kAdd) ref += y0[m * rows + n], tol += 1e-6 * std::fabs(y0[m * rows + n]);
            if (tc::GemvQ8Args::gated(e)) {  // |act'| < 1.2 for both
              const double g = r[i], u = r[i + rows];
              ref = gate_ref(e, g) * u;
              tol = 2e-5 * (1.2 * mag[i] * std::fabs(u) + mag[i + rows] * std::fabs(g) + 1e-3);
            }
            ASSERT_NEAR(y[m * rows + n], ref, tol) << "row " << m << ", output " << n;
          }
        if (e != tc::GemvQ8Args::kAdd) EXPECT_TRUE(std::isnan(y[M * rows])) << "written past Y";
      }
      if (K % 256 != 0) continue;  // f16 X takes whole stages of 256 on a GPU
      // f16 X (xh): quantize_q8 normalises and rounds to f16; gemv_q8 is the
      // exact product with W dequantised, within the f16 rounding of the
      // weights (K-quants: of d sc and dmin m too) of its dequantised value.
      tc::QuantizeQ8Args ha = qa;
      ha.xh = dev.put(std::vector<uint16_t>(size_t(M * K), uint16_t(0x7E00)));
      ASSERT_EQ(dev.be().quantize_q8(ha, nullptr), TC_OK);
      const auto xh = dev.get(ha.xh, size_t(M * K));
      std::vector<double> x16(size_t(M * K));
      for (int64_t i = 0; i < M * K; ++i) {
        x16[size_t(i)] = tc::f16_to_f32(xh[size_t(i)]);
        ASSERT_LE(std::fabs(x16[size_t(i)] - v[size_t(i)]), std::fabs(v[size_t(i)]) * (1.0 / 2048 + rel) + 1e-7)
            << "f16 X element " << i;
      }
      std::vector<double> e16(outs), b16(outs);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k) {
          const WeightTerm t = weight_term(c.fmt, w.data() + n * row_bytes, k);
          for (int64_t m = 0; m < M; ++m) {
            const double xk = x16[size_t(m * K + k)];
            e16[size_t(m * N + n)] += (t.aq + t.b) * xk;
            b16[size_t(m * N + n)] += (std::fabs(t.aq) + std::fabs(t.b)) * std::fabs(xk);
          }
        }
      tc::GemvQ8Args fa = ga;
      fa.xq = nullptr, fa.xd = nullptr, fa.xh = ha.xh;
      fa.x = nullptr, fa.gamma = nullptr;
      for (int run = 0; run < 8; ++run) {
        const bool split = run >= 4;
        const int e = run % 4;
        if (tc::GemvQ8Args::gated(e) && N % 2) continue;
        if (split ? !has_split : !has_gguf) continue;
        SCOPED_TRACE(std::string("f16 X, ") + (split ? "split layout" : "GGUF layout") + ", epilogue " +
                     std::to_string(e));
        fa.w = split ? static_cast<const void*>(qs_dev) : w_dev;
        fa.wd = split ? ra.d : nullptr;
        fa.epilogue = e;
        fa.y = dev.put(e == tc::GemvQ8Args::kAdd ? y0 : std::vector<float>(size_t(M * N + 1), NAN));
        if (GetParam() == "cuda" && !tc::quant::q8_f16x_format(c.fmt)) {  // no tensor-core kernel reads them
          EXPECT_EQ(dev.be().gemv_q8(fa, nullptr), TC_ERR_UNSUPPORTED);
          continue;
        }
        ASSERT_EQ(dev.be().gemv_q8(fa, nullptr), TC_OK);
        const int64_t rows = tc::GemvQ8Args::gated(e) ? N / 2 : N;
        const auto y = dev.get(fa.y, size_t(M * rows + (e == tc::GemvQ8Args::kAdd ? 0 : 1)));
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < rows; ++n) {
            const size_t i = size_t(m * N + n);
            // Rounded weights (2^-11 each, twice for the K-quants' two
            // rounded factors) and f32 sums.
            double ref = e16[i], tol = b16[i] * (2.5 / 2048) + 1e-6;
            if (e == tc::GemvQ8Args::kAdd) ref += y0[size_t(m * rows + n)], tol += 1e-6 * std::fabs(y0[size_t(m * rows + n)]);
            if (tc::GemvQ8Args::gated(e)) {
              const double g = e16[i], u = e16[i + size_t(rows)];
              ref = gate_ref(e, g) * u;
              tol = (b16[i] * std::fabs(u) * 1.2 + b16[i + size_t(rows)] * std::fabs(g)) * (2.5 / 2048) + 1e-6;
            }
            ASSERT_NEAR(y[size_t(m * rows + n)], ref, tol) << "row " << m << ", output " << n;
          }
        if (e != tc::GemvQ8Args::kAdd) EXPECT_TRUE(std::isnan(y[size_t(M * rows)])) << "written past Y";
      }
    }
    }
  }
  // Formats and layouts without a kernel: an explicit status, nothing written.
  const std::vector<float> untouched{7.0f};
  tc::GemvQ8Args bad;
  bad.info.name = "test.gemv_q8";
  bad.fmt = tc::quant::Q5_0, bad.N = 1, bad.K = 256;  // its products read a Q8_0 copy (repack_q8)
  bad.y = dev.put(untouched);
  EXPECT_EQ(dev.be().gemv_q8(bad, nullptr), TC_ERR_UNSUPPORTED);
  bad.fmt = Q6_K;  // GGUF's layout: Q6_K needs the split one
  EXPECT_EQ(dev.be().gemv_q8(bad, nullptr), TC_ERR_UNSUPPORTED);
  bad.fmt = Q4_K, bad.K = 96;  // not whole superblocks
  EXPECT_EQ(dev.be().gemv_q8(bad, nullptr), TC_ERR_UNSUPPORTED);
  EXPECT_EQ(dev.get(bad.y, 1)[0], 7.0f);
  {  // no such epilogue, or a gated one over an odd number of rows ([gate; up] needs pairs)
    tc::GemvQ8Args eb = bad;
    eb.fmt = tc::quant::Q8_0, eb.K = 32, eb.N = 3;
    for (int e : {-1, 4, int(tc::GemvQ8Args::kSwiglu), int(tc::GemvQ8Args::kGeglu)}) {
      eb.epilogue = e;
      EXPECT_EQ(dev.be().gemv_q8(eb, nullptr), TC_ERR_INVALID_ARG) << "epilogue " << e;
    }
    EXPECT_EQ(dev.get(bad.y, 1)[0], 7.0f);
  }
  // X to quantise, inconsistently given: refused before anything runs.
  {
    const int64_t K = 256, N = 16;
    tc::GemvQ8Args xb;
    xb.info.name = "test.gemv_q8";
    xb.fmt = Q4_K, xb.N = N, xb.K = K;
    xb.w = dev.put(random_q8_weights(Q4_K, N, K));
    const std::vector<float> x = randn(size_t(K)), y_in(size_t(N), 7.0f);
    float* xbuf = dev.put(x);
    xb.xq = dev.put(std::vector<int8_t>(size_t(K), 0));
    xb.xd = dev.put(std::vector<float>(size_t(K / 16), 0.0f));
    xb.y = dev.put(y_in);
    xb.gamma = xbuf;  // gamma without x
    EXPECT_EQ(dev.be().gemv_q8(xb, nullptr), TC_ERR_INVALID_ARG);
    xb.x = xbuf, xb.xh = dev.put(std::vector<uint16_t>(size_t(K), 0));  // x and xh
    EXPECT_EQ(dev.be().gemv_q8(xb, nullptr), TC_ERR_INVALID_ARG);
    xb.xh = nullptr, xb.xq = nullptr;  // no scratch
    EXPECT_EQ(dev.be().gemv_q8(xb, nullptr), TC_ERR_INVALID_ARG);
    xb.xq = dev.put(std::vector<int8_t>(size_t(K), 0));
    xb.y = xbuf + 8;  // Y inside X
    EXPECT_EQ(dev.be().gemv_q8(xb, nullptr), TC_ERR_INVALID_ARG);
    EXPECT_EQ(dev.get(xbuf, size_t(K)), x);
  }
  tc::RepackQ8Args bad_repack;
  bad_repack.info.name = "test.repack_q8";
  bad_repack.fmt = Q4_K, bad_repack.N = 1, bad_repack.K = 256;  // read in place: no split layout
  EXPECT_EQ(dev.be().repack_q8(bad_repack, nullptr), TC_ERR_UNSUPPORTED);
  bad_repack.fmt = Q6_K, bad_repack.K = 128;
  EXPECT_EQ(dev.be().repack_q8(bad_repack, nullptr), TC_ERR_UNSUPPORTED);
}

// repack_q8 of Q5_0 writes Q8_0's split layout (each code minus 16 as an
// int8, d kept bit for bit): every weight d q equal to the block's in
// float64 (weight_term decodes GGUF's bits on its own), every block
// written over poisoned outputs; the Q8_0 product on the copy against the
// float64 formula on the Q5_0 weights and the device's 8-bit X. Q4_1 and
// Q5_1 (no exact 8-bit copy: their mins) and a K off whole blocks are
// refused with the outputs untouched.
TEST_P(ModelOps, RepackQ8FiveBitAsEightBit) {
  Dev dev(GetParam());
  using tc::quant::Q5_0, tc::quant::Q8_0;
  for (const int64_t K : {int64_t(64), int64_t(640), int64_t(4096)}) {
    SCOPED_TRACE("K " + std::to_string(K));
    const int64_t N = 40, nb = K / 32, blocks = N * nb;
    const std::vector<uint8_t> w = random_rows(Q5_0, N, K);
    tc::RepackQ8Args ra;
    ra.info.name = "test.repack_q8";
    ra.fmt = Q5_0, ra.N = N, ra.K = K;
    ra.w = dev.put(w);
    uint8_t* qs_dev = dev.put(std::vector<uint8_t>(size_t(blocks * 32), 0xA5));
    ra.qs = qs_dev;
    ra.d = dev.put(std::vector<uint16_t>(size_t(blocks), 0xA5A5));
    ASSERT_EQ(dev.be().repack_q8(ra, nullptr), TC_OK);
    const auto qs = dev.get(qs_dev, size_t(blocks * 32));
    const auto ds = dev.get(ra.d, size_t(blocks));
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) {
        const int64_t b = n * nb + k / 32;
        const WeightTerm t = weight_term(Q5_0, w.data() + n * nb * 22, k);
        ASSERT_EQ(std::memcmp(&ds[size_t(b)], w.data() + b * 22, 2), 0) << "scale of block " << b;
        ASSERT_EQ(double(tc::f16_to_f32(ds[size_t(b)])) * int8_t(qs[size_t(b * 32 + k % 32)]), t.aq)
            << "row " << n << ", weight " << k;
      }
    tc::QuantizeQ8Args qa;
    qa.info.name = "test.quantize_q8";
    qa.M = 1, qa.K = K;
    qa.x = dev.put(randn(size_t(K)));
    qa.xq = dev.put(std::vector<int8_t>(size_t(K), int8_t(-77)));
    qa.xd = dev.put(std::vector<float>(size_t(2 * nb), NAN));
    ASSERT_EQ(dev.be().quantize_q8(qa, nullptr), TC_OK);
    const auto xq = dev.get(qa.xq, size_t(K));
    const auto xd = dev.get(qa.xd, size_t(2 * nb));
    tc::GemvQ8Args ga;
    ga.info.name = "test.gemv_q8";
    ga.fmt = Q8_0, ga.M = 1, ga.N = N, ga.K = K;
    ga.w = qs_dev, ga.wd = ra.d;
    ga.xq = qa.xq, ga.xd = qa.xd;
    ga.y = dev.put(std::vector<float>(size_t(N + 1), NAN));
    ASSERT_EQ(dev.be().gemv_q8(ga, nullptr), TC_OK);
    const auto y = dev.get(ga.y, size_t(N + 1));
    for (int64_t n = 0; n < N; ++n) {
      double r = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double term = weight_term(Q5_0, w.data() + n * nb * 22, k).aq * xd[size_t(2 * (k / 32))] * xq[size_t(k)];
        r += term, mag += std::fabs(term);
      }
      ASSERT_NEAR(y[size_t(n)], r, 2e-5 * (mag + 1e-3)) << "output " << n;
    }
    EXPECT_TRUE(std::isnan(y[size_t(N)])) << "written past Y";
  }
  uint8_t* qs_dev = dev.put(std::vector<uint8_t>(64, 0xA5));
  for (const auto& [fmt, K] : {std::pair<int32_t, int64_t>{tc::quant::Q4_1, 64}, {tc::quant::Q5_1, 64}, {Q5_0, 48}}) {
    tc::RepackQ8Args bad;
    bad.info.name = "test.repack_q8_bad";
    bad.fmt = fmt, bad.N = 1, bad.K = K;
    bad.w = dev.put(std::vector<uint8_t>(64, 1));
    bad.qs = qs_dev;
    bad.d = dev.put(std::vector<uint16_t>(2, 0xA5A5));
    EXPECT_EQ(dev.be().repack_q8(bad, nullptr), TC_ERR_UNSUPPORTED) << tc::quant::format_info(fmt)->name;
    EXPECT_EQ(dev.get(qs_dev, 64), std::vector<uint8_t>(64, 0xA5));
    EXPECT_EQ(dev.get(bad.d, 2), std::vector<uint16_t>(2, 0xA5A5));
  }
}

// gemv_q8 with rope (one token's [q | k | v] row rotated and appended, the
// decode step's layer start): bit for bit the product into y followed by
// rope_kv_append on y, which the tests above hold against float64. Q4_0 in
// the split layout and Q4_K in GGUF's (on a GPU the streaming kernel's
// epilogue: tiles of 16 and of 8 rows at these K), X given in 8 bits or
// quantised by the product with the norm, f32 and f16 caches; NEOX pairs
// (no fused form: the two-step path); the cache's other rows untouched;
// rope with an epilogue other than kStore refused.
TEST_P(ModelOps, GemvQ8RopeRows) {
  Dev dev(GetParam());
  using tc::quant::Q4_0, tc::quant::Q4_K;
  const int64_t H = 6, Hkv = 2, D = 64, C = 24, P = 17, Dq = H * D, Dkv = Hkv * D, N = Dq + 2 * Dkv;
  std::vector<float> cs, sn;
  rope_tables(C, D, cs, sn);
  for (const int32_t fmt : {Q4_0, Q4_K})
  for (const int64_t K : {int64_t(512), int64_t(4096)})
  for (tc_dtype cache : {TC_DTYPE_F32, TC_DTYPE_F16})
  for (bool neox : {false, true})
  for (bool self : {false, true}) {
    // The calls quantising X carry q / k / v biases and Q/K norms too
    // (which the GPU's RoPE epilogue leaves to rope_kv_append).
    const bool biases = self;
    const float* qn_dev = dev.put(randn(size_t(D)));
    const float* kn_dev = dev.put(randn(size_t(D)));
    SCOPED_TRACE(std::string(tc::quant::format_info(fmt)->name) + " K " + std::to_string(K) +
                 (cache == TC_DTYPE_F16 ? ", f16 cache" : ", f32 cache") + (neox ? ", NEOX" : "") +
                 (self ? ", X quantised by the product, biases, Q/K norms" : ""));
    const std::vector<float> bias = randn(size_t(N));  // [bq | bk | bv]
    const float* bias_dev = dev.put(bias);
    const std::vector<float> x = randn(size_t(K)), gamma = randn(size_t(K));
    const std::vector<uint8_t> w = random_q8_weights(fmt, N, K);
    tc::GemvQ8Args ga;
    ga.info.name = "test.gemv_q8_rope";
    ga.fmt = fmt, ga.M = 1, ga.N = N, ga.K = K;
    const uint8_t* w_dev = dev.put(w);
    ga.w = w_dev;
    if (fmt == Q4_0) {  // the split layout, as the decoder loads it
      const int64_t blocks = N * K / 32;
      tc::RepackQ8Args ra;
      ra.info.name = "test.repack_q8";
      ra.fmt = fmt, ra.N = N, ra.K = K, ra.w = w_dev;
      ra.qs = dev.put(std::vector<uint8_t>(size_t(blocks * tc::quant::split_quant_bytes(fmt)), 0xA5));
      ra.d = dev.put(std::vector<uint16_t>(size_t(blocks), 0xA5A5));
      ASSERT_EQ(dev.be().repack_q8(ra, nullptr), TC_OK);
      ga.w = ra.qs, ga.wd = ra.d;
    }
    tc::QuantizeQ8Args qa;
    qa.info.name = "test.quantize_q8";
    qa.M = 1, qa.K = K;
    qa.x = dev.put(x), qa.gamma = dev.put(gamma), qa.eps = 1e-5f;
    qa.xq = dev.put(std::vector<int8_t>(size_t(K), int8_t(-77)));
    qa.xd = dev.put(std::vector<float>(size_t(K / 16), NAN));
    if (self) ga.x = qa.x, ga.gamma = qa.gamma, ga.eps = qa.eps;
    else ASSERT_EQ(dev.be().quantize_q8(qa, nullptr), TC_OK);
    ga.xq = qa.xq, ga.xd = qa.xd;
    ga.epilogue = tc::GemvQ8Args::kStore;
    const std::vector<float> cache_init(Hkv * C * D, -7.0f);
    auto rope_for = [&](float* y) {
      tc::RopeKvAppendArgs r;
      r.info.name = "test.rope_kv_append";
      r.n = 1, r.H = H, r.Hkv = Hkv, r.D = D, r.C = C, r.ldq = r.ldk = r.ldv = N;
      r.pos = dev.put(std::vector<int32_t>{int32_t(P)});
      r.q = y, r.k = y + Dq, r.v = y + Dq + Dkv;
      r.cos_t = dev.put(cs), r.sin_t = dev.put(sn);
      r.qt = dev.put(std::vector<float>(size_t(Dq), NAN));
      r.k_cache = put_cache(dev, cache_init, cache), r.v_cache = put_cache(dev, cache_init, cache);
      r.cache = cache, r.neox = neox;
      if (biases) r.bq = bias_dev, r.bk = bias_dev + Dq, r.bv = bias_dev + Dq + Dkv;
      if (biases) r.q_norm = qn_dev, r.k_norm = kn_dev, r.norm_eps = 1e-6f;
      return r;
    };
    // Two steps: the rows into y, then RoPE and the append on them.
    float* y2 = dev.put(std::vector<float>(size_t(N), NAN));
    const tc::RopeKvAppendArgs two = rope_for(y2);
    ga.y = y2;
    ASSERT_EQ(dev.be().gemv_q8(ga, nullptr), TC_OK);
    ASSERT_EQ(dev.be().rope_kv_append(two, nullptr), TC_OK);
    // One call.
    float* y1 = dev.put(std::vector<float>(size_t(N), NAN));
    ga.y = y1;
    ga.rope = rope_for(y1);
    ASSERT_EQ(dev.be().gemv_q8(ga, nullptr), TC_OK);
    const auto q1 = dev.get(ga.rope.qt, size_t(Dq)), q2 = dev.get(two.qt, size_t(Dq));
    const auto k1 = cache_values(dev, ga.rope.k_cache, size_t(Hkv * C * D), cache),
               k2 = cache_values(dev, two.k_cache, size_t(Hkv * C * D), cache);
    const auto v1 = cache_values(dev, ga.rope.v_cache, size_t(Hkv * C * D), cache),
               v2 = cache_values(dev, two.v_cache, size_t(Hkv * C * D), cache);
    for (int64_t i = 0; i < Dq; ++i) {
      ASSERT_FALSE(std::isnan(q2[i])) << "q element " << i;
      ASSERT_EQ(std::memcmp(&q1[i], &q2[i], 4), 0) << "q element " << i << ": " << q1[i] << " against " << q2[i];
    }
    const std::vector<float> y_rows = dev.get(y2, size_t(N));
    for (int64_t g = 0; g < Hkv; ++g)
      for (int64_t p = 0; p < C; ++p)
        for (int64_t d = 0; d < D; ++d) {
          const int64_t e = (g * C + p) * D + d;
          ASSERT_EQ(k1[e], k2[e]) << "k cache head " << g << " row " << p << " dim " << d;
          ASSERT_EQ(v1[e], v2[e]) << "v cache head " << g << " row " << p << " dim " << d;
          if (p != P) ASSERT_EQ(k1[e], -7.0f) << "k cache row " << p << " written";
          else  // v is appended as the product made it (the poison may be a true value: compare, not avoid)
            ASSERT_EQ(v1[e], cache_round(y_rows[Dq + Dkv + g * D + d] + (biases ? bias[Dq + Dkv + g * D + d] : 0.0f),
                                         cache))
                << "v cache head " << g << " dim " << d;
        }
    ga.rope = tc::RopeKvAppendArgs{};
    ga.x = nullptr, ga.gamma = nullptr;
  }
  tc::GemvQ8Args bad;
  bad.info.name = "test.gemv_q8_rope_bad";
  bad.fmt = Q4_K, bad.M = 1, bad.N = 8, bad.K = 256;
  bad.w = dev.put(std::vector<uint8_t>(size_t(8 * 144)));
  bad.xq = dev.put(std::vector<int8_t>(256)), bad.xd = dev.put(std::vector<float>(16));
  float* y = dev.put(std::vector<float>(8, -3.0f));
  bad.y = y;
  bad.epilogue = tc::GemvQ8Args::kAdd;
  bad.rope.n = 1;
  EXPECT_EQ(dev.be().gemv_q8(bad, nullptr), TC_ERR_INVALID_ARG);
  EXPECT_EQ(dev.get(y, 8), std::vector<float>(8, -3.0f));
}

// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K rows interleaved by
// eight (quant::repack_rows8): the layout byte for byte, then
// gemv_quantized reading it (a backend that says it does) against the
// float64 formula on its own 8-bit X (dx = max|x| / 127, xq = rne(x / dx),
// the min term m dx sum xq), and against the same product on the GGUF rows
// (Q5_K's: exact f32 X, so within the 8-bit bound sum |w| dx / 2 too): each
// row of X the same whatever the number of rows (6 and 9 take tiles of 4);
// 51 groups of eight rows: threads split the product, the last group alone.
TEST_P(ModelOps, RowsInterleavedByEight) {
  Dev dev(GetParam());
  using tc::quant::Q4_0, tc::quant::Q4_1, tc::quant::Q5_0, tc::quant::Q5_1, tc::quant::Q8_0, tc::quant::Q4_K,
      tc::quant::Q5_K, tc::quant::Q6_K;
  for (const int32_t fmt : {Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K}) {
    SCOPED_TRACE(tc::quant::format_info(fmt)->name);
    if (!dev.be().reads_rows8(fmt, TC_DTYPE_F16)) GTEST_SKIP() << "this backend reads the GGUF layout only";
    const tc::quant::FormatInfo& fi = *tc::quant::format_info(fmt);
    const int64_t gb = tc::quant::rows8_block_bytes(fmt);  // per 32 weights of 8 rows
    const bool kquant = fmt == Q4_K || fmt == Q5_K || fmt == Q6_K;
    ASSERT_EQ(gb, fmt == Q4_K ? 148 : fmt == Q5_K ? 180 : fmt == Q6_K ? 210 : 8 * fi.block_bytes);
    {  // The backend's copy (its threads take ranges of row groups, 1 MiB or more each) is the same bytes.
      const int64_t N = 8 * 2048, K = 256;
      const std::vector<uint8_t> w = random_q8_weights(fmt, N, K);
      std::vector<uint8_t> serial(size_t(tc::quant::rows8_bytes(fmt, N, K))), made(serial.size() + 1, 0xA5);
      tc::quant::repack_rows8(fmt, w.data(), N, K, serial.data());
      dev.be().make_rows8(fmt, w.data(), N, K, made.data());
      ASSERT_EQ(made.back(), 0xA5) << "written past the copy";
      ASSERT_EQ(std::memcmp(made.data(), serial.data(), serial.size()), 0);
    }
    for (const auto& [N, K0] : {std::pair<int64_t, int64_t>{8, 32}, {40, 512}, {64, 2048}, {408, 2048}}) {
      const int64_t K = kquant ? std::max<int64_t>(K0, 256) : K0, nb = K / 32;
      const int64_t bb = fi.block_bytes, row_bytes = K / fi.block_elems * bb;
      const std::vector<uint8_t> w = random_q8_weights(fmt, N, K);
      ASSERT_EQ(tc::quant::rows8_bytes(fmt, N, K), uint64_t(N / 8 * nb * gb));
      std::vector<uint8_t> w8(size_t(tc::quant::rows8_bytes(fmt, N, K)) + 1, 0xA5);
      tc::quant::repack_rows8(fmt, w.data(), N, K, w8.data());
      ASSERT_EQ(w8.back(), 0xA5) << "written past the interleaved copy";
      if (fmt == Q4_K || fmt == Q5_K) {  // per group and superblock: d, dmin, sub-scales and mins unpacked,
        // Q5_K's fifth bits by sub-block, codes by pairs
        const bool five = fmt == Q5_K;
        const int codes = five ? 416 : 160, qs = five ? 48 : 16;  // in the layout; in GGUF's block
        for (int64_t g = 0; g < N / 8; ++g)
          for (int64_t s = 0; s < K / 256; ++s)
            for (int r = 0; r < 8; ++r) {
              SCOPED_TRACE("row " + std::to_string(g * 8 + r) + " superblock " + std::to_string(s));
              const uint8_t* blk = w.data() + (g * 8 + r) * row_bytes + s * bb;
              const uint8_t* o = w8.data() + (g * (K / 256) + s) * (five ? 1440 : 1184);
              ASSERT_EQ(std::memcmp(o + 2 * r, blk, 2), 0) << "d";
              ASSERT_EQ(std::memcmp(o + 16 + 2 * r, blk + 2, 2), 0) << "dmin";
              for (int j = 0; j < 8; ++j) {
                uint8_t sc, m;
                tc::quant::scale_min_k4(j, blk + 4, &sc, &m);
                ASSERT_EQ(o[32 + 8 * j + r], sc) << "scale of sub-block " << j;
                ASSERT_EQ(o[96 + 8 * j + r], m) << "min of sub-block " << j;
              }
              for (int p = 0; p < 4; ++p)
                for (int c = 0; c < 8; ++c)
                  for (int t = 0; t < 4; ++t)
                    ASSERT_EQ(o[codes + 256 * p + 32 * c + 4 * r + t], blk[qs + 32 * p + 4 * c + t]);
              for (int j = 0; j < 8 && five; ++j)
                for (int l = 0; l < 32; ++l)  // weight l = 4c + t of sub-block j: GGUF's bit j of qh[l]
                  ASSERT_EQ((o[160 + 32 * j + 4 * r + l % 4] >> (l / 4)) & 1, (blk[16 + l] >> j) & 1)
                      << "fifth bit of weight " << l << " of sub-block " << j;
            }
      }
      if (fmt == Q6_K) {  // per group and superblock: d, the int8 scales, per block nibbles and top bits
        for (int64_t g = 0; g < N / 8; ++g)
          for (int64_t s = 0; s < K / 256; ++s)
            for (int r = 0; r < 8; ++r) {
              SCOPED_TRACE("row " + std::to_string(g * 8 + r) + " superblock " + std::to_string(s));
              const uint8_t* blk = w.data() + (g * 8 + r) * row_bytes + s * 210;
              const uint8_t* o = w8.data() + (g * (K / 256) + s) * 1680;
              ASSERT_EQ(std::memcmp(o + 2 * r, blk + 208, 2), 0) << "d";
              for (int i = 0; i < 16; ++i) ASSERT_EQ(o[16 + 8 * i + r], blk[192 + i]) << "scale " << i;
              for (int e = 0; e < 256; ++e) {  // GGUF's code of weight e, then the layout's
                const int hf = e / 128, gq = (e % 128) / 32, l = e % 32;
                const int lo4 = (gq & 1 ? blk[64 * hf + 32 + l] : blk[64 * hf + l]) >> (gq & 2 ? 4 : 0) & 15;
                const int q = lo4 | ((blk[128 + 32 * hf + l] >> (2 * gq)) & 3) << 4;
                const int b = e / 32, i = e % 32, high = i / 16, j = (i % 16) / 4, t = i % 4;
                const uint8_t* ob = o + 144 + 192 * b;
                const int nib = ob[32 * j + 4 * r + t] >> (4 * high) & 15;
                const int top = ob[128 + 32 * (j / 2) + 4 * r + t] >> (4 * (j % 2) + 2 * high) & 3;
                ASSERT_EQ(nib | top << 4, q) << "weight " << e;
              }
            }
      }
      // The non-K formats: the field of `size` bytes at byte x of group g's
      // block b, where groups (2p, 2p + 1) are stored as one, interleaved
      // block by block (x at 2x and 2x + size), and a last odd group alone.
      auto field = [&](int64_t g, int64_t b, int x, int size) -> const uint8_t* {
        if (g + 1 == N / 8 && g % 2 == 0) return w8.data() + (g * nb + b) * gb + x;
        return w8.data() + (g / 2 * 2 * nb + 2 * b) * gb + 2 * x + (g % 2) * size;
      };
      for (int64_t g = 0; g < N / 8 && !kquant; ++g)
        for (int64_t b = 0; b < nb; ++b)
          for (int r = 0; r < 8; ++r) {
            SCOPED_TRACE("row " + std::to_string(g * 8 + r) + " block " + std::to_string(b));
            const uint8_t* blk = w.data() + ((g * 8 + r) * nb + b) * bb;
            ASSERT_EQ(std::memcmp(field(g, b, 0, 16) + 2 * r, blk, 2), 0) << "scale";
            if (fmt == Q4_1 || fmt == Q5_1) ASSERT_EQ(std::memcmp(field(g, b, 16, 16) + 2 * r, blk + 2, 2), 0) << "min";
            if (fmt == Q8_0) {
              for (int j = 0; j < 8; ++j)
                for (int t = 0; t < 4; ++t)  // weight 4j + t, plus 128
                  ASSERT_EQ(field(g, b, 16 + 32 * j, 32)[4 * r + t], uint8_t(blk[2 + 4 * j + t] + 128));
              continue;
            }
            if (fmt == Q5_0 || fmt == Q5_1) {  // GGUF's qh after d (and m); the plane after the scales (and mins)
              const uint8_t* h = blk + (fmt == Q5_1 ? 4 : 2);
              const int plane = fmt == Q5_1 ? 32 : 16;
              const uint32_t qh = uint32_t(h[0]) | uint32_t(h[1]) << 8 | uint32_t(h[2]) << 16 | uint32_t(h[3]) << 24;
              for (int t = 0; t < 4; ++t)
                for (int j = 0; j < 4; ++j) {  // fifth bits: weight 4j + t at bit j, 16 + 4j + t at bit 4 + j
                  ASSERT_EQ((field(g, b, plane, 32)[4 * r + t] >> j) & 1, int((qh >> (4 * j + t)) & 1u));
                  ASSERT_EQ((field(g, b, plane, 32)[4 * r + t] >> (4 + j)) & 1, int((qh >> (16 + 4 * j + t)) & 1u));
                }
            }
            const int head = fmt == Q4_1 ? 32 : fmt == Q5_0 ? 48 : fmt == Q5_1 ? 64 : 16;
            const int qs = fmt == Q4_1 ? 4 : fmt == Q5_0 ? 6 : fmt == Q5_1 ? 8 : 2;
            for (int j = 0; j < 4; ++j)
              for (int t = 0; t < 4; ++t)  // low nibble: weight 4j + t; high: weight 16 + 4j + t
                ASSERT_EQ(field(g, b, head + 32 * j, 32)[4 * r + t], blk[qs + 4 * j + t]);
          }
      for (const int64_t M : {int64_t(1), int64_t(4), int64_t(6), int64_t(9)}) {
        SCOPED_TRACE("N " + std::to_string(N) + " K " + std::to_string(K) + " M " + std::to_string(M));
        std::vector<uint16_t> xh(size_t(M * K));
        for (auto& v : xh) v = tc::f32_to_f16(randn(1)[0]);
        tc::GemvQuantizedArgs a;
        a.info.name = "test.gemv_quantized rows8";
        a.fmt = fmt, a.M = M, a.N = N, a.K = K, a.dtype = TC_DTYPE_F16;
        a.x = dev.put(xh);
        a.w = dev.put(w);
        a.w_rows8 = dev.put(w8);
        uint16_t* y8 = dev.put(std::vector<uint16_t>(size_t(M * N + 1), 0x7E00));
        a.y = y8;
        ASSERT_EQ(dev.be().gemv_quantized(a, nullptr), TC_OK);
        tc::GemvQuantizedArgs plain = a;
        plain.w_rows8 = nullptr;
        uint16_t* y0 = dev.put(std::vector<uint16_t>(size_t(M * N), 0x7E00));
        plain.y = y0;
        ASSERT_EQ(dev.be().gemv_quantized(plain, nullptr), TC_OK);
        const auto got = dev.get(y8, size_t(M * N + 1)), base = dev.get(y0, size_t(M * N));
        EXPECT_EQ(got[size_t(M * N)], 0x7E00) << "written past Y";
        for (int64_t m = 0; m < M; ++m) {
          // X's 8-bit form as the contract makes it.
          std::vector<double> xq(static_cast<size_t>(K)), dx(static_cast<size_t>(nb));
          for (int64_t b = 0; b < nb; ++b) {
            float amax = 0;
            for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(tc::f16_to_f32(xh[size_t(m * K + b * 32 + i)])));
            const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
            dx[size_t(b)] = d;
            for (int i = 0; i < 32; ++i)
              xq[size_t(b * 32 + i)] = std::max(
                  -128.0f, std::min(127.0f, std::nearbyint(tc::f16_to_f32(xh[size_t(m * K + b * 32 + i)]) * id)));
          }
          for (int64_t n = 0; n < N; ++n) {
            double ref = 0, mag = 0, x8 = 0;
            for (int64_t k = 0; k < K; ++k) {
              const WeightTerm t = weight_term(fmt, w.data() + n * row_bytes, k);
              const double term = (t.aq + t.b) * dx[size_t(k / 32)] * xq[size_t(k)];
              ref += term, mag += std::fabs(term);
              x8 += std::fabs(t.aq + t.b) * dx[size_t(k / 32)] * 0.5;
            }
            const double y = tc::f16_to_f32(got[size_t(m * N + n)]);
            // f16 output: half an ulp of |ref| (2^-11 relative), plus f32 sums of magnitude mag.
            ASSERT_NEAR(y, ref, std::fabs(ref) * 4.9e-4 + 1e-5 * mag + 1e-7) << "row " << m << ", output " << n;
            // Q5_K's GGUF rows have no 8-bit kernel: their product is on X itself, off by at most x8.
            ASSERT_NEAR(y, tc::f16_to_f32(base[size_t(m * N + n)]),
                        std::fabs(y) * 9.8e-4 + 1e-5 * mag + (fmt == Q5_K ? x8 * (1 + 1e-6) : 0.0) + 1e-7)
                << "against the GGUF rows, row " << m << ", output " << n;
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, ModelOps, ::testing::ValuesIn(devices()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
