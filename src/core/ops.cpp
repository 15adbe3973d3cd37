// What core/ops.def gives every backend: op names, the capability bits the
// supported ops add up to, and the registry of backends.
#include "core/backend.h"
#include "core/error.h"
#include "quant/formats.h"

namespace tc {

const char* op_name(OpId op) {
  static const char* const names[] = {
#define TC_OP(name, Args, caps) #name,
#include "core/ops.def"
#undef TC_OP
  };
  const int i = int(op);
  return i >= 0 && i < kOpCount ? names[i] : "?";
}

uint64_t op_capabilities(const Backend& backend) {
  static const uint64_t caps[] = {
#define TC_OP(name, Args, c) uint64_t(c),
#include "core/ops.def"
#undef TC_OP
  };
  uint64_t any = 0, missing = 0;
  for (int i = 0; i < kOpCount; ++i) {
    if (backend.supports_op(OpId(i))) any |= caps[i];
    else missing |= caps[i];
  }
  return any & ~missing;
}

const std::vector<BackendKind>& backend_kinds() {
  static const std::vector<BackendKind> kinds = {
      {"cuda", cuda_device_count, make_cuda_backend},
      {"cpu", [] { return 1; }, [](int) { return make_cpu_backend(); }},
  };
  return kinds;
}

tc_status check_quantize_q8(const QuantizeQ8Args& a) {
  if (a.K % 32 != 0 || a.M < 1)
    return fail(TC_ERR_UNSUPPORTED, "%s: quantize_q8 needs M >= 1 and K a multiple of 32 (M %lld, K %lld)",
                a.info.name, (long long)a.M, (long long)a.K);
  return TC_OK;
}

tc_status check_gemv_q8(const GemvQ8Args& a) {
  using namespace quant;
  if (a.M < 1) return fail(TC_ERR_UNSUPPORTED, "%s: gemv_q8 needs M >= 1, not %lld", a.info.name, (long long)a.M);
  if (!q8_product_format(a.fmt))
    return fail(TC_ERR_UNSUPPORTED, "%s: gemv_q8 takes Q4_0, Q4_1, Q5_1, Q8_0, Q4_K, Q5_K or Q6_K weights", a.info.name);
  if (a.K % q8_block_elems(a.fmt) != 0)
    return fail(TC_ERR_UNSUPPORTED, "%s: gemv_q8 of %s weights needs K a multiple of %lld, not %lld", a.info.name,
                format_info(a.fmt)->name, (long long)q8_block_elems(a.fmt), (long long)a.K);
  if (a.wd && !q8_split_format(a.fmt))
    return fail(TC_ERR_UNSUPPORTED, "%s: %s weights have no split layout", a.info.name, format_info(a.fmt)->name);
  if (!a.wd && q8_split_only(a.fmt))
    return fail(TC_ERR_UNSUPPORTED, "%s: gemv_q8 reads %s weights in the split layout only (repack_q8)",
                a.info.name, format_info(a.fmt)->name);
  if (a.epilogue < GemvQ8Args::kStore || a.epilogue > GemvQ8Args::kGeglu)
    return fail(TC_ERR_INVALID_ARG, "%s: gemv_q8 epilogue %d is none of store, add, swiglu, geglu", a.info.name,
                a.epilogue);
  if (GemvQ8Args::gated(a.epilogue) && a.N % 2 != 0)
    return fail(TC_ERR_INVALID_ARG, "%s: gemv_q8's gated epilogue needs an even N ([gate; up] rows), not %lld",
                a.info.name, (long long)a.N);
  if (a.gamma && !a.x)
    return fail(TC_ERR_INVALID_ARG, "%s: gemv_q8 normalises X only when it quantises it (gamma without x)",
                a.info.name);
  if (a.x) {
    if (a.xh)
      return fail(TC_ERR_INVALID_ARG, "%s: gemv_q8 takes f32 X to quantise (x) or f16 X (xh), not both", a.info.name);
    if (!a.xq || !a.xd)
      return fail(TC_ERR_INVALID_ARG, "%s: gemv_q8 quantising X needs xq and xd as scratch", a.info.name);
    const int64_t rows = GemvQ8Args::gated(a.epilogue) ? a.N / 2 : a.N;
    const uintptr_t x0 = reinterpret_cast<uintptr_t>(a.x), x1 = x0 + uintptr_t(a.M * a.K) * sizeof(float);
    const uintptr_t y0 = reinterpret_cast<uintptr_t>(a.y), y1 = y0 + uintptr_t(a.M * rows) * sizeof(float);
    if (x0 < y1 && y0 < x1)
      return fail(TC_ERR_INVALID_ARG, "%s: gemv_q8 quantising X needs X and Y apart (they overlap)", a.info.name);
  }
  if (a.rope.n > 0 && a.epilogue != GemvQ8Args::kStore)
    return fail(TC_ERR_INVALID_ARG, "%s: gemv_q8 applies RoPE to stored rows only (epilogue %d)", a.info.name,
                a.epilogue);
  return TC_OK;
}

GemvQ8Args without_rope(const GemvQ8Args& a) {
  GemvQ8Args p = a;
  p.rope.n = 0;
  return p;
}

QuantizeQ8Args quantize_of(const GemvQ8Args& a) {
  QuantizeQ8Args q;
  q.info = a.info;
  q.M = a.M, q.K = a.K;
  q.x = a.x, q.gamma = a.gamma, q.eps = a.eps;
  // The caller's scratch (backend.h): written here, read by the product after.
  q.xq = const_cast<int8_t*>(a.xq);
  q.xd = const_cast<float*>(a.xd);
  return q;
}

GemvQ8Args product_of(const GemvQ8Args& a) {
  GemvQ8Args p = a;
  p.x = nullptr, p.gamma = nullptr;
  return p;
}

tc_status check_decode_attention(const DecodeAttentionArgs& a) {
  if ((a.oq != nullptr) != (a.od != nullptr))
    return fail(TC_ERR_INVALID_ARG, "%s: decode_attention quantising o needs oq and od together", a.info.name);
  if (a.oq && a.D % 32 != 0)
    return fail(TC_ERR_UNSUPPORTED, "%s: decode_attention quantises o in blocks of 32 of a head: head dim %lld",
                a.info.name, (long long)a.D);
  return TC_OK;
}

tc_status check_repack_q8(const RepackQ8Args& a) {
  using namespace quant;
  if (!q8_split_format(a.fmt))
    return fail(TC_ERR_UNSUPPORTED, "%s: repack_q8 takes Q4_0, Q5_0, Q8_0 or Q6_K weights", a.info.name);
  if (a.K % q8_block_elems(a.fmt) != 0)
    return fail(TC_ERR_UNSUPPORTED, "%s: repack_q8 of %s weights needs K a multiple of %lld, not %lld", a.info.name,
                format_info(a.fmt)->name, (long long)q8_block_elems(a.fmt), (long long)a.K);
  return TC_OK;
}

}  // namespace tc
