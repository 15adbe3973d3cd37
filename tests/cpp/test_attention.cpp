// Attention forward/backward against a double-precision reference that
// materialises the scores, on every vector path (TC_CPU_ISA).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/half.h"
#include "tensorcore/tensorcore.h"

namespace {

struct Cfg {
  int64_t B, H, Hkv, Sq, Skv, D;
  tc_dtype dtype;
  bool causal;
  int64_t window;
  bool alibi;
};

std::string name_of(const Cfg& c) {
  char s[200];
  std::snprintf(s, sizeof s, "B%lld H%lld Hkv%lld Sq%lld Skv%lld D%lld %s causal%d win%lld alibi%d", (long long)c.B,
                (long long)c.H, (long long)c.Hkv, (long long)c.Sq, (long long)c.Skv, (long long)c.D,
                tc_dtype_name(c.dtype), c.causal, (long long)c.window, c.alibi);
  return s;
}

// Host tensors are kept as doubles holding exactly the values the device sees.
double round_to(tc_dtype dt, double v) {
  if (dt == TC_DTYPE_F16) return tc::f16_to_f32(tc::f32_to_f16(float(v)));
  if (dt == TC_DTYPE_BF16) return tc::bf16_to_f32(tc::f32_to_bf16(float(v)));
  return float(v);
}

std::vector<double> random_tensor(std::mt19937& rng, tc_dtype dt, size_t n, double amp = 1.0) {
  std::normal_distribution<double> nd(0.0, amp);
  std::vector<double> v(n);
  for (auto& x : v) x = round_to(dt, nd(rng));
  return v;
}

std::vector<char> encode(tc_dtype dt, const std::vector<double>& v) {
  std::vector<char> out(v.size() * tc::dtype_size(dt));
  for (size_t i = 0; i < v.size(); ++i) {
    if (dt == TC_DTYPE_F32) {
      float f = float(v[i]);
      std::memcpy(out.data() + 4 * i, &f, 4);
    } else {
      uint16_t h = dt == TC_DTYPE_F16 ? tc::f32_to_f16(float(v[i])) : tc::f32_to_bf16(float(v[i]));
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

std::vector<double> decode(tc_dtype dt, const std::vector<char>& raw) {
  size_t es = tc::dtype_size(dt), n = raw.size() / es;
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) {
    if (dt == TC_DTYPE_F32) {
      float f;
      std::memcpy(&f, raw.data() + 4 * i, 4);
      v[i] = f;
    } else {
      uint16_t h;
      std::memcpy(&h, raw.data() + 2 * i, 2);
      v[i] = dt == TC_DTYPE_F16 ? tc::f16_to_f32(h) : tc::bf16_to_f32(h);
    }
  }
  return v;
}

struct Ref {
  std::vector<double> O, LSE, dQ, dK, dV;
};

// Materialised reference: scores, softmax, products, and their gradients.
Ref reference(const Cfg& c, double scale, const std::vector<double>& Q, const std::vector<double>& K,
              const std::vector<double>& V, const std::vector<double>& dO, const std::vector<double>& slopes) {
  Ref r;
  const int64_t G = c.H / c.Hkv, off = c.Skv - c.Sq;
  r.O.assign(Q.size(), 0.0);
  r.LSE.assign(size_t(c.B * c.H * c.Sq), -INFINITY);
  r.dQ.assign(Q.size(), 0.0);
  r.dK.assign(K.size(), 0.0);
  r.dV.assign(V.size(), 0.0);
  std::vector<double> s(size_t(c.Skv)), p(size_t(c.Skv)), dp(size_t(c.Skv));
  std::vector<char> vis(size_t(c.Skv));
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.H; ++h)
      for (int64_t i = 0; i < c.Sq; ++i) {
        const int64_t g = h / G, pos = i + off;
        const double* q = &Q[size_t(((b * c.H + h) * c.Sq + i) * c.D)];
        const double* go = &dO[size_t(((b * c.H + h) * c.Sq + i) * c.D)];
        double mx = -INFINITY;
        for (int64_t j = 0; j < c.Skv; ++j) {
          bool ok = true;
          if ((c.causal || c.window > 0) && j > pos) ok = false;
          if (c.window > 0 && j <= pos - c.window) ok = false;
          vis[j] = ok;
          if (!ok) continue;
          const double* k = &K[size_t(((b * c.Hkv + g) * c.Skv + j) * c.D)];
          double dot = 0;
          for (int64_t d = 0; d < c.D; ++d) dot += q[d] * k[d];
          s[j] = scale * dot - (c.alibi ? slopes[h] * double(pos - j) : 0.0);
          mx = std::max(mx, s[j]);
        }
        if (mx == -INFINITY) continue;  // sees no key: O = 0, LSE = -inf, no gradient
        double l = 0;
        for (int64_t j = 0; j < c.Skv; ++j) l += vis[j] ? std::exp(s[j] - mx) : 0.0;
        r.LSE[size_t((b * c.H + h) * c.Sq + i)] = mx + std::log(l);
        double* o = &r.O[size_t(((b * c.H + h) * c.Sq + i) * c.D)];
        double dd = 0;
        for (int64_t j = 0; j < c.Skv; ++j) {
          p[j] = vis[j] ? std::exp(s[j] - mx) / l : 0.0;
          const double* v = &V[size_t(((b * c.Hkv + g) * c.Skv + j) * c.D)];
          double dpj = 0;
          for (int64_t d = 0; d < c.D; ++d) {
            o[d] += p[j] * v[d];
            dpj += go[d] * v[d];
          }
          dp[j] = dpj;
          dd += p[j] * dpj;
        }
        double* dq = &r.dQ[size_t(((b * c.H + h) * c.Sq + i) * c.D)];
        for (int64_t j = 0; j < c.Skv; ++j) {
          if (!vis[j]) continue;
          const double ds = p[j] * (dp[j] - dd) * scale;
          const size_t kr = size_t(((b * c.Hkv + g) * c.Skv + j) * c.D);
          for (int64_t d = 0; d < c.D; ++d) {
            dq[d] += ds * K[kr + d];
            r.dK[kr + d] += ds * q[d];
            r.dV[kr + d] += p[j] * go[d];
          }
        }
      }
  return r;
}

class Device {
 public:
  Device() { EXPECT_EQ(tc_init_device("cpu", &ctx), TC_OK); }
  ~Device() {
    for (tc_buffer b : bufs) tc_buffer_free(b);
    tc_shutdown(ctx);
  }
  tc_buffer upload(const std::vector<char>& raw) {
    tc_buffer b = alloc(raw.size());
    tc_buffer_write(b, 0, raw.data(), raw.size());
    return b;
  }
  tc_buffer alloc(size_t n, unsigned char fill = 0xff) {  // 0xff.. is a NaN in every float format
    tc_buffer b = nullptr;
    EXPECT_EQ(tc_buffer_alloc(ctx, n, &b), TC_OK);
    std::vector<unsigned char> poison(n, fill);
    tc_buffer_write(b, 0, poison.data(), n);
    bufs.push_back(b);
    return b;
  }
  std::vector<char> read(tc_buffer b) {
    size_t n = 0;
    tc_buffer_size(b, &n);
    std::vector<char> out(n);
    tc_buffer_read(b, 0, out.data(), n);
    return out;
  }
  tc_context ctx = nullptr;
  std::vector<tc_buffer> bufs;
};

// |got - want| <= atol + rtol * |want|, scaled to the tensor's magnitude.
void expect_close(const char* what, const std::vector<double>& got, const std::vector<double>& want, double tol,
                  const std::string& ctx) {
  ASSERT_EQ(got.size(), want.size());
  double amax = 1e-30;
  for (double w : want)
    if (std::isfinite(w)) amax = std::max(amax, std::fabs(w));
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    bool ok = std::isinf(want[i]) ? got[i] == want[i] : std::fabs(got[i] - want[i]) <= tol * (amax + std::fabs(want[i]));
    if (!ok && bad++ < 3)
      ADD_FAILURE() << ctx << ": " << what << "[" << i << "] = " << got[i] << ", want " << want[i];
  }
  EXPECT_EQ(bad, 0u) << ctx << ": " << what << " mismatches";
}

void run_case(const Cfg& c, const char* isa) {
  if (isa) setenv("TC_CPU_ISA", isa, 1);
  else unsetenv("TC_CPU_ISA");
  const std::string ctx_name = name_of(c) + " isa=" + (isa ? isa : "best");
  std::mt19937 rng(1234 + unsigned(c.Sq * 131 + c.Skv * 7 + c.D));
  const size_t qn = size_t(c.B * c.H * c.Sq * c.D), kn = size_t(c.B * c.Hkv * c.Skv * c.D);
  auto Q = random_tensor(rng, c.dtype, qn), K = random_tensor(rng, c.dtype, kn), V = random_tensor(rng, c.dtype, kn);
  auto dO = random_tensor(rng, c.dtype, qn);
  std::vector<double> slopes(size_t(c.H));
  for (int64_t h = 0; h < c.H; ++h) slopes[h] = float(std::pow(2.0, -8.0 * double(h + 1) / double(c.H)));
  const double scale = float(1.0 / std::sqrt(double(c.D)));
  Ref ref = reference(c, scale, Q, K, V, dO, slopes);

  Device dev;
  tc_buffer bQ = dev.upload(encode(c.dtype, Q)), bK = dev.upload(encode(c.dtype, K)),
            bV = dev.upload(encode(c.dtype, V)), bdO = dev.upload(encode(c.dtype, dO));
  std::vector<char> sl = encode(TC_DTYPE_F32, slopes);
  tc_buffer bS = c.alibi ? dev.upload(sl) : nullptr;
  const size_t es = tc::dtype_size(c.dtype);
  tc_buffer bO = dev.alloc(qn * es), bL = dev.alloc(size_t(c.B * c.H * c.Sq) * 4);
  tc_attention_desc d{};
  d.batch = c.B, d.heads = c.H, d.kv_heads = c.Hkv, d.seq_q = c.Sq, d.seq_kv = c.Skv, d.head_dim = c.D;
  d.dtype = c.dtype, d.accum = TC_DTYPE_F32, d.softmax_scale = 0.0, d.causal = c.causal, d.return_lse = 1;
  d.window_size = c.window;
  ASSERT_EQ(tc_attention_forward(dev.ctx, bQ, bK, bV, bO, bL, bS, &d), TC_OK) << tc_last_error_detail();
  const double tol = c.dtype == TC_DTYPE_F32 ? 2e-5 : c.dtype == TC_DTYPE_F16 ? 4e-3 : 2e-2;
  auto O = decode(c.dtype, dev.read(bO));
  auto L = decode(TC_DTYPE_F32, dev.read(bL));
  expect_close("O", O, ref.O, tol, ctx_name);
  expect_close("LSE", L, ref.LSE, c.dtype == TC_DTYPE_F32 ? 2e-5 : 2e-3, ctx_name);

  tc_buffer bdQ = dev.alloc(qn * es), bdK = dev.alloc(kn * es), bdV = dev.alloc(kn * es);
  ASSERT_EQ(tc_attention_backward(dev.ctx, bQ, bK, bV, bO, bdO, bL, bdQ, bdK, bdV, bS, &d), TC_OK)
      << tc_last_error_detail();
  const double gtol = c.dtype == TC_DTYPE_F32 ? 5e-5 : c.dtype == TC_DTYPE_F16 ? 1e-2 : 4e-2;
  expect_close("dQ", decode(c.dtype, dev.read(bdQ)), ref.dQ, gtol, ctx_name);
  expect_close("dK", decode(c.dtype, dev.read(bdK)), ref.dK, gtol, ctx_name);
  expect_close("dV", decode(c.dtype, dev.read(bdV)), ref.dV, gtol, ctx_name);
  unsetenv("TC_CPU_ISA");
}

class AttentionIsa : public ::testing::TestWithParam<const char*> {};

TEST_P(AttentionIsa, FeatureMatrix) {
  const char* isa = GetParam();
  for (tc_dtype dt : {TC_DTYPE_F32, TC_DTYPE_F16, TC_DTYPE_BF16})
    for (int64_t hkv : {4, 2, 1})
      for (auto sq_skv : {std::pair<int64_t, int64_t>{37, 37}, {1, 70}, {20, 83}, {90, 33}})
        for (int mode = 0; mode < 4; ++mode) {  // none, causal, window, causal+window+alibi
          Cfg c{1, 4, hkv, sq_skv.first, sq_skv.second, dt == TC_DTYPE_F32 ? 5 : 16, dt, mode == 1 || mode == 3,
                mode >= 2 ? 9 : 0, mode == 3 || (mode == 0 && hkv == 2)};
          run_case(c, isa);
        }
}

TEST_P(AttentionIsa, LargerTiles) {
  const char* isa = GetParam();
  run_case(Cfg{2, 2, 1, 130, 200, 64, TC_DTYPE_F32, true, 0, true}, isa);
  run_case(Cfg{1, 2, 2, 150, 150, 128, TC_DTYPE_BF16, false, 70, false}, isa);
  run_case(Cfg{1, 1, 1, 70, 140, 256, TC_DTYPE_F16, true, 0, false}, isa);
}

INSTANTIATE_TEST_SUITE_P(Paths, AttentionIsa, ::testing::Values("avx512", "avx2", "portable"),
                         [](const ::testing::TestParamInfo<const char*>& i) { return std::string(i.param); });

}  // namespace

namespace {

// A valid f32 problem (B=1, H=2, Hkv=1, Sq=Skv=8, D=4) for the validation tests.
struct Small {
  Device dev;
  tc_buffer Q, K, V, O, L, dO, dQ, dK, dV, S;
  tc_attention_desc d{};
  Small() {
    std::mt19937 rng(7);
    auto up = [&](size_t n) { return dev.upload(encode(TC_DTYPE_F32, random_tensor(rng, TC_DTYPE_F32, n))); };
    Q = up(64), K = up(32), V = up(32), dO = up(64), S = up(2);
    O = dev.alloc(256), L = dev.alloc(64), dQ = dev.alloc(256), dK = dev.alloc(128), dV = dev.alloc(128);
    d.batch = 1, d.heads = 2, d.kv_heads = 1, d.seq_q = 8, d.seq_kv = 8, d.head_dim = 4;
    d.dtype = TC_DTYPE_F32, d.accum = TC_DTYPE_F32, d.causal = 1, d.return_lse = 1;
  }
  std::vector<std::vector<char>> snapshot() {
    std::vector<std::vector<char>> out;
    for (tc_buffer b : dev.bufs) out.push_back(dev.read(b));
    return out;
  }
  tc_status fwd(const tc_attention_desc& desc) { return tc_attention_forward(dev.ctx, Q, K, V, O, L, S, &desc); }
  tc_status bwd(const tc_attention_desc& desc) {
    return tc_attention_backward(dev.ctx, Q, K, V, O, dO, L, dQ, dK, dV, S, &desc);
  }
};

TEST(AttentionValidation, BadDescriptorsLeaveBuffersUntouched) {
  Small s;
  ASSERT_EQ(s.fwd(s.d), TC_OK);
  ASSERT_EQ(s.bwd(s.d), TC_OK);
  auto before = s.snapshot();
  struct Bad {
    const char* what;
    tc_status want;
    void (*edit)(tc_attention_desc&);
  } bad[] = {
      {"heads % kv_heads", TC_ERR_INVALID_SHAPE, [](tc_attention_desc& d) { d.kv_heads = 3; }},
      {"head_dim 0", TC_ERR_INVALID_SHAPE, [](tc_attention_desc& d) { d.head_dim = 0; }},
      {"head_dim 257", TC_ERR_INVALID_SHAPE, [](tc_attention_desc& d) { d.head_dim = 257; }},
      {"seq_q 0", TC_ERR_INVALID_SHAPE, [](tc_attention_desc& d) { d.seq_q = 0; }},
      {"batch huge", TC_ERR_INVALID_SHAPE, [](tc_attention_desc& d) { d.batch = int64_t(1) << 40; }},
      {"overflow", TC_ERR_INVALID_SHAPE,
       [](tc_attention_desc& d) { d.batch = d.heads = d.kv_heads = d.seq_q = d.seq_kv = 0x7fffffff; }},
      {"window < 0", TC_ERR_INVALID_ARG, [](tc_attention_desc& d) { d.window_size = -1; }},
      {"scale NaN", TC_ERR_INVALID_ARG, [](tc_attention_desc& d) { d.softmax_scale = NAN; }},
      {"dtype i8", TC_ERR_UNSUPPORTED_DTYPE, [](tc_attention_desc& d) { d.dtype = TC_DTYPE_I8; }},
      {"dtype 42", TC_ERR_UNSUPPORTED_DTYPE, [](tc_attention_desc& d) { d.dtype = 42; }},
      {"accum f16", TC_ERR_UNSUPPORTED_DTYPE, [](tc_attention_desc& d) { d.accum = TC_DTYPE_F16; }},
      {"too big for buffers", TC_ERR_INVALID_ARG, [](tc_attention_desc& d) { d.seq_kv = 9; }},
  };
  for (const Bad& b : bad) {
    tc_attention_desc d = s.d;
    b.edit(d);
    EXPECT_EQ(s.fwd(d), b.want) << b.what << ": " << tc_last_error_detail();
    EXPECT_EQ(s.bwd(d), b.want) << b.what << ": " << tc_last_error_detail();
  }
  EXPECT_EQ(tc_attention_forward(s.dev.ctx, s.Q, s.K, s.V, s.O, s.L, s.S, nullptr), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_attention_backward(s.dev.ctx, s.Q, s.K, s.V, s.O, s.dO, s.L, s.dQ, s.dK, s.dV, s.S, nullptr),
            TC_ERR_INVALID_ARG);
  EXPECT_EQ(s.snapshot(), before);
}

TEST(AttentionValidation, HandlesLseAndAliasing) {
  Small s;
  auto before = s.snapshot();
  const tc_attention_desc& d = s.d;
  EXPECT_EQ(tc_attention_forward(nullptr, s.Q, s.K, s.V, s.O, s.L, s.S, &d), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_attention_forward(s.dev.ctx, s.Q, nullptr, s.V, s.O, s.L, s.S, &d), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_attention_forward(s.dev.ctx, s.Q, s.K, s.V, s.O, nullptr, s.S, &d), TC_ERR_INVALID_ARG);
  EXPECT_NE(std::string(tc_last_error_detail()).find("return_lse"), std::string::npos);
  tc_attention_desc no_lse = d;
  no_lse.return_lse = 0;
  EXPECT_EQ(tc_attention_forward(s.dev.ctx, s.Q, s.K, s.V, s.O, reinterpret_cast<tc_buffer>(&no_lse), s.S, &no_lse),
            TC_ERR_INVALID_ARG);  // a stale LSE handle is refused even when unused
  EXPECT_EQ(tc_attention_forward(s.dev.ctx, s.Q, s.K, s.V, s.Q, s.L, s.S, &d), TC_ERR_INVALID_ARG);   // O = Q
  EXPECT_EQ(tc_attention_forward(s.dev.ctx, s.Q, s.K, s.V, s.O, s.O, s.S, &d), TC_ERR_INVALID_ARG);   // LSE = O
  EXPECT_EQ(tc_attention_backward(s.dev.ctx, s.Q, s.K, s.V, s.O, s.dO, s.L, s.dQ, s.dK, s.dK, s.S, &d),
            TC_ERR_INVALID_ARG);  // dV = dK
  tc_buffer short_slopes = s.dev.alloc(4);
  EXPECT_EQ(tc_attention_forward(s.dev.ctx, s.Q, s.K, s.V, s.O, s.L, short_slopes, &d), TC_ERR_INVALID_ARG);
  before.push_back(s.dev.read(short_slopes));
  EXPECT_EQ(s.snapshot(), before);
  tc_stream st = nullptr;
  EXPECT_EQ(tc_attention_forward_async(s.dev.ctx, s.Q, s.K, s.V, s.O, s.L, s.S, &d, st), TC_ERR_INVALID_ARG);
}

TEST(AttentionValidation, AsyncMatchesSync) {
  Small s;
  ASSERT_EQ(s.fwd(s.d), TC_OK);
  auto o = s.dev.read(s.O), l = s.dev.read(s.L);
  tc_buffer O2 = s.dev.alloc(256), L2 = s.dev.alloc(64);
  tc_stream st = nullptr;
  ASSERT_EQ(tc_stream_create(s.dev.ctx, &st), TC_OK);
  ASSERT_EQ(tc_attention_forward_async(s.dev.ctx, s.Q, s.K, s.V, O2, L2, s.S, &s.d, st), TC_OK);
  ASSERT_EQ(tc_stream_sync(st), TC_OK);
  EXPECT_EQ(s.dev.read(O2), o);
  EXPECT_EQ(s.dev.read(L2), l);
  tc_stream_destroy(st);
}

// Calls from several threads at once (sharing the pool) give the results of
// calls made one at a time.
TEST(AttentionValidation, ConcurrentCallsAgree) {
  Small s;
  s.d.seq_q = s.d.seq_kv = 8;
  ASSERT_EQ(s.fwd(s.d), TC_OK);
  ASSERT_EQ(s.bwd(s.d), TC_OK);
  const auto o = s.dev.read(s.O), dq = s.dev.read(s.dQ);
  std::vector<tc_buffer> outs;
  for (int t = 0; t < 4; ++t) outs.push_back(s.dev.alloc(256)), outs.push_back(s.dev.alloc(64)),
      outs.push_back(s.dev.alloc(256)), outs.push_back(s.dev.alloc(128)), outs.push_back(s.dev.alloc(128));
  std::vector<std::thread> threads;
  std::vector<int> bad(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      tc_buffer* b = &outs[size_t(t) * 5];
      for (int rep = 0; rep < 20; ++rep) {
        bad[t] += tc_attention_forward(s.dev.ctx, s.Q, s.K, s.V, b[0], b[1], s.S, &s.d) != TC_OK;
        bad[t] += tc_attention_backward(s.dev.ctx, s.Q, s.K, s.V, b[0], s.dO, b[1], b[2], b[3], b[4], s.S, &s.d) !=
                  TC_OK;
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(bad[t], 0);
    EXPECT_EQ(s.dev.read(outs[size_t(t) * 5]), o);
    EXPECT_EQ(s.dev.read(outs[size_t(t) * 5 + 2]), dq);
  }
}

}  // namespace
