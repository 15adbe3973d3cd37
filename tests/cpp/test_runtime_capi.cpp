// simpler runtime: the C ABI (include/simpler/simpler.h), including bad
// handles and arguments at every entry point.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "simpler/simpler.h"

namespace {

std::string detail() { return simpler_last_error_detail(); }

simpler_worker_config cpu_config() {
  simpler_worker_config c{};
  c.struct_size = sizeof c;
  c.level = 2;
  c.platform = "cpu";
  c.runtime = "tensormap_and_ringbuffer";
  c.num_cores = 2;
  return c;
}

ChipTensor mat(uint64_t ptr, uint32_t rows, uint32_t cols) {
  ChipTensor t{};
  t.buffer.addr = ptr;
  t.buffer.size = uint64_t(rows) * cols * 4;
  t.ndims = 2;
  t.dtype = DataType::FLOAT32;
  t.shapes[0] = rows, t.shapes[1] = cols;
  t.strides[0] = cols, t.strides[1] = 1;
  return t;
}

}  // namespace

TEST(RuntimeCapi, WorkerConfigIsChecked) {
  simpler_worker w = nullptr;
  EXPECT_EQ(simpler_worker_create(nullptr, &w), TC_ERR_INVALID_ARG);
  simpler_worker_config c = cpu_config();
  EXPECT_EQ(simpler_worker_create(&c, nullptr), TC_ERR_INVALID_ARG);
  c.struct_size = 4;
  EXPECT_EQ(simpler_worker_create(&c, &w), TC_ERR_INVALID_ARG);
  c = cpu_config();
  c.level = 3;
  EXPECT_EQ(simpler_worker_create(&c, &w), TC_ERR_UNSUPPORTED);
  EXPECT_NE(detail().find("not built yet"), std::string::npos) << detail();
  c = cpu_config();
  c.platform = "a5";
  EXPECT_EQ(simpler_worker_create(&c, &w), TC_ERR_INVALID_ARG);
  EXPECT_NE(detail().find("supported platforms: cpu, cuda"), std::string::npos) << detail();
  c = cpu_config();
  c.runtime = "aicpu_build_graph";
  EXPECT_EQ(simpler_worker_create(&c, &w), TC_ERR_INVALID_ARG);
  c = cpu_config();
  c.heap_ring_size = 100;
  EXPECT_EQ(simpler_worker_create(&c, &w), TC_ERR_INVALID_ARG);
  EXPECT_EQ(w, nullptr);
}

TEST(RuntimeCapi, StaleAndForeignHandlesAreRefused) {
  int dummy = 0;
  auto fake_w = reinterpret_cast<simpler_worker>(&dummy);
  auto fake_c = reinterpret_cast<simpler_callable>(&dummy);
  auto fake_r = reinterpret_cast<simpler_run>(&dummy);
  uint64_t p;
  EXPECT_EQ(simpler_worker_init(fake_w), TC_ERR_INVALID_ARG);
  EXPECT_EQ(simpler_worker_init(nullptr), TC_ERR_INVALID_ARG);
  EXPECT_EQ(simpler_malloc(fake_w, 16, &p), TC_ERR_INVALID_ARG);
  EXPECT_EQ(simpler_free(fake_w, 0), TC_ERR_INVALID_ARG);
  EXPECT_EQ(simpler_callable_release(fake_c), TC_ERR_INVALID_ARG);
  EXPECT_EQ(simpler_run_wait(fake_r, 0), TC_ERR_INVALID_ARG);
  EXPECT_EQ(simpler_run_done(fake_r), -1);
  EXPECT_EQ(simpler_run_release(fake_r), TC_ERR_INVALID_ARG);
  simpler_worker_config c = cpu_config();
  simpler_worker w;
  ASSERT_EQ(simpler_worker_create(&c, &w), TC_OK);
  ASSERT_EQ(simpler_worker_destroy(w), TC_OK);
  EXPECT_EQ(simpler_worker_close(w), TC_ERR_INVALID_ARG);  // destroyed: stale
}

TEST(RuntimeCapi, MemoryRoundTripAndBounds) {
  simpler_worker_config c = cpu_config();
  simpler_worker w;
  ASSERT_EQ(simpler_worker_create(&c, &w), TC_OK);
  uint64_t p = 0;
  EXPECT_EQ(simpler_malloc(w, 64, &p), TC_ERR_NOT_INITIALIZED);  // before init
  ASSERT_EQ(simpler_worker_init(w), TC_OK);
  EXPECT_EQ(simpler_worker_init(w), TC_ERR_ALREADY_INITIALIZED);
  ASSERT_EQ(simpler_malloc(w, 64, &p), TC_OK);
  EXPECT_EQ(simpler_malloc(w, 0, &p), TC_ERR_INVALID_ARG);
  float in[16], out[16];
  for (int i = 0; i < 16; i++) in[i] = float(i), out[i] = NAN;
  ASSERT_EQ(simpler_copy_to(w, p, in, sizeof in), TC_OK);
  ASSERT_EQ(simpler_copy_from(w, out, p + 8, 8 * 4), TC_OK);  // interior
  for (int i = 0; i < 8; i++) EXPECT_EQ(out[i], float(i + 2));
  EXPECT_EQ(simpler_copy_to(w, p + 60, in, 8), TC_ERR_INVALID_ARG);  // past the end
  EXPECT_NE(detail().find("runs past the end"), std::string::npos) << detail();
  EXPECT_EQ(simpler_copy_to(w, p, nullptr, 8), TC_ERR_INVALID_ARG);
  EXPECT_EQ(simpler_copy_from(w, out, 16, 4), TC_ERR_INVALID_ARG);  // not an allocation
  EXPECT_EQ(simpler_free(w, p + 4), TC_ERR_INVALID_ARG);
  EXPECT_EQ(simpler_free(w, p), TC_OK);
  EXPECT_EQ(simpler_free(w, p), TC_ERR_INVALID_ARG);
  simpler_worker_info info{};
  ASSERT_EQ(simpler_worker_get_info(w, &info), TC_OK);
  EXPECT_EQ(info.level, 2);
  EXPECT_STREQ(info.platform, "cpu");
  EXPECT_EQ(info.num_cores, 2);
  EXPECT_EQ(simpler_worker_close(w), TC_OK);
  EXPECT_EQ(simpler_worker_close(w), TC_OK);  // idempotent
  EXPECT_EQ(simpler_malloc(w, 64, &p), TC_ERR_NOT_INITIALIZED);
  EXPECT_EQ(simpler_worker_destroy(w), TC_OK);
}

TEST(RuntimeCapi, CallConfigValidation) {
  simpler_call_config c{};
  c.struct_size = sizeof c;
  EXPECT_EQ(simpler_call_config_validate(&c), TC_OK);
  EXPECT_EQ(simpler_call_config_validate(nullptr), TC_OK);  // defaults
  c.enable_dep_gen = 1;
  EXPECT_EQ(simpler_call_config_validate(&c), TC_ERR_INVALID_ARG);
  c.output_prefix = "/tmp/x";
  EXPECT_EQ(simpler_call_config_validate(&c), TC_OK);
  c.ring_task_window[2] = 12;
  EXPECT_EQ(simpler_call_config_validate(&c), TC_ERR_INVALID_ARG);
  EXPECT_NE(detail().find("ring_task_window[2] = 12"), std::string::npos) << detail();
  c.ring_task_window[2] = 16;
  c.ring_heap[0] = 512;
  EXPECT_EQ(simpler_call_config_validate(&c), TC_ERR_INVALID_ARG);
  c.ring_heap[0] = 0;
  c.struct_size = 3;
  EXPECT_EQ(simpler_call_config_validate(&c), TC_ERR_INVALID_ARG);
}

// A graph of built-in GEMMs through the C ABI alone: no compiler.
TEST(RuntimeCapi, BuiltinGraphWithoutACompiler) {
  simpler_worker_config c = cpu_config();
  simpler_worker w;
  ASSERT_EQ(simpler_worker_create(&c, &w), TC_OK);
  ASSERT_EQ(simpler_worker_init(w), TC_OK);
  simpler_callable gemm = nullptr;
  ASSERT_EQ(simpler_core_callable_builtin("gemm", "transpose_b=1", &gemm), TC_OK);
  EXPECT_EQ(simpler_core_callable_builtin("nope", "", &gemm), TC_ERR_KERNEL_NOT_FOUND);
  simpler_callable_info info{};
  ASSERT_EQ(simpler_callable_get_info(gemm, &info), TC_OK);
  EXPECT_EQ(info.builtin, 1);
  EXPECT_EQ(info.signature_len, 3u);
  // D = (A @ B^T) @ C^T, the intermediate allocated by the runtime.
  const uint32_t M = 8, K = 5, N = 6, P = 4;
  const char* desc =
      "simpler-task-list 1\n"
      "scope_begin 0\n"
      "task 0 1\n"
      "t 1 arg 0\n"
      "t 1 arg 1\n"
      "t 2 new 2 0 8 6\n"
      "task 0 1\n"
      "t 1 out 0 0\n"
      "t 1 arg 2\n"
      "t 2 arg 3\n"
      "scope_end\n";
  const int32_t sig[] = {SIMPLER_ARG_IN, SIMPLER_ARG_IN, SIMPLER_ARG_IN, SIMPLER_ARG_OUT};
  const int32_t ids[] = {0};
  simpler_callable chip = nullptr;
  ASSERT_EQ(simpler_chip_callable_from_tasks(sig, 4, desc, ids, &gemm, 1, &chip), TC_OK) << detail();
  EXPECT_EQ(simpler_chip_callable_from_tasks(sig, 4, "simpler-task-list 1\ntask 5 1\n", ids, &gemm, 1, &chip),
            TC_ERR_KERNEL_NOT_FOUND);
  EXPECT_EQ(simpler_chip_callable_from_tasks(sig, 4, "garbage", ids, &gemm, 1, &chip), TC_ERR_INVALID_ARG);
  int32_t slot = -1;
  ASSERT_EQ(simpler_register(w, chip, &slot), TC_OK);
  EXPECT_EQ(simpler_register(w, gemm, &slot), TC_ERR_INVALID_ARG);  // a core callable is not registrable
  std::mt19937 g(3);
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> A(M * K), B(N * K), C(P * N), D(M * P, NAN);
  for (std::vector<float>* v : {&A, &B, &C})
    for (float& x : *v) x = d(g);
  // Host tensors: passed directly on cpu.
  ChipTensor t[4] = {mat(uint64_t(A.data()), M, K), mat(uint64_t(B.data()), N, K), mat(uint64_t(C.data()), P, N),
                     mat(uint64_t(D.data()), M, P)};
  simpler_task_args args{t, 4, nullptr, 0};
  simpler_run run = nullptr;
  ASSERT_EQ(simpler_submit(w, slot, &args, nullptr, &run), TC_OK) << detail();
  ASSERT_EQ(simpler_run_wait(run, -1), TC_OK) << detail();
  EXPECT_EQ(simpler_run_done(run), 1);
  EXPECT_EQ(simpler_run_release(run), TC_OK);
  for (uint32_t i = 0; i < M; i++)
    for (uint32_t j = 0; j < P; j++) {
      double want = 0;
      for (uint32_t n = 0; n < N; n++) {
        double h = 0;
        for (uint32_t k = 0; k < K; k++) h += double(A[i * K + k]) * B[n * K + k];
        want += double(float(h)) * C[j * N + n];
      }
      EXPECT_NEAR(D[i * P + j], want, 1e-4 * (1 + std::fabs(want)));
    }
  // A wrong argument count is refused at submit.
  args.tensor_count = 3;
  EXPECT_EQ(simpler_submit(w, slot, &args, nullptr, &run), TC_ERR_INVALID_ARG);
  EXPECT_EQ(simpler_submit(w, 63, &args, nullptr, &run), TC_ERR_INVALID_ARG);  // empty slot
  EXPECT_EQ(simpler_unregister(w, slot), TC_OK);
  EXPECT_EQ(simpler_unregister(w, slot), TC_ERR_INVALID_ARG);
  EXPECT_EQ(simpler_callable_release(chip), TC_OK);
  EXPECT_EQ(simpler_callable_release(gemm), TC_OK);
  EXPECT_EQ(simpler_worker_destroy(w), TC_OK);
}

TEST(RuntimeCapi, CallableCreationIsChecked) {
  const int32_t sig[] = {SIMPLER_ARG_IN, 9};
  simpler_callable c = nullptr;
  EXPECT_EQ(simpler_core_callable_create(sig, 2, "x", 1, &c), TC_ERR_INVALID_ARG);
  EXPECT_EQ(simpler_core_callable_create(sig, 1, nullptr, 0, &c), TC_ERR_INVALID_ARG);
  EXPECT_EQ(simpler_core_callable_create(sig, 1, "x", 1, nullptr), TC_ERR_INVALID_ARG);
  ASSERT_EQ(simpler_core_callable_create(sig, 1, "\x7f" "ELF", 4, &c), TC_OK);
  simpler_callable chip = nullptr;
  const int32_t ids[] = {-1};
  EXPECT_EQ(simpler_chip_callable_create(sig, 1, "f", "", "bin", 3, ids, &c, 1, &chip), TC_ERR_INVALID_ARG);
  EXPECT_EQ(simpler_chip_callable_create(sig, 1, "", "", "bin", 3, nullptr, nullptr, 0, &chip), TC_ERR_INVALID_ARG);
  int32_t out[4];
  EXPECT_EQ(simpler_callable_get_signature(c, out, 0), TC_ERR_INVALID_ARG);
  ASSERT_EQ(simpler_callable_get_signature(c, out, 4), TC_OK);
  EXPECT_EQ(out[0], SIMPLER_ARG_IN);
  EXPECT_EQ(simpler_callable_release(c), TC_OK);
}
