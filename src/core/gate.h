// The gated activations' scalar forms, one definition for the host and the
// device (the quantized products' SwiGLU / GEGLU epilogues, the GPU's
// elementwise SwiGLU / GEGLU): act(g), the output then act(g) * up.
//   silu(g) = g / (1 + exp(min(87, -g)))   (the cap keeps silu(-inf) at -inf, not NaN)
//   gelu(g) = 0.5 g (1 + tanh(z)), z = c (g + 0.044715 g^3), c = sqrt(2 / pi),
//           = g e / (e + 1) with e = exp(min(87, 2z)): no cancellation where
//             tanh(z) is near -1, and g e alone would overflow for g > 5.6.
#pragma once

#include <cmath>

#ifdef __CUDACC__
#define TC_GATE_HD __host__ __device__ __forceinline__
#else
#define TC_GATE_HD inline
#endif

namespace tc {
namespace gate {

constexpr float kGeluC = 0.7978845608028654f, kGeluA = 0.044715f;

TC_GATE_HD float silu(float g) { return g * (1.0f / (1.0f + expf(fminf(87.0f, -g)))); }

TC_GATE_HD float gelu_tanh(float g) {
  const float z = kGeluC * fmaf(kGeluA * g, g * g, g), e = expf(fminf(87.0f, 2.0f * z));
  return g * (e / (e + 1.0f));
}

// A gated output act(g) u: GELU's tanh form when gelu, else SiLU.
TC_GATE_HD float glu(bool gelu, float g, float u) { return (gelu ? gelu_tanh(g) : silu(g)) * u; }

}  // namespace gate
}  // namespace tc
