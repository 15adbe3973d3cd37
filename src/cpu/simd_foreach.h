// Compiles a kernel file's vector code once per instruction set.
//
// A kernel file that includes this header is read several times by the
// compiler: first normally, then once per instruction set with TC_SIMD_PASS
// defined, inside `namespace tc::cpu::<anonymous>::<set>` (portable, avx2,
// avx512, avx512bf16) where `V` names that set's lane type (cpu/simd.h) and
// every function is compiled with `#pragma GCC target` for it (under clang,
// `#pragma clang attribute push(__attribute__((target(...))))` with the same
// features). The file looks
// like
//
//   #ifndef TC_SIMD_PASS
//   #include ...                              // includes, types
//   #define TC_SIMD_SELF "cpu/norms.cpp"
//   #include "cpu/simd_foreach.h"              // the kernels, once per set
//   ... dispatch: TC_SIMD_PICK(f<T>) is the copy for simd::active_isa()
//   #else
//   ... kernels written once against V ...
//   #endif
//
// so the maths, the kernels and their dispatch stay in one file per family.
// The per-set copies have internal linkage: families never clash.
// No include guard: each kernel file includes this exactly once.

#define TC_SIMD_PASS 1

namespace tc {
namespace cpu {
namespace {
namespace portable {
using V = simd::VecScalar;
#include "cpu/simd_loops.h"
#include TC_SIMD_SELF
}  // namespace portable
}  // namespace
}  // namespace cpu
}  // namespace tc

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif
namespace tc {
namespace cpu {
namespace {
namespace avx2 {
using V = simd::VecAvx2;
#include "cpu/simd_loops.h"
#include TC_SIMD_SELF
}  // namespace avx2
}  // namespace
}  // namespace cpu
}  // namespace tc
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")
#endif
namespace tc {
namespace cpu {
namespace {
namespace avx512 {
using V = simd::VecAvx512;
#include "cpu/simd_loops.h"
#include TC_SIMD_SELF
}  // namespace avx512
}  // namespace
}  // namespace cpu
}  // namespace tc
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")
#endif
namespace tc {
namespace cpu {
namespace {
namespace avx512bf16 {
using V = simd::VecAvx512Bf16;
#include "cpu/simd_loops.h"
#include TC_SIMD_SELF
}  // namespace avx512bf16
}  // namespace
}  // namespace cpu
}  // namespace tc
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#undef TC_SIMD_PASS

// The instruction set's copy of a kernel function, chosen at run time:
//   auto rows = TC_SIMD_PICK(rms_forward_rows<T>);
#define TC_SIMD_PICK(...) \
  ::tc::cpu::simd::pick(&avx512bf16::__VA_ARGS__, &avx512::__VA_ARGS__, &avx2::__VA_ARGS__, &portable::__VA_ARGS__)
