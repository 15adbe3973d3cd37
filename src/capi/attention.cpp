#include "tensorcore/attention.h"

#include <cmath>
#include <cstdio>
#include <vector>

#include "capi/api.h"
#include "core/half.h"

using namespace tc;
using namespace tc::capi;

namespace {

constexpr int64_t kMaxDim = 0x7fffffff;

// One buffer argument: its name, handle, the bytes the op touches from its
// start, and whether the op writes it.
struct Operand {
  const char* name;
  tc_buffer& buf;  // the caller's variable: check_buffer resolves it in place
  int64_t bytes;
  bool output;
};

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

// Every operand fits its buffer, and no output shares bytes with another
// operand (inputs may share bytes among themselves).
tc_status check_operands(const char* fn, tc_context ctx, const std::vector<Operand>& ops) {
  for (const Operand& op : ops)
    if (tc_status st = check_buffer(fn, op.name, ctx, op.buf)) return st;
  for (const Operand& op : ops)
    if (uint64_t(op.bytes) > op.buf->size())
      return fail(TC_ERR_INVALID_ARG, "%s: %s needs %lld bytes but its buffer has %zu", fn, op.name,
                  (long long)op.bytes, op.buf->size());
  for (size_t a = 0; a < ops.size(); ++a)
    for (size_t b = a + 1; b < ops.size(); ++b) {
      const Operand &x = ops[a], &y = ops[b];
      if (!x.output && !y.output) continue;
      const char *x0 = x.buf->bytes(), *y0 = y.buf->bytes();
      if (x.bytes > 0 && y.bytes > 0 && x0 < y0 + y.bytes && y0 < x0 + x.bytes)
        return fail(TC_ERR_INVALID_ARG, "%s: output %s overlaps %s", fn, x.output ? x.name : y.name,
                    x.output ? y.name : x.name);
    }
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

tc_status forward(const char* fn, tc_context ctx, tc_buffer Q, tc_buffer K, tc_buffer V, tc_buffer O,
                  tc_buffer LSE, tc_buffer alibi, const tc_attention_desc* desc, tc_stream stream, bool async) {
  if (tc_status st = check_context(fn, ctx)) return st;
  if (async)
    if (tc_status st = check_stream(fn, ctx, stream)) return st;
  tc_attention_desc d;
  int64_t qn, kvn, ln;
  if (tc_status st = check_desc(fn, desc, &d, &qn, &kvn, &ln)) return st;
  if (d.return_lse && !LSE) return fail(TC_ERR_INVALID_ARG, "%s: return_lse is set but LSE is null", fn);
  const int64_t es = int64_t(dtype_size(d.dtype));
  std::vector<Operand> ops = {{"Q", Q, qn * es, false}, {"K", K, kvn * es, false}, {"V", V, kvn * es, false},
                              {"O", O, qn * es, true}};
  // An LSE passed without return_lse is neither read nor written (but must be a live handle).
  if (d.return_lse) ops.push_back({"LSE", LSE, ln * 4, true});
  else if (LSE)
    if (tc_status st = check_buffer(fn, "LSE", ctx, LSE)) return st;
  if (alibi) ops.push_back({"alibi_slopes", alibi, d.heads * 4, false});
  if (tc_status st = check_operands(fn, ctx, ops)) return st;

  AttentionArgs args;
  args.d = d;
  args.q = Q->bytes();
  args.k = K->bytes();
  args.v = V->bytes();
  args.o = O->bytes();
  args.lse = d.return_lse ? reinterpret_cast<float*>(LSE->bytes()) : nullptr;
  args.alibi = alibi ? reinterpret_cast<const float*>(alibi->bytes()) : nullptr;
  args.info.name = "attention_forward";
  args.info.shapes = shapes_of(d, alibi != nullptr);
  for (const Operand& op : ops) args.info.keep.push_back(op.buf->storage);
  note_backend(ctx->backend->kind());
  return ctx->backend->attention_forward(args, async ? stream->queue.get() : nullptr);
}

tc_status backward(const char* fn, tc_context ctx, tc_buffer Q, tc_buffer K, tc_buffer V, tc_buffer O,
                   tc_buffer dO, tc_buffer LSE, tc_buffer dQ, tc_buffer dK, tc_buffer dV, tc_buffer alibi,
                   const tc_attention_desc* desc) {
  if (tc_status st = check_context(fn, ctx)) return st;
  tc_attention_desc d;
  int64_t qn, kvn, ln;
  if (tc_status st = check_desc(fn, desc, &d, &qn, &kvn, &ln)) return st;
  d.return_lse = 0;
  const int64_t es = int64_t(dtype_size(d.dtype));
  std::vector<Operand> ops = {{"Q", Q, qn * es, false},   {"K", K, kvn * es, false},  {"V", V, kvn * es, false},
                              {"O", O, qn * es, false},   {"dO", dO, qn * es, false}, {"LSE", LSE, ln * 4, false},
                              {"dQ", dQ, qn * es, true},  {"dK", dK, kvn * es, true}, {"dV", dV, kvn * es, true}};
  if (alibi) ops.push_back({"alibi_slopes", alibi, d.heads * 4, false});
  if (tc_status st = check_operands(fn, ctx, ops)) return st;

  AttentionBackwardArgs args;
  args.d = d;
  args.q = Q->bytes();
  args.k = K->bytes();
  args.v = V->bytes();
  args.o = O->bytes();
  args.d_o = dO->bytes();
  args.lse = reinterpret_cast<const float*>(LSE->bytes());
  args.dq = dQ->bytes();
  args.dk = dK->bytes();
  args.dv = dV->bytes();
  args.alibi = alibi ? reinterpret_cast<const float*>(alibi->bytes()) : nullptr;
  args.info.name = "attention_backward";
  args.info.shapes = shapes_of(d, alibi != nullptr);
  for (const Operand& op : ops) args.info.keep.push_back(op.buf->storage);
  note_backend(ctx->backend->kind());
  return ctx->backend->attention_backward(args, nullptr);
}

}  // namespace

extern "C" {

tc_status tc_attention_forward(tc_context ctx, tc_buffer Q, tc_buffer K, tc_buffer V, tc_buffer O, tc_buffer LSE,
                               tc_buffer alibi_slopes, const tc_attention_desc* desc) {
  return guarded("tc_attention_forward", [&] {
    return forward("tc_attention_forward", ctx, Q, K, V, O, LSE, alibi_slopes, desc, nullptr, false);
  });
}

tc_status tc_attention_forward_async(tc_context ctx, tc_buffer Q, tc_buffer K, tc_buffer V, tc_buffer O,
                                     tc_buffer LSE, tc_buffer alibi_slopes, const tc_attention_desc* desc,
                                     tc_stream stream) {
  return guarded("tc_attention_forward_async", [&] {
    return forward("tc_attention_forward_async", ctx, Q, K, V, O, LSE, alibi_slopes, desc, stream, true);
  });
}

tc_status tc_attention_backward(tc_context ctx, tc_buffer Q, tc_buffer K, tc_buffer V, tc_buffer O, tc_buffer dO,
                                tc_buffer LSE, tc_buffer dQ, tc_buffer dK, tc_buffer dV, tc_buffer alibi_slopes,
                                const tc_attention_desc* desc) {
  return guarded("tc_attention_backward", [&] {
    return backward("tc_attention_backward", ctx, Q, K, V, O, dO, LSE, dQ, dK, dV, alibi_slopes, desc);
  });
}

}  // extern "C"
