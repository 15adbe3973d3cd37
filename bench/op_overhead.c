/* Host cost of one op call through the C ABI: tiny shapes, so the figure is
 * the entry point's validation and dispatch (plus the kernel launch and, for
 * synchronous calls, the wait). Driven by bench/op_overhead.py.
 *
 *   op_overhead DEVICE CALLS   prints "name ns_per_call" lines */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "tensorcore/tensorcore.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

#define CHECK(call)                                                                   \
  do {                                                                                \
    tc_status st_ = (call);                                                           \
    if (st_ != TC_OK) {                                                               \
      fprintf(stderr, "%s failed: %d %s\n", #call, (int)st_, tc_last_error_detail()); \
      exit(1);                                                                        \
    }                                                                                 \
  } while (0)

int main(int argc, char** argv) {
  const char* device = argc > 1 ? argv[1] : "cpu";
  const int calls = argc > 2 ? atoi(argv[2]) : 100000;
  tc_context ctx;
  CHECK(tc_init_device(device, &ctx));
  tc_buffer x, y, g;
  CHECK(tc_buffer_alloc(ctx, 64, &x));
  CHECK(tc_buffer_alloc(ctx, 64, &y));
  CHECK(tc_buffer_alloc(ctx, 64, &g));
  float z[16] = {0};
  CHECK(tc_buffer_write(x, 0, z, 64));
  CHECK(tc_buffer_write(g, 0, z, 64));
  tc_stream s;
  CHECK(tc_stream_create(ctx, &s));
  tc_gemm_desc d = {0};
  d.M = d.N = d.K = 2;
  d.dtype = TC_DTYPE_F32;
  d.accum = TC_DTYPE_F32;
  d.alpha = 1;
  double best[3] = {1e9, 1e9, 1e9};
  for (int rep = 0; rep < 5; ++rep) {
    double t0 = now();
    for (int i = 0; i < calls; ++i) CHECK(tc_softmax_forward(ctx, x, y, 1, 4, TC_DTYPE_F32));
    double t1 = now();
    for (int i = 0; i < calls; ++i) CHECK(tc_rmsnorm_forward(ctx, x, g, y, NULL, 1, 4, 1e-5f, TC_DTYPE_F32));
    double t2 = now();
    for (int i = 0; i < calls; ++i) CHECK(tc_gemm(ctx, x, g, y, &d));
    double t3 = now();
    double t[3] = {t1 - t0, t2 - t1, t3 - t2};
    for (int k = 0; k < 3; ++k)
      if (t[k] < best[k]) best[k] = t[k];
  }
  printf("softmax_forward %.0f\nrmsnorm_forward %.0f\ngemm %.0f\n", best[0] / calls * 1e9, best[1] / calls * 1e9,
         best[2] / calls * 1e9);
  /* Enqueued: the host cost alone, then one sync. */
  double best_async = 1e9;
  for (int rep = 0; rep < 5; ++rep) {
    double t0 = now();
    for (int i = 0; i < calls; ++i) CHECK(tc_gemm_async(ctx, x, g, y, &d, s));
    double t1 = now();
    CHECK(tc_stream_sync(s));
    if (t1 - t0 < best_async) best_async = t1 - t0;
  }
  printf("gemm_async_enqueue %.0f\n", best_async / calls * 1e9);
  tc_stream_destroy(s);
  tc_buffer_free(x);
  tc_buffer_free(y);
  tc_buffer_free(g);
  tc_shutdown(ctx);
  return 0;
}
