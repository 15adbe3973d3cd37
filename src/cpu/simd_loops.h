// Loop helpers over the lane type V, compiled into every instruction-set pass
// of a kernel file (cpu/simd_foreach.h includes this inside each pass, right
// before the kernels). They live in the pass, not in the lane types, so that
// the kernels' lambdas, compiled for the pass's instruction set, can be
// inlined into them. No include guard: included once per pass.

// Calls f(k, V::W) on each whole vector of [0, n), then f(k, n - k) on the
// tail (the count lets f use V::ld / V::st, which fold to full loads and
// stores in the loop).
template <class F>
inline void sweep(int64_t n, F&& f) {
  int64_t k = 0;
  for (; k + V::W <= n; k += V::W) f(k, V::W);
  if (k < n) f(k, int(n - k));
}

// As sweep, for reductions: f(u, k, count) with u = 0..3 choosing one of four
// independent accumulators, so consecutive vectors do not wait on one
// another's add; the remainder uses u = 0. Sum the four in a fixed order.
template <class F>
inline void sweep4(int64_t n, F&& f) {
  int64_t k = 0;
  for (; k + 4 * V::W <= n; k += 4 * V::W) {
    f(0, k, V::W);
    f(1, k + V::W, V::W);
    f(2, k + 2 * V::W, V::W);
    f(3, k + 3 * V::W, V::W);
  }
  for (; k + V::W <= n; k += V::W) f(0, k, V::W);
  if (k < n) f(0, k, int(n - k));
}
