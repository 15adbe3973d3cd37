// Memory tiers: bytes survive every move bit for bit (L0/L1/L3 in every order,
// synchronously and on streams), usage numbers are true, ops refuse buffers
// outside L0, budgets demote COLD/ICE buffers, and a full disk or an
// unwritable spill directory is TC_ERR_IO with the bytes left where they
// were. On the CPU, and on CUDA where a GPU is present.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

#include "memory_test_util.h"

using namespace memtest;
namespace fs = std::filesystem;
extern char** environ;

namespace {

constexpr tc_memory_tier L0 = TC_TIER_L0_DEVICE, L1 = TC_TIER_L1_HOST_RAM, L3 = TC_TIER_L3_LOCAL_NVME;

std::string safe_name(const std::string& s) {
  std::string out = s;
  for (char& ch : out)
    if (ch == '/') ch = '_';
  return out;
}

tc_memory_tier tier_of(tc_buffer b) {
  tc_memory_tier t = -1;
  EXPECT_EQ(tc_buffer_get_tier(b, &t), TC_OK) << detail();
  return t;
}

uint64_t resident(tc_context ctx, tc_memory_tier tier) {
  uint64_t r = 0;
  EXPECT_EQ(tc_memory_tier_usage(ctx, tier, &r, nullptr), TC_OK) << detail();
  return r;
}

tc_status go(tc_buffer b, tc_memory_tier from, tc_memory_tier to, tc_stream s) {
  return to < from ? tc_buffer_promote_async(b, to, s) : tc_buffer_demote_async(b, to, s);
}

// Each test spills into a private directory, removed at the end.
class Tiers : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_path = (fs::temp_directory_path() /
                ("tc-tiers-test-" + std::to_string(::getpid()) + "-" +
                 safe_name(::testing::UnitTest::GetInstance()->current_test_info()->name())))
                   .string();
    fs::remove_all(dir_path);
  }
  void TearDown() override { fs::remove_all(dir_path); }
  void use_dir(tc_context ctx) { ASSERT_EQ(tc_context_set_spill_dir(ctx, dir_path.c_str()), TC_OK); }
  size_t spill_files() const {
    if (!fs::exists(dir_path)) return 0;
    size_t n = 0;
    for (auto& e : fs::directory_iterator(dir_path)) n += e.is_regular_file();
    return n;
  }
  std::string dir_path;
};

TEST_P(Tiers, BytesSurviveEveryPathBitForBit) {
  Ctx c(GetParam());
  MEMTEST_REQUIRE_DEVICE(c);
  use_dir(c);
  const std::vector<std::vector<tc_memory_tier>> paths = {
      {L0, L1, L3, L0}, {L0, L3, L1, L0}, {L0, L3, L0}, {L0, L1, L0}, {L0, L1, L3, L1, L3, L0}};
  tc_stream s;
  ASSERT_EQ(tc_stream_create(c, &s), TC_OK);
  uint32_t seed = 10;
  for (bool async : {false, true})
    for (size_t n : {size_t(1), size_t(4099), size_t(3) << 20})
      for (const auto& path : paths) {
        SCOPED_TRACE("async=" + std::to_string(async) + " n=" + std::to_string(n) + " path#" +
                     std::to_string(&path - &paths[0]));
        auto bytes = random_bytes(n, seed++);
        tc_buffer b = alloc_with(c, bytes.data(), n);
        for (size_t i = 1; i < path.size(); ++i) {
          ASSERT_EQ(go(b, path[i - 1], path[i], async ? s : nullptr), TC_OK) << detail();
          if (async) ASSERT_EQ(tc_buffer_tier_sync(b), TC_OK) << detail();
          EXPECT_EQ(tier_of(b), path[i]);
          if (path[i] == L3) EXPECT_EQ(spill_files(), 1u);
        }
        EXPECT_EQ(spill_files(), 0u);  // back in L0: the spill file is gone
        EXPECT_EQ(read_all(b), bytes);
        EXPECT_EQ(tc_buffer_free(b), TC_OK);
      }
  EXPECT_EQ(tc_stream_destroy(s), TC_OK);
}

TEST_P(Tiers, UsageCountsEveryTierTruly) {
  Ctx c(GetParam());
  MEMTEST_REQUIRE_DEVICE(c);
  use_dir(c);
  struct tc_device_info info;
  ASSERT_EQ(tc_device_info(c, &info), TC_OK);
  uint64_t r0 = 0, cap0 = 0, r1 = 0, cap1 = 0, r3 = 0, cap3 = 0;
  ASSERT_EQ(tc_memory_tier_usage(c, L0, &r0, &cap0), TC_OK);
  ASSERT_EQ(tc_memory_tier_usage(c, L1, &r1, &cap1), TC_OK);
  ASSERT_EQ(tc_memory_tier_usage(c, L3, &r3, &cap3), TC_OK);
  EXPECT_EQ(r0, 0u);
  EXPECT_EQ(r1, 0u);
  EXPECT_EQ(r3, 0u);
  EXPECT_EQ(cap0, info.memory_bytes);
  EXPECT_EQ(cap1, uint64_t(sysconf(_SC_PHYS_PAGES)) * uint64_t(sysconf(_SC_PAGESIZE)));
  EXPECT_GT(cap3, 0u);
  EXPECT_EQ(tc_memory_tier_usage(c, L0, nullptr, nullptr), TC_OK);

  tc_buffer a, b;
  ASSERT_EQ(tc_buffer_alloc(c, 1000, &a), TC_OK);
  ASSERT_EQ(tc_buffer_alloc(c, 5000, &b), TC_OK);
  EXPECT_EQ(resident(c, L0), 6000u);
  ASSERT_EQ(tc_buffer_demote_async(a, L1, nullptr), TC_OK);
  EXPECT_EQ(resident(c, L0), 5000u);
  EXPECT_EQ(resident(c, L1), 1000u);
  ASSERT_EQ(tc_buffer_demote_async(b, L3, nullptr), TC_OK);
  EXPECT_EQ(resident(c, L0), 0u);
  EXPECT_EQ(resident(c, L3), 5000u);
  EXPECT_EQ(fs::file_size(fs::directory_iterator(dir_path)->path()), 5000u);
  EXPECT_EQ(tc_buffer_free(b), TC_OK);  // the spill file goes with the buffer
  EXPECT_EQ(resident(c, L3), 0u);
  EXPECT_EQ(spill_files(), 0u);
  // A budget caps the reported capacity.
  ASSERT_EQ(tc_context_set_memory_budget(c, 12345), TC_OK);
  ASSERT_EQ(tc_context_set_host_memory_budget(c, 777), TC_OK);
  ASSERT_EQ(tc_memory_tier_usage(c, L0, nullptr, &cap0), TC_OK);
  ASSERT_EQ(tc_memory_tier_usage(c, L1, nullptr, &cap1), TC_OK);
  EXPECT_EQ(cap0, 12345u);
  EXPECT_EQ(cap1, 777u);
  EXPECT_EQ(tc_buffer_free(a), TC_OK);
  EXPECT_EQ(resident(c, L1), 0u);
}

TEST_P(Tiers, OpsRefuseBuffersOutsideL0) {
  Ctx c(GetParam());
  MEMTEST_REQUIRE_DEVICE(c);
  use_dir(c);
  auto a = random_floats(64, 1), b = random_floats(64, 2);
  std::vector<float> poison(64, -3.0f);
  tc_buffer A = alloc_with(c, a.data(), 256), B = alloc_with(c, b.data(), 256), C = alloc_with(c, poison.data(), 256);
  tc_gemm_desc d = f32_desc(8, 8, 8);
  for (tc_memory_tier t : {L1, L3}) {
    ASSERT_EQ(tc_buffer_demote_async(B, t, nullptr), TC_OK) << detail();
    EXPECT_EQ(tc_gemm(c, A, B, C, &d), TC_ERR_INVALID_ARG);
    EXPECT_TRUE(contains(detail(), "buffer B is in tier")) << detail();
    EXPECT_TRUE(contains(detail(), "promote")) << detail();
    std::vector<float> out(64);
    EXPECT_EQ(tc_buffer_read(B, 0, out.data(), 256), TC_ERR_INVALID_ARG);
    EXPECT_EQ(tc_buffer_write(B, 0, out.data(), 256), TC_ERR_INVALID_ARG);
    void* p;
    EXPECT_EQ(tc_buffer_map(B, &p), TC_ERR_INVALID_ARG);
    ASSERT_EQ(tc_buffer_read(C, 0, out.data(), 256), TC_OK);
    EXPECT_EQ(out, poison);  // nothing ran
  }
  ASSERT_EQ(tc_buffer_promote_async(B, L0, nullptr), TC_OK);
  ASSERT_EQ(tc_gemm(c, A, B, C, &d), TC_OK) << detail();
  std::vector<float> out(64);
  ASSERT_EQ(tc_buffer_read(C, 0, out.data(), 256), TC_OK);
  expect_near_all(out, ref_gemm(a, b, 8, 8, 8), 1e-5);
  for (tc_buffer x : {A, B, C}) tc_buffer_free(x);
}

TEST_P(Tiers, ArgumentErrors) {
  Ctx c(GetParam());
  MEMTEST_REQUIRE_DEVICE(c);
  use_dir(c);
  tc_buffer b;
  ASSERT_EQ(tc_buffer_alloc(c, 64, &b), TC_OK);
  for (tc_memory_tier bad : {-1, 5, 1000}) {
    EXPECT_EQ(tc_buffer_promote_async(b, bad, nullptr), TC_ERR_INVALID_ARG);
    EXPECT_EQ(tc_buffer_demote_async(b, bad, nullptr), TC_ERR_INVALID_ARG);
    EXPECT_EQ(tc_memory_tier_usage(c, bad, nullptr, nullptr), TC_ERR_INVALID_ARG);
  }
  for (tc_memory_tier remote : {TC_TIER_L2_REMOTE_RAM, TC_TIER_L4_REMOTE_NVME}) {
    EXPECT_EQ(tc_buffer_demote_async(b, remote, nullptr), TC_ERR_UNSUPPORTED);
    EXPECT_TRUE(contains(detail(), "remote")) << detail();
    EXPECT_EQ(tc_buffer_promote_async(b, remote, nullptr), TC_ERR_UNSUPPORTED);
    EXPECT_EQ(tc_memory_tier_usage(c, remote, nullptr, nullptr), TC_ERR_UNSUPPORTED);
  }
  // Same tier: nothing to do, either direction.
  EXPECT_EQ(tc_buffer_promote_async(b, L0, nullptr), TC_OK);
  EXPECT_EQ(tc_buffer_demote_async(b, L0, nullptr), TC_OK);
  EXPECT_EQ(tc_buffer_tier_sync(b), TC_OK);
  // Wrong direction.
  EXPECT_EQ(tc_buffer_promote_async(b, L1, nullptr), TC_ERR_INVALID_ARG);
  EXPECT_TRUE(contains(detail(), "demote")) << detail();
  ASSERT_EQ(tc_buffer_demote_async(b, L3, nullptr), TC_OK);
  EXPECT_EQ(tc_buffer_demote_async(b, L1, nullptr), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tier_of(b), L3);
  // Hints.
  EXPECT_EQ(tc_buffer_set_tier_hint(b, TC_TIER_HINT_ICE), TC_OK);
  EXPECT_EQ(tc_buffer_set_tier_hint(b, 4), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_buffer_set_tier_hint(b, -1), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_buffer_set_tier_hint(nullptr, 0), TC_ERR_INVALID_ARG);
  // Null handles and outputs.
  EXPECT_EQ(tc_buffer_get_tier(b, nullptr), TC_ERR_INVALID_ARG);
  tc_memory_tier t;
  EXPECT_EQ(tc_buffer_get_tier(nullptr, &t), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_buffer_promote_async(nullptr, L0, nullptr), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_buffer_tier_sync(nullptr), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_memory_tier_usage(nullptr, L0, nullptr, nullptr), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_context_set_memory_budget(nullptr, 1), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_context_set_host_memory_budget(nullptr, 1), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_context_set_spill_dir(nullptr, "/tmp"), TC_ERR_INVALID_ARG);
  // A stream of another context.
  Ctx other("cpu");
  tc_stream s;
  ASSERT_EQ(tc_stream_create(other, &s), TC_OK);
  EXPECT_EQ(tc_buffer_promote_async(b, L0, s), TC_ERR_INVALID_ARG);
  EXPECT_TRUE(contains(detail(), "another context")) << detail();
  EXPECT_EQ(tier_of(b), L3);
  tc_stream_destroy(s);
  // Caller memory does not move.
  if (GetParam() == "cpu") {
    std::vector<uint8_t> mem(64);
    tc_buffer w;
    ASSERT_EQ(tc_buffer_from_ptr(c, mem.data(), mem.size(), &w), TC_OK);
    EXPECT_EQ(tc_buffer_demote_async(w, L1, nullptr), TC_ERR_INVALID_ARG);
    EXPECT_TRUE(contains(detail(), "caller memory")) << detail();
    EXPECT_EQ(tier_of(w), L0);
    tc_buffer_free(w);
  }
  tc_buffer_free(b);
}

// Stream order: a move enqueued after an op sees the op's result; an op on a
// buffer whose move is in flight waits for it.
TEST_P(Tiers, MovesAreOrderedWithStreamWork) {
  Ctx c(GetParam());
  MEMTEST_REQUIRE_DEVICE(c);
  use_dir(c);
  const int64_t M = 160, N = 160, K = 160;
  auto a = random_floats(size_t(M * K), 3), b = random_floats(size_t(K * N), 4);
  const auto ref = ref_gemm(a, b, M, N, K);
  tc_buffer A = alloc_with(c, a.data(), a.size() * 4), B = alloc_with(c, b.data(), b.size() * 4), C;
  ASSERT_EQ(tc_buffer_alloc(c, size_t(M * N) * 4, &C), TC_OK);
  tc_stream s;
  ASSERT_EQ(tc_stream_create(c, &s), TC_OK);
  tc_gemm_desc d = f32_desc(M, N, K);
  ASSERT_EQ(tc_gemm_async(c, A, B, C, &d, s), TC_OK);
  ASSERT_EQ(tc_buffer_demote_async(C, L1, s), TC_OK);
  ASSERT_EQ(tc_buffer_demote_async(C, L3, s), TC_OK);  // waits for the first move, then queues
  ASSERT_EQ(tc_buffer_promote_async(C, L0, s), TC_OK);
  ASSERT_EQ(tc_stream_sync(s), TC_OK) << detail();
  ASSERT_EQ(tc_buffer_tier_sync(C), TC_OK) << detail();
  std::vector<float> out(size_t(M * N));
  ASSERT_EQ(tc_buffer_read(C, 0, out.data(), out.size() * 4), TC_OK);
  expect_near_all(out, ref, 1e-4);

  // An input promoted on the stream is used by a synchronous op right away.
  ASSERT_EQ(tc_buffer_demote_async(A, L3, nullptr), TC_OK);
  ASSERT_EQ(tc_buffer_promote_async(A, L0, s), TC_OK);
  ASSERT_EQ(tc_gemm(c, A, B, C, &d), TC_OK) << detail();
  ASSERT_EQ(tc_buffer_read(C, 0, out.data(), out.size() * 4), TC_OK);
  expect_near_all(out, ref, 1e-4);
  // A demote in flight: the op waits, then refuses the buffer.
  ASSERT_EQ(tc_buffer_demote_async(A, L1, s), TC_OK);
  EXPECT_EQ(tc_gemm(c, A, B, C, &d), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tier_of(A), L1);
  tc_stream_destroy(s);
  for (tc_buffer x : {A, B, C}) tc_buffer_free(x);
}

TEST_P(Tiers, FreeingABufferWithAMoveInFlight) {
  Ctx c(GetParam());
  MEMTEST_REQUIRE_DEVICE(c);
  use_dir(c);
  tc_stream s;
  ASSERT_EQ(tc_stream_create(c, &s), TC_OK);
  auto bytes = random_bytes(1 << 20, 5);
  for (int i = 0; i < 8; ++i) {
    tc_buffer b = alloc_with(c, bytes.data(), bytes.size());
    ASSERT_EQ(tc_buffer_demote_async(b, L3, s), TC_OK);
    ASSERT_EQ(tc_buffer_free(b), TC_OK);
  }
  ASSERT_EQ(tc_stream_sync(s), TC_OK);
  tc_stream_destroy(s);
  EXPECT_EQ(resident(c, L0), 0u);
  EXPECT_EQ(resident(c, L3), 0u);
  EXPECT_EQ(spill_files(), 0u);
}

TEST_P(Tiers, BudgetDemotesIceThenColdAndNeverHotOrWarm) {
  Ctx c(GetParam());
  MEMTEST_REQUIRE_DEVICE(c);
  use_dir(c);
  const size_t unit = 64 << 10;
  ASSERT_EQ(tc_context_set_memory_budget(c, 3 * unit), TC_OK);
  std::vector<std::vector<uint8_t>> data;
  std::vector<tc_buffer> bufs;
  auto make = [&](tc_tier_hint hint) {
    data.push_back(random_bytes(unit, 40 + uint32_t(data.size())));
    tc_buffer b = nullptr;
    EXPECT_EQ(tc_buffer_alloc(c, unit, &b), TC_OK) << detail();
    if (!b) return b;
    EXPECT_EQ(tc_buffer_write(b, 0, data.back().data(), unit), TC_OK);
    EXPECT_EQ(tc_buffer_set_tier_hint(b, hint), TC_OK);
    bufs.push_back(b);
    return b;
  };
  tc_buffer cold = make(TC_TIER_HINT_COLD), ice = make(TC_TIER_HINT_ICE), hot = make(TC_TIER_HINT_HOT);
  EXPECT_EQ(resident(c, L0), 3 * unit);
  tc_buffer d = make(TC_TIER_HINT_WARM);  // over budget: ICE goes first although COLD is older
  EXPECT_EQ(tier_of(ice), L1);
  EXPECT_EQ(tier_of(cold), L0);
  tc_buffer e = make(TC_TIER_HINT_WARM);  // then COLD
  EXPECT_EQ(tier_of(cold), L1);
  EXPECT_EQ(resident(c, L0), 3 * unit);
  tc_buffer f = nullptr;
  EXPECT_EQ(tc_buffer_alloc(c, unit, &f), TC_ERR_ALLOC);  // only HOT and WARM left
  EXPECT_TRUE(contains(detail(), "budget")) << detail();
  EXPECT_EQ(f, nullptr);
  EXPECT_EQ(tier_of(hot), L0);
  EXPECT_EQ(tier_of(d), L0);
  EXPECT_EQ(tier_of(e), L0);
  EXPECT_EQ(tc_buffer_alloc(c, 4 * unit, &f), TC_ERR_ALLOC);  // beyond the budget itself
  // Promoting a demoted buffer also respects the budget: freeing makes room.
  EXPECT_EQ(tc_buffer_promote_async(ice, L0, nullptr), TC_ERR_ALLOC);
  EXPECT_EQ(tier_of(ice), L1);
  ASSERT_EQ(tc_buffer_free(e), TC_OK);
  bufs.erase(std::find(bufs.begin(), bufs.end(), e));
  ASSERT_EQ(tc_buffer_promote_async(ice, L0, nullptr), TC_OK) << detail();
  // Promoting COLD now would demote the idle ICE buffer again; once that one
  // is marked WARM, nothing can make room.
  ASSERT_EQ(tc_buffer_set_tier_hint(ice, TC_TIER_HINT_WARM), TC_OK);
  ASSERT_EQ(tc_buffer_promote_async(cold, L0, nullptr), TC_ERR_ALLOC);
  EXPECT_EQ(tier_of(cold), L1);
  EXPECT_EQ(tier_of(ice), L0);
  // Raising the budget lets everything back; every byte survived.
  ASSERT_EQ(tc_context_set_memory_budget(c, 0), TC_OK);
  ASSERT_EQ(tc_buffer_promote_async(cold, L0, nullptr), TC_OK);
  EXPECT_EQ(read_all(cold), data[0]);
  EXPECT_EQ(read_all(ice), data[1]);
  EXPECT_EQ(read_all(hot), data[2]);
  EXPECT_EQ(read_all(d), data[3]);
  for (tc_buffer b : bufs) tc_buffer_free(b);
}

TEST_P(Tiers, HostBudgetSendsDemotionsOnToDisk) {
  Ctx c(GetParam());
  MEMTEST_REQUIRE_DEVICE(c);
  use_dir(c);
  const size_t unit = 32 << 10;
  ASSERT_EQ(tc_context_set_memory_budget(c, 2 * unit), TC_OK);
  ASSERT_EQ(tc_context_set_host_memory_budget(c, unit), TC_OK);
  auto da = random_bytes(unit, 50), db = random_bytes(unit, 51);
  tc_buffer a = alloc_with(c, da.data(), unit), b = alloc_with(c, db.data(), unit), x, y;
  ASSERT_EQ(tc_buffer_set_tier_hint(a, TC_TIER_HINT_COLD), TC_OK);
  ASSERT_EQ(tc_buffer_set_tier_hint(b, TC_TIER_HINT_COLD), TC_OK);
  ASSERT_EQ(tc_buffer_alloc(c, unit, &x), TC_OK) << detail();
  EXPECT_EQ(tier_of(a), L1);
  ASSERT_EQ(tc_buffer_alloc(c, unit, &y), TC_OK) << detail();
  EXPECT_EQ(tier_of(a), L3);  // host RAM over its budget: the COLD L1 buffer went to disk
  EXPECT_EQ(tier_of(b), L1);
  EXPECT_EQ(resident(c, L1), unit);
  EXPECT_EQ(resident(c, L3), unit);
  EXPECT_EQ(spill_files(), 1u);
  // An explicit move into L1 is held to the host budget too.
  ASSERT_EQ(tc_buffer_set_tier_hint(b, TC_TIER_HINT_HOT), TC_OK);
  EXPECT_EQ(tc_buffer_promote_async(a, L1, nullptr), TC_ERR_ALLOC);
  EXPECT_EQ(tier_of(a), L3);
  ASSERT_EQ(tc_context_set_memory_budget(c, 0), TC_OK);
  ASSERT_EQ(tc_context_set_host_memory_budget(c, 0), TC_OK);
  ASSERT_EQ(tc_buffer_promote_async(a, L0, nullptr), TC_OK);
  ASSERT_EQ(tc_buffer_promote_async(b, L0, nullptr), TC_OK);
  EXPECT_EQ(read_all(a), da);
  EXPECT_EQ(read_all(b), db);
  for (tc_buffer z : {a, b, x, y}) tc_buffer_free(z);
}

TEST_P(Tiers, UnwritableSpillDirectoryIsAnIoErrorAndKeepsTheBytes) {
  Ctx c(GetParam());
  MEMTEST_REQUIRE_DEVICE(c);
  // A regular file where the directory should be, and a directory under a
  // regular file: neither can hold spill files, even for root. A directory
  // without write permission is tried too where permissions apply.
  std::string file_path = dir_path + ".file";
  { std::ofstream(file_path) << "x"; }
  std::vector<std::string> bad = {file_path, file_path + "/sub"};
  if (::geteuid() != 0) {
    fs::create_directories(dir_path + "/ro");
    fs::permissions(dir_path + "/ro", fs::perms::owner_read | fs::perms::owner_exec);
    bad.push_back(dir_path + "/ro");
  }
  auto bytes = random_bytes(10000, 60);
  tc_buffer b = alloc_with(c, bytes.data(), bytes.size());
  tc_stream s;
  ASSERT_EQ(tc_stream_create(c, &s), TC_OK);
  for (const std::string& dir : bad) {
    SCOPED_TRACE(dir);
    ASSERT_EQ(tc_context_set_spill_dir(c, dir.c_str()), TC_OK);
    EXPECT_EQ(tc_buffer_demote_async(b, L3, nullptr), TC_ERR_IO);
    EXPECT_TRUE(contains(detail(), dir)) << detail();
    EXPECT_EQ(tier_of(b), L0);
    EXPECT_EQ(read_all(b), bytes);
    // Asynchronously: reported now or at tier_sync; the bytes stay either way.
    tc_status st = tc_buffer_demote_async(b, L3, s);
    if (st == TC_OK) st = tc_buffer_tier_sync(b);
    EXPECT_EQ(st, TC_ERR_IO);
    EXPECT_EQ(tier_of(b), L0);
    // From L1 as well.
    ASSERT_EQ(tc_buffer_demote_async(b, L1, nullptr), TC_OK);
    EXPECT_EQ(tc_buffer_demote_async(b, L3, nullptr), TC_ERR_IO);
    EXPECT_EQ(tier_of(b), L1);
    ASSERT_EQ(tc_buffer_promote_async(b, L0, nullptr), TC_OK);
    EXPECT_EQ(read_all(b), bytes);
    EXPECT_EQ(resident(c, L3), 0u);
  }
  if (::geteuid() != 0) fs::permissions(dir_path + "/ro", fs::perms::owner_all);
  fs::remove(file_path);
  tc_stream_destroy(s);
  tc_buffer_free(b);
}

// A full disk, simulated with a file-size limit (RLIMIT_FSIZE, SIGXFSZ
// ignored): writing a spill file past it fails with EFBIG. The limit is set
// in a child process (this test binary re-executed to run only the disabled
// test below), so nothing else in this process is held to it.
TEST_P(Tiers, FullDiskIsAnIoErrorAndKeepsTheBytes) {
  if (GetParam() == "cuda" && !cuda_present()) GTEST_SKIP() << "no CUDA device in this machine";
  fs::create_directories(dir_path);
  fs::permissions(dir_path, fs::perms::owner_all, fs::perm_options::replace);  // private, as a spill dir must be
  std::string filter = "--gtest_filter=TiersChild.DISABLED_FullDisk";
  std::vector<char*> argv = {const_cast<char*>("tc_tests"), filter.data(),
                             const_cast<char*>("--gtest_also_run_disabled_tests")};
  argv.push_back(nullptr);
  std::vector<std::string> env_strings = {"TC_TIERS_CHILD_DIR=" + dir_path, "TC_TIERS_CHILD_DEVICE=" + GetParam()};
  for (char** e = environ; *e; ++e) env_strings.push_back(*e);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid;
  ASSERT_EQ(::posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), envp.data()), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child died with signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's checks failed (its output is above)";
  EXPECT_EQ(spill_files(), 0u);  // nothing left behind
}

TEST(TiersChild, DISABLED_FullDisk) {
  const char* dir = std::getenv("TC_TIERS_CHILD_DIR");
  const char* device = std::getenv("TC_TIERS_CHILD_DEVICE");
  if (!dir || !device) GTEST_SKIP() << "runs only as the child of Tiers.FullDiskIsAnIoErrorAndKeepsTheBytes";
  ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit lim;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &lim), 0);
  lim.rlim_cur = 64 << 10;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &lim), 0);
  Ctx c(device);
  ASSERT_NE(c.ctx, nullptr);
  ASSERT_EQ(tc_context_set_spill_dir(c, dir), TC_OK);
  auto bytes = random_bytes(1 << 20, 70);
  tc_buffer b = alloc_with(c, bytes.data(), bytes.size());
  EXPECT_EQ(tc_buffer_demote_async(b, L3, nullptr), TC_ERR_IO);
  EXPECT_TRUE(contains(detail(), "File too large")) << detail();
  EXPECT_EQ(tier_of(b), L0);
  EXPECT_EQ(read_all(b), bytes);
  // Queued: the failure comes at tier_sync (once), the bytes stay in L1.
  tc_stream s;
  ASSERT_EQ(tc_stream_create(c, &s), TC_OK);
  ASSERT_EQ(tc_buffer_demote_async(b, L1, s), TC_OK);
  ASSERT_EQ(tc_buffer_demote_async(b, L3, s), TC_OK);
  EXPECT_EQ(tc_buffer_tier_sync(b), TC_ERR_IO);
  EXPECT_TRUE(contains(detail(), "File too large")) << detail();
  EXPECT_EQ(tier_of(b), L1);
  EXPECT_EQ(tc_buffer_tier_sync(b), TC_OK);
  tc_stream_sync(s);  // the CPU stream also reports the failed step
  EXPECT_EQ(resident(c, L3), 0u);
  ASSERT_EQ(tc_buffer_promote_async(b, L0, nullptr), TC_OK);
  EXPECT_EQ(read_all(b), bytes);
  // A small buffer still fits under the limit.
  tc_buffer small;
  ASSERT_EQ(tc_buffer_alloc(c, 4096, &small), TC_OK);
  EXPECT_EQ(tc_buffer_demote_async(small, L3, nullptr), TC_OK) << detail();
  EXPECT_EQ(resident(c, L3), 4096u);
  tc_stream_destroy(s);
  tc_buffer_free(small);
  tc_buffer_free(b);
}

TEST_P(Tiers, ConcurrentMovesFromManyThreads) {
  Ctx c(GetParam());
  MEMTEST_REQUIRE_DEVICE(c);
  use_dir(c);
  const int kThreads = 4, kIters = 12;
  auto shared_bytes = random_bytes(50000, 80);
  tc_buffer shared = alloc_with(c, shared_bytes.data(), shared_bytes.size());
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      tc_stream s;
      if (tc_stream_create(c, &s) != TC_OK) failures++;
      auto mine = random_bytes(30000, 90 + t);
      tc_buffer b = alloc_with(c, mine.data(), mine.size());
      std::mt19937 rng(t);
      const tc_memory_tier tiers[] = {L0, L1, L3};
      for (int i = 0; i < kIters; ++i) {
        tc_memory_tier to = tiers[rng() % 3];
        tc_memory_tier from = -1;
        if (tc_buffer_tier_sync(b) != TC_OK || tc_buffer_get_tier(b, &from) != TC_OK) failures++;
        if (go(b, from, to, (i & 1) ? s : nullptr) != TC_OK) failures++;
        // The shared buffer: whichever direction is legal when we look.
        tc_memory_tier sf = -1;
        tc_buffer_tier_sync(shared);
        tc_buffer_get_tier(shared, &sf);
        tc_status st = go(shared, sf, tiers[rng() % 3], (i & 2) ? s : nullptr);
        if (st != TC_OK && st != TC_ERR_INVALID_ARG) failures++;  // another thread may have moved it first
      }
      if (tc_buffer_tier_sync(b) != TC_OK || tc_buffer_promote_async(b, L0, nullptr) != TC_OK) failures++;
      std::vector<uint8_t> back(mine.size());
      if (tc_buffer_read(b, 0, back.data(), back.size()) != TC_OK || back != mine) failures++;
      tc_stream_destroy(s);
      tc_buffer_free(b);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  ASSERT_EQ(tc_buffer_tier_sync(shared), TC_OK);
  ASSERT_EQ(tc_buffer_promote_async(shared, L0, nullptr), TC_OK) << detail();
  EXPECT_EQ(read_all(shared), shared_bytes);
  tc_buffer_free(shared);
  EXPECT_EQ(spill_files(), 0u);
}

TEST_P(Tiers, CapabilityBits) {
  Ctx c(GetParam());
  MEMTEST_REQUIRE_DEVICE(c);
  struct tc_runtime_capabilities caps{};
  caps.struct_size = sizeof caps;
  ASSERT_EQ(tc_runtime_capabilities(c, &caps), TC_OK);
  EXPECT_EQ(tc_capability_available(&caps, TC_CAPABILITY_CHECKPOINT), 1);
  EXPECT_EQ(tc_capability_available(&caps, TC_CAPABILITY_MEMORY_TIERS), 1);
}

INSTANTIATE_TEST_SUITE_P(Devices, Tiers, ::testing::ValuesIn(all_devices()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// ---- the spill directory is private, spill files are never redirected ----

// A private directory of this test, removed at the end; `dir` inside it is
// the spill directory under test (absent until a test makes it).
class SpillDir : public ::testing::Test {
 protected:
  void SetUp() override {
    root = (fs::temp_directory_path() /
            ("tc-spilldir-test-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::remove_all(root);
    fs::create_directories(root);
    fs::permissions(root, fs::perms::owner_all, fs::perm_options::replace);
    dir = root + "/spill";
  }
  void TearDown() override { fs::remove_all(root); }

  // Demoting a buffer to L3 with `spill_dir` is refused with TC_ERR_IO and a
  // detail naming the directory and `reason`; the bytes stay in L0 and no
  // file appears in the directory.
  void expect_refused(tc_context c, const std::string& reason) {
    auto bytes = random_bytes(4096, 5);
    tc_buffer b = alloc_with(c, bytes.data(), bytes.size());
    EXPECT_EQ(tc_buffer_demote_async(b, L3, nullptr), TC_ERR_IO);
    EXPECT_TRUE(contains(detail(), dir)) << detail();
    EXPECT_TRUE(contains(detail(), reason)) << detail();
    EXPECT_EQ(tier_of(b), L0);
    EXPECT_EQ(read_all(b), bytes);
    EXPECT_EQ(resident(c, L3), 0u);
    tc_buffer_free(b);
  }
  // A round trip through L3 works.
  void expect_spills(tc_context c) {
    auto bytes = random_bytes(10000, 6);
    tc_buffer b = alloc_with(c, bytes.data(), bytes.size());
    ASSERT_EQ(tc_buffer_demote_async(b, L3, nullptr), TC_OK) << detail();
    EXPECT_EQ(tier_of(b), L3);
    ASSERT_EQ(tc_buffer_promote_async(b, L0, nullptr), TC_OK) << detail();
    EXPECT_EQ(read_all(b), bytes);
    tc_buffer_free(b);
  }
  static unsigned mode_of(const std::string& p) {
    struct stat st;
    EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
    return unsigned(st.st_mode & 07777);
  }
  std::string root, dir;
};

TEST_F(SpillDir, IsCreatedPrivate) {
  Ctx c("cpu");
  ASSERT_EQ(tc_context_set_spill_dir(c, dir.c_str()), TC_OK);
  expect_spills(c);
  EXPECT_EQ(mode_of(dir), 0700u);
  // A trailing slash names the same directory.
  ASSERT_EQ(tc_context_set_spill_dir(c, (dir + "/").c_str()), TC_OK);
  expect_spills(c);
}

TEST_F(SpillDir, WorldWritableOrGroupReadableIsRefused) {
  Ctx c("cpu");
  ASSERT_EQ(tc_context_set_spill_dir(c, dir.c_str()), TC_OK);
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  for (unsigned mode : {01777u, 0777u, 0750u, 0701u}) {
    SCOPED_TRACE(mode);
    ASSERT_EQ(::chmod(dir.c_str(), mode), 0);
    expect_refused(c, "mode");
  }
  ASSERT_EQ(::chmod(dir.c_str(), 0700), 0);
  expect_spills(c);
}

TEST_F(SpillDir, DefaultDirectoryOfAnotherUserOrModeIsRefused) {
  // The default <tmp>/tensorcore-spill-<uid>, squatted in advance. TMPDIR
  // points the default into this test's private directory.
  const char* old_tmp = std::getenv("TMPDIR");
  std::string saved = old_tmp ? old_tmp : "";
  ASSERT_EQ(::setenv("TMPDIR", root.c_str(), 1), 0);
  ::unsetenv("TC_TIER_DIR");
  dir = root + "/tensorcore-spill-" + std::to_string(::geteuid());
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);
  {
    Ctx c("cpu");
    expect_refused(c, "mode");
    ASSERT_EQ(::chmod(dir.c_str(), 0700), 0);
    expect_spills(c);
    // $TC_TIER_DIR is held to the same rule.
    std::string env_dir = root + "/from-env";
    ASSERT_EQ(::mkdir(env_dir.c_str(), 0777), 0);
    ASSERT_EQ(::chmod(env_dir.c_str(), 0777), 0);
    ASSERT_EQ(::setenv("TC_TIER_DIR", env_dir.c_str(), 1), 0);
    dir = env_dir;
    expect_refused(c, "mode");
    ::unsetenv("TC_TIER_DIR");
  }
  if (old_tmp) ::setenv("TMPDIR", saved.c_str(), 1);
  else ::unsetenv("TMPDIR");
}

TEST_F(SpillDir, OwnedBySomeoneElseIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a directory to another user";
  Ctx c("cpu");
  ASSERT_EQ(tc_context_set_spill_dir(c, dir.c_str()), TC_OK);
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(::chown(dir.c_str(), 65534, 65534), 0);  // nobody
  expect_refused(c, "owned by uid 65534");
  ASSERT_EQ(::chown(dir.c_str(), 0, 0), 0);
  expect_spills(c);
}

TEST_F(SpillDir, SymlinkInPlaceOfTheDirectoryIsRefused) {
  Ctx c("cpu");
  std::string real = root + "/real";
  ASSERT_EQ(::mkdir(real.c_str(), 0700), 0);
  ASSERT_EQ(::symlink(real.c_str(), dir.c_str()), 0);
  ASSERT_EQ(tc_context_set_spill_dir(c, dir.c_str()), TC_OK);
  expect_refused(c, "symbolic link");
  ASSERT_EQ(tc_context_set_spill_dir(c, (dir + "/").c_str()), TC_OK);  // a trailing slash does not follow it either
  expect_refused(c, "symbolic link");
  EXPECT_TRUE(fs::is_empty(real));
  // A dangling link is not created through either.
  std::string dangling = root + "/dangling";
  ASSERT_EQ(::symlink((root + "/nowhere").c_str(), dangling.c_str()), 0);
  dir = dangling;
  ASSERT_EQ(tc_context_set_spill_dir(c, dir.c_str()), TC_OK);
  expect_refused(c, "symbolic link");
  EXPECT_FALSE(fs::exists(root + "/nowhere"));
}

TEST_F(SpillDir, PlantedFilesAndLinksCannotRedirectASpill) {
  Ctx c("cpu");
  ASSERT_EQ(tc_context_set_spill_dir(c, dir.c_str()), TC_OK);
  // One spill shows the names this process uses: tc-<pid>-<n>.spill.
  auto first = random_bytes(3000, 7);
  tc_buffer a = alloc_with(c, first.data(), first.size());
  ASSERT_EQ(tc_buffer_demote_async(a, L3, nullptr), TC_OK) << detail();
  std::string name = fs::directory_iterator(dir)->path().filename().string();
  std::string prefix = "tc-" + std::to_string(::getpid()) + "-";
  ASSERT_EQ(name.rfind(prefix, 0), 0u) << name;
  uint64_t n = std::stoull(name.substr(prefix.size()));
  // The next names, taken in advance: links to a victim file outside the
  // directory, a dangling link, and a file someone else wrote.
  std::string victim = root + "/victim";
  { std::ofstream(victim) << "victim"; }
  std::vector<std::string> planted;
  for (uint64_t k = 1; k <= 8; ++k) {
    std::string p = dir + "/" + prefix + std::to_string(n + k) + ".spill";
    if (k == 3) {
      std::ofstream(p) << "planted";
    } else if (k == 5) {
      ASSERT_EQ(::symlink((root + "/created-through-a-link").c_str(), p.c_str()), 0);
    } else {
      ASSERT_EQ(::symlink(victim.c_str(), p.c_str()), 0);
    }
    planted.push_back(p);
  }
  auto bytes = random_bytes(20000, 8);
  tc_buffer b = alloc_with(c, bytes.data(), bytes.size());
  ASSERT_EQ(tc_buffer_demote_async(b, L3, nullptr), TC_OK) << detail();
  ASSERT_EQ(tc_buffer_promote_async(b, L1, nullptr), TC_OK) << detail();
  ASSERT_EQ(tc_buffer_demote_async(b, L3, nullptr), TC_OK) << detail();
  ASSERT_EQ(tc_buffer_promote_async(b, L0, nullptr), TC_OK) << detail();
  EXPECT_EQ(read_all(b), bytes);
  ASSERT_EQ(tc_buffer_promote_async(a, L0, nullptr), TC_OK) << detail();
  EXPECT_EQ(read_all(a), first);
  // Nothing was written through the links or over the file, and nothing of
  // theirs was removed.
  std::ifstream v(victim);
  std::string text((std::istreambuf_iterator<char>(v)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "victim");
  EXPECT_FALSE(fs::exists(root + "/created-through-a-link"));
  for (auto& p : planted) EXPECT_TRUE(fs::is_symlink(fs::symlink_status(p)) || fs::is_regular_file(p)) << p;
  std::ifstream pf(planted[2]);
  std::string ptext((std::istreambuf_iterator<char>(pf)), std::istreambuf_iterator<char>());
  EXPECT_EQ(ptext, "planted");
  tc_buffer_free(a);
  tc_buffer_free(b);
  // Only the planted names are left.
  size_t left = 0;
  for (auto it = fs::directory_iterator(dir); it != fs::directory_iterator(); ++it) left++;
  EXPECT_EQ(left, planted.size());
}

// Backends this build does not have answer deterministically.
TEST(OtherBackends, HipIsUnsupported) {
  Ctx c("cpu");
  EXPECT_EQ(tc_hip_device_count(), 0);
  EXPECT_EQ(tc_hip_init(c), TC_ERR_UNSUPPORTED);
  EXPECT_TRUE(contains(detail(), "built without HIP")) << detail();
  EXPECT_EQ(tc_hip_init(nullptr), TC_ERR_INVALID_ARG);
  tc_hip_device_info info;
  std::memset(&info, 0x5a, sizeof info);
  EXPECT_EQ(tc_hip_device_info_get(c, &info), TC_ERR_UNSUPPORTED);
  EXPECT_EQ(info.device_name[0], '\0');
  EXPECT_EQ(info.global_memory_bytes, 0u);
  EXPECT_EQ(tc_hip_device_info_get(c, nullptr), TC_ERR_INVALID_ARG);
  std::memset(&info, 0x5a, sizeof info);
  EXPECT_EQ(tc_hip_device_at(0, &info), TC_ERR_UNSUPPORTED);
  EXPECT_EQ(info.vendor, TC_HIP_VENDOR_UNKNOWN);
  EXPECT_EQ(tc_hip_device_at(-1, &info), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_hip_device_at(0, nullptr), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_hip_select_device(c, 0), TC_ERR_UNSUPPORTED);
  EXPECT_EQ(tc_hip_select_device(c, -1), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_hip_select_device(nullptr, 0), TC_ERR_INVALID_ARG);
  EXPECT_STREQ(tc_hip_last_kernel_name(), "");
}

TEST(OtherBackends, TensorOpsSelectorIsUnsupported) {
  tc_gemm_desc d = f32_desc(16, 16, 16);
  tc_status err = TC_OK;
  EXPECT_EQ(tc_tensorops_gemm_kernel_name(&d, &err), nullptr);
  EXPECT_EQ(err, TC_ERR_UNSUPPORTED);
  EXPECT_TRUE(contains(detail(), "Apple")) << detail();
  EXPECT_EQ(tc_tensorops_gemm_kernel_name(nullptr, &err), nullptr);
  EXPECT_EQ(err, TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_tensorops_gemm_kernel_name(&d, nullptr), nullptr);
}

}  // namespace
