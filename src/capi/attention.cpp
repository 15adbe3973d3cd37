#include "tensorcore/attention.h"

#include <cmath>
#include <cstdio>
#include <vector>

#include "capi/op_call.h"
#include "core/half.h"

using namespace tc;
using namespace tc::capi;

namespace {

constexpr int64_t kMaxDim = 0x7fffffff;

// Checks the descriptor and fills in the defaults; the element counts of the
// query side (B*H*Sq*D), the key side (B*Hkv*Skv*D) and the LSE (B*H*Sq).
tc_status check_desc(const char* fn, const tc_attention_desc* desc, tc_attention_desc* out, int64_t* q_elems,
                     int64_t* kv_elems, int64_t* lse_elems) {
  if (!desc) return fail(TC_ERR_INVALID_ARG, "%s: desc is null", fn);
  tc_attention_desc d = *desc;
  if (d.dtype != TC_DTYPE_F32 && d.dtype != TC_DTYPE_F16 && d.dtype != TC_DTYPE_BF16)
    return fail(TC_ERR_UNSUPPORTED_DTYPE, "%s: dtype %s is not supported (f16, bf16, f32)", fn,
                dtype_label(d.dtype).c_str());
  if (d.accum != TC_DTYPE_F32)
    return fail(TC_ERR_UNSUPPORTED_DTYPE, "%s: accum %s is not supported (attention accumulates in f32)", fn,
                dtype_label(d.accum).c_str());
  if (d.batch <= 0 || d.heads <= 0 || d.seq_q <= 0 || d.seq_kv <= 0 || d.head_dim <= 0 || d.kv_heads < 0)
    return fail(TC_ERR_INVALID_SHAPE,
                "%s: batch, heads, seq_q, seq_kv, head_dim must be > 0 and kv_heads >= 0 (got batch=%lld heads=%lld "
                "kv_heads=%lld seq_q=%lld seq_kv=%lld head_dim=%lld)",
                fn, (long long)d.batch, (long long)d.heads, (long long)d.kv_heads, (long long)d.seq_q,
                (long long)d.seq_kv, (long long)d.head_dim);
  if (d.batch > kMaxDim || d.heads > kMaxDim || d.kv_heads > kMaxDim || d.seq_q > kMaxDim || d.seq_kv > kMaxDim)
    return fail(TC_ERR_INVALID_SHAPE, "%s: batch, heads, kv_heads, seq_q, seq_kv must be below 2^31", fn);
  if (d.head_dim > TC_ATTENTION_MAX_HEAD_DIM)
    return fail(TC_ERR_INVALID_SHAPE, "%s: head_dim = %lld is outside 1..%d", fn, (long long)d.head_dim,
                TC_ATTENTION_MAX_HEAD_DIM);
  if (d.kv_heads == 0) d.kv_heads = d.heads;
  if (d.heads % d.kv_heads != 0)
    return fail(TC_ERR_INVALID_SHAPE, "%s: heads = %lld is not a multiple of kv_heads = %lld", fn,
                (long long)d.heads, (long long)d.kv_heads);
  if (d.window_size < 0)
    return fail(TC_ERR_INVALID_ARG, "%s: window_size = %lld is negative (0 means no window)", fn,
                (long long)d.window_size);
  if (std::isnan(d.softmax_scale) || std::isinf(d.softmax_scale))
    return fail(TC_ERR_INVALID_ARG, "%s: softmax_scale = %g is not finite", fn, d.softmax_scale);
  if (d.softmax_scale <= 0) d.softmax_scale = 1.0 / std::sqrt(double(d.head_dim));
  d.causal = d.causal != 0;
  d.return_lse = d.return_lse != 0;
  int64_t bh, bhs, bkv, bkvs;
  if (!mul_ok(d.batch, d.heads, &bh) || !mul_ok(bh, d.seq_q, &bhs) || !mul_ok(bhs, d.head_dim, q_elems) ||
      !mul_ok(d.batch, d.kv_heads, &bkv) || !mul_ok(bkv, d.seq_kv, &bkvs) || !mul_ok(bkvs, d.head_dim, kv_elems) ||
      !mul_ok(*q_elems, 4, &bh) || !mul_ok(*kv_elems, 4, &bh))
    return fail(TC_ERR_INVALID_SHAPE,
                "%s: tensor sizes overflow 64 bits (batch=%lld heads=%lld kv_heads=%lld seq_q=%lld seq_kv=%lld "
                "head_dim=%lld)",
                fn, (long long)d.batch, (long long)d.heads, (long long)d.kv_heads, (long long)d.seq_q,
                (long long)d.seq_kv, (long long)d.head_dim);
  *lse_elems = bhs;
  *out = d;
  return TC_OK;
}

std::string shapes_of(const tc_attention_desc& d, bool alibi) {
  char s[320];
  std::snprintf(s, sizeof s,
                "B=%lld,H=%lld,Hkv=%lld,Sq=%lld,Skv=%lld,D=%lld,dtype=%s,causal=%d,window=%lld,alibi=%d,lse=%d",
                (long long)d.batch, (long long)d.heads, (long long)d.kv_heads, (long long)d.seq_q,
                (long long)d.seq_kv, (long long)d.head_dim, dtype_label(d.dtype).c_str(), d.causal,
                (long long)d.window_size, alibi ? 1 : 0, d.return_lse);
  return s;
}

tc_status attention_forward_impl(bool async, tc_stream stream, tc_context ctx, tc_buffer Q, tc_buffer K, tc_buffer V,
                                 tc_buffer O, tc_buffer LSE, tc_buffer alibi, const tc_attention_desc* desc) {
  OpCall c(EntryId::attention_forward, async, stream, {ctx, Q, K, V, O, LSE, alibi, desc});
  tc_attention_desc d;
  auto rule = [&]() -> tc_status {
    int64_t qn, kvn, ln;
    if (tc_status st = check_desc(c.fn(), desc, &d, &qn, &kvn, &ln)) return st;
    if (d.return_lse && !LSE) return fail(TC_ERR_INVALID_ARG, "%s: return_lse is set but LSE is null", c.fn());
    const int64_t es = int64_t(dtype_size(d.dtype));
    for (auto [name, n] : {std::pair{"Q", qn}, {"K", kvn}, {"V", kvn}, {"O", qn}})
      if (tc_status st = c.span(name, n * es)) return st;
    // An LSE passed without return_lse is neither read nor written.
    if (tc_status st = c.span("LSE", d.return_lse ? ln * 4 : 0)) return st;
    return c.span("alibi_slopes", d.heads * 4);
  };
  if (tc_status st = c.validate(rule)) return st;
  AttentionArgs args;
  args.d = d;
  args.q = c.data("Q"), args.k = c.data("K"), args.v = c.data("V"), args.o = c.data("O");
  args.lse = d.return_lse ? c.ptr<float>("LSE") : nullptr;
  args.alibi = c.ptr<const float>("alibi_slopes");
  c.fill_info(&args.info, "attention_forward", [&] { return shapes_of(d, alibi != nullptr); });
  return c.run(&Backend::attention_forward, args);
}

tc_status attention_backward_impl(bool async, tc_stream stream, tc_context ctx, tc_buffer Q, tc_buffer K, tc_buffer V,
                                  tc_buffer O, tc_buffer dO, tc_buffer LSE, tc_buffer dQ, tc_buffer dK, tc_buffer dV,
                                  tc_buffer alibi, const tc_attention_desc* desc) {
  OpCall c(EntryId::attention_backward, async, stream, {ctx, Q, K, V, O, dO, LSE, dQ, dK, dV, alibi, desc});
  tc_attention_desc d;
  auto rule = [&]() -> tc_status {
    int64_t qn, kvn, ln;
    if (tc_status st = check_desc(c.fn(), desc, &d, &qn, &kvn, &ln)) return st;
    d.return_lse = 0;
    const int64_t es = int64_t(dtype_size(d.dtype));
    for (auto [name, n] : {std::pair{"Q", qn * es}, {"K", kvn * es}, {"V", kvn * es}, {"O", qn * es},
                           {"dO", qn * es}, {"LSE", ln * 4}, {"dQ", qn * es}, {"dK", kvn * es}, {"dV", kvn * es}})
      if (tc_status st = c.span(name, n)) return st;
    return c.span("alibi_slopes", d.heads * 4);
  };
  if (tc_status st = c.validate(rule)) return st;
  AttentionBackwardArgs args;
  args.d = d;
  args.q = c.data("Q"), args.k = c.data("K"), args.v = c.data("V"), args.o = c.data("O");
  args.d_o = c.data("dO"), args.lse = c.ptr<const float>("LSE");
  args.dq = c.data("dQ"), args.dk = c.data("dK"), args.dv = c.data("dV");
  args.alibi = c.ptr<const float>("alibi_slopes");
  c.fill_info(&args.info, "attention_backward", [&] { return shapes_of(d, alibi != nullptr); });
  return c.run(&Backend::attention_backward, args);
}

}  // namespace

TC_DEFINE_ENTRY(attention_forward,
                (tc_context ctx, tc_buffer Q, tc_buffer K, tc_buffer V, tc_buffer O, tc_buffer LSE,
                 tc_buffer alibi_slopes, const tc_attention_desc* desc),
                ctx, Q, K, V, O, LSE, alibi_slopes, desc)
TC_DEFINE_ENTRY(attention_backward,
                (tc_context ctx, tc_buffer Q, tc_buffer K, tc_buffer V, tc_buffer O, tc_buffer dO, tc_buffer LSE,
                 tc_buffer dQ, tc_buffer dK, tc_buffer dV, tc_buffer alibi_slopes, const tc_attention_desc* desc),
                ctx, Q, K, V, O, dO, LSE, dQ, dK, dV, alibi_slopes, desc)
