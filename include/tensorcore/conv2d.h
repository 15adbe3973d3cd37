/* tensorcore: 2-D convolution (cross-correlation, as in every DL framework).
 *
 *   Y[n, o, y, x] = bias[o] + sum_{c, i, j} W[o, c, i, j] * Xpad[n, c, y*sh + i, x*sw + j]
 *
 * X is NCHW [batch, in_channels, H, W], W is OIHW [out_channels, in_channels,
 * kH, kW], bias is [out_channels] (optional), Y is NCHW [batch, out_channels,
 * out_H, out_W]. Xpad is X with pad_h zero rows above and below and pad_w
 * zero columns left and right; dilation is 1 and groups is 1.
 *
 *   out_H = (H + 2*pad_h - kH) / stride_h + 1     (floor division)
 *   out_W = (W + 2*pad_w - kW) / stride_w + 1
 *
 * dtypes: f16 or f32 for every tensor of an op (X, W, bias, Y, dY, dX, dW);
 * accumulation is f32. Every tensor is packed and starts at byte 0 of its
 * buffer; a buffer may be larger than its tensor.
 *
 * Scratch. The ops work in caller-provided workspace whose size the helpers
 * below return. They depend only on the shape (not on dtype or out_channels)
 * and are never 0 for a valid shape, so every scratch argument is required:
 * NULL or a buffer smaller than the helper's answer is TC_ERR_INVALID_ARG.
 * Scratch contents are unspecified before and after a call, and a scratch
 * buffer may not overlap any other argument of the call.
 *   scratch_col:      f32 im2col columns for the whole batch,
 *                     batch * in_channels*kH*kW * out_H*out_W * 4 bytes.
 *   scratch_dX_f32:   f32 accumulator for the col2im of backward_input,
 *                     batch * in_channels * H * W * 4 bytes.
 * f16 runs additionally allocate internal f32 copies of the weights and of
 * one image's output/gradient (sizes that involve out_channels, which the
 * helpers do not take).
 *
 * Errors: dims <= 0, pad < 0, stride < 1, a kernel larger than the padded
 * input, out_H/out_W given but not the computed value, or sizes overflowing
 * 64 bits (or a GEMM dimension beyond 2^31-1) are TC_ERR_INVALID_SHAPE; a
 * dtype other than f16/f32 is TC_ERR_UNSUPPORTED_DTYPE; null or foreign
 * handles, buffers too small and outputs overlapping another argument are
 * TC_ERR_INVALID_ARG. A failing call writes nothing. */
#ifndef TENSORCORE_CONV2D_H
#define TENSORCORE_CONV2D_H

#include "tensorcore/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tc_conv2d_desc {
  int64_t batch, in_channels, out_channels;
  int64_t H, W;            /* input height and width */
  int64_t kH, kW;          /* kernel height and width */
  int64_t pad_h, pad_w;    /* zero padding on each side, >= 0 */
  int64_t stride_h, stride_w; /* >= 1 */
  int64_t out_H, out_W;    /* 0: computed; otherwise must equal the computed value */
  tc_dtype dtype;          /* TC_DTYPE_F16 or TC_DTYPE_F32 */
} tc_conv2d_desc;

/* Output height and width for the given input, kernel, padding and stride. */
TC_API tc_status tc_conv2d_output_shape(int64_t H, int64_t W, int64_t kH, int64_t kW, int64_t pad_h, int64_t pad_w,
                                        int64_t stride_h, int64_t stride_w, int64_t* out_H, int64_t* out_W);

/* Bytes of scratch_col for forward, backward_input and backward_weight. Reads
 * batch, in_channels, H, W, kH, kW, pads, strides and out_H/out_W of desc;
 * out_channels and dtype are ignored. */
TC_API tc_status tc_conv2d_scratch_bytes(const tc_conv2d_desc* desc, uint64_t* out_bytes);

/* Bytes of scratch_dX_f32 for backward_input. Reads batch, in_channels, H and
 * W of desc; the other fields are ignored. */
TC_API tc_status tc_conv2d_backward_input_scratch_bytes(const tc_conv2d_desc* desc, uint64_t* out_bytes);

/* Y = conv(X, W) + bias. bias may be NULL (no bias). Y is overwritten. */
TC_API tc_status tc_conv2d_forward(tc_context ctx, tc_buffer X, tc_buffer weight, tc_buffer bias, tc_buffer Y,
                                   tc_buffer scratch_col, const tc_conv2d_desc* desc);
TC_API tc_status tc_conv2d_forward_async(tc_context ctx, tc_buffer X, tc_buffer weight, tc_buffer bias, tc_buffer Y,
                                         tc_buffer scratch_col, const tc_conv2d_desc* desc, tc_stream stream);

/* dX = dL/dX given dY = dL/dY: the transposed convolution of dY with W.
 * dX is overwritten (not accumulated). */
TC_API tc_status tc_conv2d_backward_input(tc_context ctx, tc_buffer dY, tc_buffer weight, tc_buffer dX,
                                          tc_buffer scratch_col, tc_buffer scratch_dX_f32,
                                          const tc_conv2d_desc* desc);
TC_API tc_status tc_conv2d_backward_input_async(tc_context ctx, tc_buffer dY, tc_buffer weight, tc_buffer dX,
                                                tc_buffer scratch_col, tc_buffer scratch_dX_f32,
                                                const tc_conv2d_desc* desc, tc_stream stream);

/* dW = dL/dW given X and dY, summed over the batch. dW is overwritten (not
 * accumulated). The bias gradient (dY summed over n, y, x) is not computed. */
TC_API tc_status tc_conv2d_backward_weight(tc_context ctx, tc_buffer X, tc_buffer dY, tc_buffer dW,
                                           tc_buffer scratch_col, const tc_conv2d_desc* desc);
TC_API tc_status tc_conv2d_backward_weight_async(tc_context ctx, tc_buffer X, tc_buffer dY, tc_buffer dW,
                                                 tc_buffer scratch_col, const tc_conv2d_desc* desc, tc_stream stream);

#ifdef __cplusplus
}
#endif

#endif /* TENSORCORE_CONV2D_H */
