/* C through the installed headers and library: a context, buffers and a
 * GEMM, checked against a plain triple loop. Exit status 0 when it agrees. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <tensorcore/tensorcore.h>

enum { M = 37, N = 29, K = 41 };

static int check(tc_status s, const char* what) {
  if (s != TC_OK) {
    fprintf(stderr, "%s: %s (%s)\n", what, tc_status_string(s), tc_last_error_detail());
    exit(1);
  }
  return 0;
}

int main(void) {
  static float a[M * K], b[K * N], c[M * N];
  for (int i = 0; i < M * K; ++i) a[i] = (float)((i * 7 % 13) - 6) / 8.0f;
  for (int i = 0; i < K * N; ++i) b[i] = (float)((i * 5 % 11) - 5) / 4.0f;
  tc_context ctx;
  check(tc_init_device("cpu", &ctx), "tc_init_device");
  tc_buffer A, B, C;
  check(tc_buffer_alloc(ctx, sizeof a, &A), "alloc A");
  check(tc_buffer_alloc(ctx, sizeof b, &B), "alloc B");
  check(tc_buffer_alloc(ctx, sizeof c, &C), "alloc C");
  check(tc_buffer_write(A, 0, a, sizeof a), "write A");
  check(tc_buffer_write(B, 0, b, sizeof b), "write B");
  tc_gemm_desc d = {0};
  d.M = M, d.N = N, d.K = K;
  d.dtype = TC_DTYPE_F32, d.accum = TC_DTYPE_F32, d.alpha = 1.0, d.beta = 0.0;
  d.lda = K, d.ldb = N, d.ldc = N, d.batch = 1;
  check(tc_gemm(ctx, A, B, C, &d), "tc_gemm");
  check(tc_buffer_read(C, 0, c, sizeof c), "read C");
  double worst = 0;
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double ref = 0;
      for (int k = 0; k < K; ++k) ref += (double)a[i * K + k] * b[k * N + j];
      double err = fabs(ref - c[i * N + j]);
      if (!(err <= worst)) worst = err; /* NaN counts */
    }
  tc_buffer_free(A), tc_buffer_free(B), tc_buffer_free(C);
  tc_shutdown(ctx);
  printf("%s: %dx%dx%d f32 GEMM on %s, max error %.3g\n", tc_version(), M, N, K, tc_backend_name(tc_last_backend()),
         worst);
  return worst < 1e-4 ? 0 : 1;
}
