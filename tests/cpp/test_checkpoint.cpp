// Activation checkpointing: discard frees a buffer's storage and keeps the
// handle, realize reallocates it and runs the recompute callback; every op on
// a discarded buffer fails clearly; pending stream work keeps the discarded
// bytes alive; the registry is safe under concurrent calls. On the CPU, and
// on CUDA where a GPU is present.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "memory_test_util.h"

using namespace memtest;

namespace {

// Recomputes C = A @ B (the "activation") into the realized buffer.
struct GemmRecompute {
  tc_context ctx = nullptr;
  tc_buffer A = nullptr, B = nullptr, C = nullptr;
  int64_t M = 0, N = 0, K = 0;
  std::atomic<int> calls{0};
  tc_status forced = TC_OK;  // returned instead of computing when set
};

tc_status recompute_gemm(void* p) {
  auto* r = static_cast<GemmRecompute*>(p);
  r->calls++;
  if (r->forced != TC_OK) return r->forced;
  tc_gemm_desc d = f32_desc(r->M, r->N, r->K);
  return tc_gemm(r->ctx, r->A, r->B, r->C, &d);
}

tc_status recompute_nothing(void*) { return TC_OK; }

// Bytes of the context's buffers in device memory.
uint64_t l0_bytes(tc_context ctx) {
  uint64_t resident = 0, capacity = 0;
  EXPECT_EQ(tc_memory_tier_usage(ctx, TC_TIER_L0_DEVICE, &resident, &capacity), TC_OK);
  return resident;
}

class Checkpoint : public ::testing::TestWithParam<std::string> {};

TEST_P(Checkpoint, DiscardRealizeRecomputesTheSameBytes) {
  Ctx c(GetParam());
  MEMTEST_REQUIRE_DEVICE(c);
  const int64_t M = 24, N = 40, K = 32;
  auto a = random_floats(size_t(M * K), 1), b = random_floats(size_t(K * N), 2);
  GemmRecompute r;
  r.ctx = c, r.M = M, r.N = N, r.K = K;
  r.A = alloc_with(c, a.data(), a.size() * 4);
  r.B = alloc_with(c, b.data(), b.size() * 4);
  ASSERT_EQ(tc_buffer_alloc(c, size_t(M * N) * 4, &r.C), TC_OK);
  ASSERT_EQ(recompute_gemm(&r), TC_OK);
  const auto before = read_all(r.C);
  const uint64_t base_bytes = tc_checkpoint_total_bytes_discarded();
  const uint64_t base_resident = tc_checkpoint_count_resident(), base_discarded = tc_checkpoint_count_discarded();

  tc_checkpoint_id id = 0;
  ASSERT_EQ(tc_checkpoint_register(r.C, recompute_gemm, &r, &id), TC_OK) << detail();
  EXPECT_NE(id, 0u);
  EXPECT_EQ(tc_checkpoint_is_resident(id), 1);
  EXPECT_EQ(tc_checkpoint_count_resident(), base_resident + 1);

  const uint64_t used = l0_bytes(c);
  ASSERT_EQ(tc_checkpoint_discard(id), TC_OK) << detail();
  EXPECT_EQ(tc_checkpoint_is_resident(id), 0);
  EXPECT_EQ(l0_bytes(c), used - uint64_t(M * N * 4));  // the storage is really freed
  EXPECT_EQ(tc_checkpoint_total_bytes_discarded(), base_bytes + uint64_t(M * N * 4));
  EXPECT_EQ(tc_checkpoint_count_discarded(), base_discarded + 1);
  EXPECT_EQ(tc_checkpoint_count_resident(), base_resident);
  size_t size = 0;
  EXPECT_EQ(tc_buffer_size(r.C, &size), TC_OK);  // the handle stays valid
  EXPECT_EQ(size, size_t(M * N * 4));
  EXPECT_EQ(tc_checkpoint_discard(id), TC_OK);  // discarding twice does nothing
  EXPECT_EQ(tc_checkpoint_count_discarded(), base_discarded + 1);

  ASSERT_EQ(tc_checkpoint_realize(id), TC_OK) << detail();
  EXPECT_EQ(r.calls.load(), 2);  // once above, once by realize
  EXPECT_EQ(tc_checkpoint_is_resident(id), 1);
  EXPECT_EQ(l0_bytes(c), used);
  EXPECT_EQ(read_all(r.C), before);  // bit for bit: same inputs, same kernel
  EXPECT_EQ(tc_checkpoint_realize(id), TC_OK);  // resident: the callback does not run again
  EXPECT_EQ(r.calls.load(), 2);
  EXPECT_EQ(tc_checkpoint_total_bytes_discarded(), base_bytes);

  ASSERT_EQ(tc_checkpoint_unregister(id), TC_OK);
  EXPECT_EQ(tc_checkpoint_is_resident(id), 0);
  EXPECT_EQ(tc_checkpoint_discard(id), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_checkpoint_count_resident(), base_resident);
  for (tc_buffer x : {r.A, r.B, r.C}) EXPECT_EQ(tc_buffer_free(x), TC_OK);
}

TEST_P(Checkpoint, EveryUseOfADiscardedBufferFailsAndLeavesOthersUntouched) {
  Ctx c(GetParam());
  MEMTEST_REQUIRE_DEVICE(c);
  auto a = random_floats(64, 3), b = random_floats(64, 4);
  tc_buffer A = alloc_with(c, a.data(), 256), B = alloc_with(c, b.data(), 256);
  std::vector<float> poison(64, -7.0f);
  tc_buffer C = alloc_with(c, poison.data(), 256);
  tc_checkpoint_id id;
  ASSERT_EQ(tc_checkpoint_register(A, recompute_nothing, nullptr, &id), TC_OK);
  ASSERT_EQ(tc_checkpoint_discard(id), TC_OK);

  tc_gemm_desc d = f32_desc(8, 8, 8);
  EXPECT_EQ(tc_gemm(c, A, B, C, &d), TC_ERR_INVALID_ARG);
  EXPECT_TRUE(contains(detail(), "discarded")) << detail();
  EXPECT_TRUE(contains(detail(), "buffer A")) << detail();
  EXPECT_TRUE(contains(detail(), "tc_checkpoint_realize")) << detail();
  EXPECT_EQ(tc_gemm(c, B, C, A, &d), TC_ERR_INVALID_ARG);  // as an output too
  tc_stream s;
  ASSERT_EQ(tc_stream_create(c, &s), TC_OK);
  EXPECT_EQ(tc_gemm_async(c, A, B, C, &d, s), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_stream_sync(s), TC_OK);
  std::vector<float> host(64);
  EXPECT_EQ(tc_buffer_read(A, 0, host.data(), 256), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_buffer_write(A, 0, host.data(), 256), TC_ERR_INVALID_ARG);
  void* p = nullptr;
  EXPECT_EQ(tc_buffer_map(A, &p), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_buffer_device_ptr(A, &p), TC_ERR_INVALID_ARG);
  tc_memory_tier tier;
  EXPECT_EQ(tc_buffer_get_tier(A, &tier), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_buffer_demote_async(A, TC_TIER_L1_HOST_RAM, nullptr), TC_ERR_INVALID_ARG);
  // Nothing else was touched.
  std::vector<float> out(64);
  ASSERT_EQ(tc_buffer_read(C, 0, out.data(), 256), TC_OK);
  EXPECT_EQ(out, poison);
  ASSERT_EQ(tc_buffer_read(B, 0, out.data(), 256), TC_OK);
  EXPECT_EQ(out, b);

  EXPECT_EQ(tc_stream_destroy(s), TC_OK);
  EXPECT_EQ(tc_buffer_free(A), TC_OK);  // freeing a registered, discarded buffer unregisters it
  EXPECT_EQ(tc_checkpoint_is_resident(id), 0);
  EXPECT_EQ(tc_checkpoint_realize(id), TC_ERR_INVALID_ARG);
  tc_buffer_free(B);
  tc_buffer_free(C);
}

TEST_P(Checkpoint, RegistrationErrors) {
  Ctx c(GetParam());
  MEMTEST_REQUIRE_DEVICE(c);
  tc_buffer A;
  ASSERT_EQ(tc_buffer_alloc(c, 128, &A), TC_OK);
  tc_checkpoint_id id = 0, id2 = 0;
  EXPECT_EQ(tc_checkpoint_register(nullptr, recompute_nothing, nullptr, &id), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_checkpoint_register(A, nullptr, nullptr, &id), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_checkpoint_register(A, recompute_nothing, nullptr, nullptr), TC_ERR_INVALID_ARG);
  ASSERT_EQ(tc_checkpoint_register(A, recompute_nothing, nullptr, &id), TC_OK);
  EXPECT_EQ(tc_checkpoint_register(A, recompute_nothing, nullptr, &id2), TC_ERR_INVALID_ARG);  // twice
  EXPECT_TRUE(contains(detail(), "already registered")) << detail();
  EXPECT_EQ(id2, 0u);
  // A buffer wrapping caller memory is not ours to free.
  if (GetParam() == "cpu") {
    std::vector<uint8_t> mem(64);
    tc_buffer W;
    ASSERT_EQ(tc_buffer_from_ptr(c, mem.data(), mem.size(), &W), TC_OK);
    EXPECT_EQ(tc_checkpoint_register(W, recompute_nothing, nullptr, &id2), TC_ERR_INVALID_ARG);
    EXPECT_TRUE(contains(detail(), "tc_buffer_from_ptr")) << detail();
    tc_buffer_free(W);
  }
  // Unknown ids.
  const tc_checkpoint_id bogus = ~uint64_t(0);
  EXPECT_EQ(tc_checkpoint_discard(bogus), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_checkpoint_realize(bogus), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_checkpoint_unregister(bogus), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_checkpoint_is_resident(bogus), 0);
  EXPECT_EQ(tc_checkpoint_is_resident(0), 0);
  // Unregistered while discarded: the buffer stays without storage; a new
  // registration starts discarded and can realize it.
  ASSERT_EQ(tc_checkpoint_discard(id), TC_OK);
  ASSERT_EQ(tc_checkpoint_unregister(id), TC_OK);
  uint8_t byte;
  EXPECT_EQ(tc_buffer_read(A, 0, &byte, 1), TC_ERR_INVALID_ARG);
  ASSERT_EQ(tc_checkpoint_register(A, recompute_nothing, nullptr, &id2), TC_OK);
  EXPECT_NE(id2, id);
  EXPECT_EQ(tc_checkpoint_is_resident(id2), 0);
  ASSERT_EQ(tc_checkpoint_realize(id2), TC_OK);
  EXPECT_EQ(tc_buffer_read(A, 0, &byte, 1), TC_OK);
  EXPECT_EQ(tc_buffer_free(A), TC_OK);
  EXPECT_EQ(tc_checkpoint_is_resident(id2), 0);
}

TEST_P(Checkpoint, FailingRecomputeLeavesTheBufferDiscarded) {
  Ctx c(GetParam());
  MEMTEST_REQUIRE_DEVICE(c);
  const int64_t M = 8, N = 8, K = 8;
  auto a = random_floats(64, 5), b = random_floats(64, 6);
  GemmRecompute r;
  r.ctx = c, r.M = M, r.N = N, r.K = K;
  r.A = alloc_with(c, a.data(), 256);
  r.B = alloc_with(c, b.data(), 256);
  ASSERT_EQ(tc_buffer_alloc(c, 256, &r.C), TC_OK);
  tc_checkpoint_id id;
  ASSERT_EQ(tc_checkpoint_register(r.C, recompute_gemm, &r, &id), TC_OK);
  ASSERT_EQ(tc_checkpoint_discard(id), TC_OK);
  const uint64_t used = l0_bytes(c);
  const uint64_t discarded = tc_checkpoint_count_discarded();
  r.forced = TC_ERR_DISPATCH;
  EXPECT_EQ(tc_checkpoint_realize(id), TC_ERR_DISPATCH);
  EXPECT_TRUE(contains(detail(), "recompute callback")) << detail();
  EXPECT_EQ(tc_checkpoint_is_resident(id), 0);
  EXPECT_EQ(l0_bytes(c), used);  // the storage allocated for it was freed again
  EXPECT_EQ(tc_checkpoint_count_discarded(), discarded);
  uint8_t byte;
  EXPECT_EQ(tc_buffer_read(r.C, 0, &byte, 1), TC_ERR_INVALID_ARG);
  r.forced = 5;  // not a status: reported as internal
  EXPECT_EQ(tc_checkpoint_realize(id), TC_ERR_INTERNAL);
  r.forced = TC_OK;
  ASSERT_EQ(tc_checkpoint_realize(id), TC_OK) << detail();
  std::vector<float> out(64);
  ASSERT_EQ(tc_buffer_read(r.C, 0, out.data(), 256), TC_OK);
  expect_near_all(out, ref_gemm(a, b, M, N, K), 1e-5);
  for (tc_buffer x : {r.A, r.B, r.C}) tc_buffer_free(x);
}

// A callback may use tensorcore, including other checkpoints, but not
// discard or realize its own one.
struct Chain {
  tc_checkpoint_id self = 0, other = 0;
  tc_status self_status = TC_OK, other_status = TC_ERR_INTERNAL;
};
tc_status recompute_chain(void* p) {
  auto* ch = static_cast<Chain*>(p);
  ch->self_status = tc_checkpoint_realize(ch->self);
  ch->other_status = tc_checkpoint_realize(ch->other);
  return TC_OK;
}

TEST_P(Checkpoint, CallbackMayRealizeOthersButNotItself) {
  Ctx c(GetParam());
  MEMTEST_REQUIRE_DEVICE(c);
  tc_buffer X, Y;
  ASSERT_EQ(tc_buffer_alloc(c, 64, &X), TC_OK);
  ASSERT_EQ(tc_buffer_alloc(c, 64, &Y), TC_OK);
  Chain ch;
  ASSERT_EQ(tc_checkpoint_register(X, recompute_chain, &ch, &ch.self), TC_OK);
  ASSERT_EQ(tc_checkpoint_register(Y, recompute_nothing, nullptr, &ch.other), TC_OK);
  ASSERT_EQ(tc_checkpoint_discard(ch.self), TC_OK);
  ASSERT_EQ(tc_checkpoint_discard(ch.other), TC_OK);
  ASSERT_EQ(tc_checkpoint_realize(ch.self), TC_OK);
  EXPECT_EQ(ch.self_status, TC_ERR_INVALID_ARG);
  EXPECT_EQ(ch.other_status, TC_OK);
  EXPECT_EQ(tc_checkpoint_is_resident(ch.self), 1);
  EXPECT_EQ(tc_checkpoint_is_resident(ch.other), 1);
  tc_buffer_free(X);
  tc_buffer_free(Y);
}

// Discarding a buffer that enqueued work still reads or writes must not free
// the bytes under that work: the op holds the old storage until it has run.
TEST_P(Checkpoint, PendingStreamWorkKeepsDiscardedStorageAlive) {
  Ctx c(GetParam());
  MEMTEST_REQUIRE_DEVICE(c);
  const int64_t M = 192, N = 192, K = 192;
  auto a = random_floats(size_t(M * K), 7), b = random_floats(size_t(K * N), 8);
  tc_buffer A = alloc_with(c, a.data(), a.size() * 4), B = alloc_with(c, b.data(), b.size() * 4), C;
  ASSERT_EQ(tc_buffer_alloc(c, size_t(M * N) * 4, &C), TC_OK);
  tc_checkpoint_id ida, idc;
  ASSERT_EQ(tc_checkpoint_register(A, recompute_nothing, nullptr, &ida), TC_OK);
  ASSERT_EQ(tc_checkpoint_register(C, recompute_nothing, nullptr, &idc), TC_OK);
  tc_stream s;
  ASSERT_EQ(tc_stream_create(c, &s), TC_OK);
  tc_gemm_desc d = f32_desc(M, N, K);
  for (int rep = 0; rep < 4; ++rep) ASSERT_EQ(tc_gemm_async(c, A, B, C, &d, s), TC_OK);
  ASSERT_EQ(tc_checkpoint_discard(ida), TC_OK);  // input of queued work
  ASSERT_EQ(tc_checkpoint_discard(idc), TC_OK);  // output of queued work
  EXPECT_EQ(tc_stream_sync(s), TC_OK) << detail();
  // The same work on fresh buffers is still right (nothing was corrupted).
  ASSERT_EQ(tc_checkpoint_realize(ida), TC_OK);
  ASSERT_EQ(tc_buffer_write(A, 0, a.data(), a.size() * 4), TC_OK);
  ASSERT_EQ(tc_checkpoint_realize(idc), TC_OK);
  ASSERT_EQ(tc_gemm_async(c, A, B, C, &d, s), TC_OK);
  ASSERT_EQ(tc_stream_sync(s), TC_OK);
  std::vector<float> out(size_t(M * N));
  ASSERT_EQ(tc_buffer_read(C, 0, out.data(), out.size() * 4), TC_OK);
  expect_near_all(out, ref_gemm(a, b, M, N, K), 1e-4);
  tc_stream_destroy(s);
  for (tc_buffer x : {A, B, C}) tc_buffer_free(x);
}

TEST_P(Checkpoint, DiscardFreesWhicheverTierHoldsTheBytes) {
  Ctx c(GetParam());
  MEMTEST_REQUIRE_DEVICE(c);
  auto bytes = random_bytes(4096, 9);
  tc_buffer X = alloc_with(c, bytes.data(), bytes.size());
  tc_checkpoint_id id;
  ASSERT_EQ(tc_checkpoint_register(X, recompute_nothing, nullptr, &id), TC_OK);
  ASSERT_EQ(tc_buffer_demote_async(X, TC_TIER_L1_HOST_RAM, nullptr), TC_OK) << detail();
  uint64_t l1_before = 0, l1_after = 0;
  ASSERT_EQ(tc_memory_tier_usage(c, TC_TIER_L1_HOST_RAM, &l1_before, nullptr), TC_OK);
  ASSERT_EQ(tc_checkpoint_discard(id), TC_OK);
  ASSERT_EQ(tc_memory_tier_usage(c, TC_TIER_L1_HOST_RAM, &l1_after, nullptr), TC_OK);
  EXPECT_EQ(l1_after + 4096, l1_before);
  ASSERT_EQ(tc_checkpoint_realize(id), TC_OK);  // always back into device memory
  tc_memory_tier tier = -1;
  ASSERT_EQ(tc_buffer_get_tier(X, &tier), TC_OK);
  EXPECT_EQ(tier, TC_TIER_L0_DEVICE);
  tc_buffer_free(X);
}

// Many threads: each works its own checkpoints, and all of them fight over a
// few shared ones. Counters and contents must end consistent.
struct Shared {
  tc_context ctx;
  tc_buffer buf;
  std::vector<uint8_t> pattern;
  std::atomic<int> calls{0};
};
tc_status refill(void* p) {
  auto* s = static_cast<Shared*>(p);
  s->calls++;
  return tc_buffer_write(s->buf, 0, s->pattern.data(), s->pattern.size());
}

TEST_P(Checkpoint, ConcurrentCallsFromManyThreads) {
  Ctx c(GetParam());
  MEMTEST_REQUIRE_DEVICE(c);
  const int kThreads = 6, kShared = 2, kIters = 300;
  const uint64_t base_resident = tc_checkpoint_count_resident(), base_discarded = tc_checkpoint_count_discarded();
  std::vector<std::unique_ptr<Shared>> shared;
  std::vector<tc_checkpoint_id> shared_ids;
  for (int i = 0; i < kShared; ++i) {
    auto s = std::make_unique<Shared>();
    s->ctx = c;
    s->pattern = random_bytes(1024, 100 + i);
    s->buf = alloc_with(c, s->pattern.data(), s->pattern.size());
    tc_checkpoint_id id;
    ASSERT_EQ(tc_checkpoint_register(s->buf, refill, s.get(), &id), TC_OK);
    shared_ids.push_back(id);
    shared.push_back(std::move(s));
  }
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Shared own;
      own.ctx = c;
      own.pattern = random_bytes(512, 200 + t);
      own.buf = alloc_with(c, own.pattern.data(), own.pattern.size());
      tc_checkpoint_id mine;
      if (tc_checkpoint_register(own.buf, refill, &own, &mine) != TC_OK) failures++;
      std::mt19937 rng(t);
      for (int i = 0; i < kIters; ++i) {
        tc_checkpoint_id id = shared_ids[rng() % kShared];
        switch (rng() % 4) {
          case 0: if (tc_checkpoint_discard(id) != TC_OK) failures++; break;
          case 1: if (tc_checkpoint_realize(id) != TC_OK) failures++; break;
          case 2: tc_checkpoint_is_resident(id); tc_checkpoint_count_resident(); break;
          default: tc_checkpoint_total_bytes_discarded(); break;
        }
        if (tc_checkpoint_discard(mine) != TC_OK) failures++;
        if (tc_checkpoint_realize(mine) != TC_OK) failures++;
        if (tc_checkpoint_is_resident(mine) != 1) failures++;
      }
      std::vector<uint8_t> back(own.pattern.size());
      if (tc_buffer_read(own.buf, 0, back.data(), back.size()) != TC_OK || back != own.pattern) failures++;
      if (own.calls.load() != kIters) failures++;
      if (tc_checkpoint_unregister(mine) != TC_OK) failures++;
      tc_buffer_free(own.buf);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  for (int i = 0; i < kShared; ++i) {
    ASSERT_EQ(tc_checkpoint_realize(shared_ids[i]), TC_OK);
    EXPECT_EQ(read_all(shared[i]->buf), shared[i]->pattern);
  }
  EXPECT_EQ(tc_checkpoint_count_resident(), base_resident + kShared);
  EXPECT_EQ(tc_checkpoint_count_discarded(), base_discarded);
  for (auto& s : shared) tc_buffer_free(s->buf);
  EXPECT_EQ(tc_checkpoint_count_resident(), base_resident);
}

INSTANTIATE_TEST_SUITE_P(Devices, Checkpoint, ::testing::ValuesIn(all_devices()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
