// DiLoCo's asynchronous round under concurrency: the caller keeps training
// (writing theta) while the worker thread exchanges and updates, on a world
// of one and on two gloo ranks in one process. Run under ThreadSanitizer
// (a build with -fsanitize=thread) this is the proof that nothing races
// with the caller's parameters; without it, it checks the arithmetic.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "tensorcore/tensorcore.h"

namespace {

struct Rank {
  tc_context ctx = nullptr;
  tc_dist dist = nullptr;
  tc_diloco diloco = nullptr;
  tc_buffer theta = nullptr;
  float* p = nullptr;
};

tc_diloco_config async_config(int32_t compress) {
  tc_diloco_config c{};
  c.inner_steps = 4;
  c.outer_lr = 0.7f;
  c.outer_momentum = 0.9f;
  c.outer_beta2 = 0.999f;
  c.outer_eps = 1e-8f;
  c.outer_optimizer = TC_DILOCO_OUTER_NESTEROV;
  c.compress = compress;
  c.async_overlap = 1;
  return c;
}

// Trains `rounds` outer rounds of 4 inner steps; inner steps keep writing
// theta while the previous round is in flight (apply_outer commits it).
void train(Rank& r, int rank, int rounds, size_t n) {
  std::mt19937 gen(1234 + rank);
  std::normal_distribution<float> normal(0.f, 0.01f);
  for (int outer = 0; outer < rounds; ++outer) {
    for (int s = 0; s < 4; ++s) {
      for (size_t i = 0; i < n; ++i) r.p[i] -= normal(gen);  // the "optimizer step"
      int32_t due = 0;
      ASSERT_EQ(tc_diloco_step(r.diloco, &due), TC_OK);
      int32_t state = 0, ws = 0;
      uint64_t rid = 0;
      ASSERT_EQ(tc_diloco_async_poll(r.diloco, &state, &ws, &rid), TC_OK);  // polled while the worker runs
      if (due) ASSERT_EQ(tc_diloco_apply_outer(r.diloco), TC_OK) << tc_last_error_detail();
    }
  }
  ASSERT_EQ(tc_diloco_async_wait(r.diloco), TC_OK) << tc_last_error_detail();
  ASSERT_EQ(tc_diloco_async_commit(r.diloco), TC_OK);
  uint64_t outer = 0;
  ASSERT_EQ(tc_diloco_outer_steps_completed(r.diloco, &outer), TC_OK);
  EXPECT_EQ(outer, uint64_t(rounds));
}

void open_rank(Rank& r, int32_t backend, int world, int rank, const std::string& url, int32_t compress, size_t n) {
  ASSERT_EQ(tc_init_device("cpu", &r.ctx), TC_OK);
  ASSERT_EQ(tc_dist_init(r.ctx, backend, world, rank, url.c_str(), &r.dist), TC_OK) << tc_last_error_detail();
  tc_diloco_config c = async_config(compress);
  ASSERT_EQ(tc_diloco_init(r.dist, &c, &r.diloco), TC_OK) << tc_last_error_detail();
  ASSERT_EQ(tc_buffer_alloc(r.ctx, n * 4, &r.theta), TC_OK);
  void* p = nullptr;
  ASSERT_EQ(tc_buffer_map(r.theta, &p), TC_OK);
  r.p = static_cast<float*>(p);
  for (size_t i = 0; i < n; ++i) r.p[i] = float(rank + 1) * std::sin(float(i));
  ASSERT_EQ(tc_diloco_add_parameter(r.diloco, "theta", r.theta, n, TC_DTYPE_F32), TC_OK) << tc_last_error_detail();
}

void close_rank(Rank& r) {
  EXPECT_EQ(tc_diloco_finalize(r.diloco), TC_OK);
  EXPECT_EQ(tc_dist_finalize(r.dist), TC_OK);
  EXPECT_EQ(tc_buffer_free(r.theta), TC_OK);
  EXPECT_EQ(tc_shutdown(r.ctx), TC_OK);
}

}  // namespace

TEST(DilocoAsync, SingleRankTrainingOverlapsTheRound) {
  const size_t n = 4096;
  Rank r;
  open_rank(r, TC_DIST_SINGLE, 1, 0, "single://t", TC_DILOCO_COMPRESS_TOPK_1PCT, n);
  train(r, 0, 6, n);
  for (size_t i = 0; i < n; ++i) ASSERT_TRUE(std::isfinite(r.p[i]));
  close_rank(r);
}

TEST(DilocoAsync, TwoGlooRanksInOneProcess) {
  tc_context probe = nullptr;
  ASSERT_EQ(tc_init_device("cpu", &probe), TC_OK);
  struct tc_runtime_capabilities caps {};
  caps.struct_size = sizeof caps;
  ASSERT_EQ(tc_runtime_capabilities(probe, &caps), TC_OK);
  tc_shutdown(probe);
  if (!tc_capability_available(&caps, TC_CAPABILITY_DIST_GLOO)) GTEST_SKIP() << "gloo not built";
  const size_t n = 2048;
  const std::string url = "gloo+tcp://127.0.0.1:" + std::to_string(29000 + (getpid() % 2000)) + "?timeout_ms=30000";
  for (int32_t compress : {TC_DILOCO_COMPRESS_NONE, TC_DILOCO_COMPRESS_FP16, TC_DILOCO_COMPRESS_TOPK_1PCT}) {
    Rank ranks[2];
    std::thread t1([&] { open_rank(ranks[1], TC_DIST_GLOO, 2, 1, url, compress, n); });
    open_rank(ranks[0], TC_DIST_GLOO, 2, 0, url, compress, n);
    t1.join();
    std::thread u1([&] { train(ranks[1], 1, 5, n); });
    train(ranks[0], 0, 5, n);
    u1.join();
    // After the final commit with no progress since, theta is the anchor,
    // identical on both ranks.
    EXPECT_EQ(std::memcmp(ranks[0].p, ranks[1].p, n * 4), 0) << "compress " << compress;
    std::thread c1([&] { close_rank(ranks[1]); });
    close_rank(ranks[0]);
    c1.join();
  }
}

TEST(DistApi, NullAndStaleHandlesAreRefused) {
  int32_t v = 0;
  EXPECT_EQ(tc_dist_world_size(nullptr, &v), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_allreduce(reinterpret_cast<tc_dist>(0x1000), nullptr, 1, TC_DTYPE_F32, 0), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_diloco_apply_outer(nullptr), TC_ERR_INVALID_ARG);
  struct tc_diloco_capabilities caps {};
  caps.struct_size = sizeof caps;
  EXPECT_EQ(tc_diloco_capability_query(nullptr, TC_DILOCO_CAPABILITIES_ABI_VERSION_1, &caps), TC_OK);
  EXPECT_EQ(caps.state_abi_version_current, 2u);
  EXPECT_EQ(tc_diloco_capability_query(nullptr, 99, &caps), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_remote_shutdown(nullptr), TC_ERR_INVALID_ARG);
}
