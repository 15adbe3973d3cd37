// simpler runtime: the level-3 scheduler's per-task path against a mailbox
// in this process, the children played by the test (frames read and
// answered as python/simpler/level3/child.py does).
#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "runtime/level3_sched.h"
#include "simpler/simpler.h"

using namespace simpler;
using namespace simpler::level3;

namespace {

struct Posted {
  uint32_t seq, kind, slot, cfg, nt, ns, nmaps;
  uint64_t id;
};

class Level3Sched : public ::testing::Test {
 protected:
  void SetUp() override {
    box_.assign(Layout::kGlobalBytes + 2 * Layout::kChildBytes + 64, 0);
    s_ = std::make_unique<Scheduler>(box_.data(), box_.size());
    for (int i = 0; i < 2; ++i) efd_[i] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    ASSERT_TRUE(s_->add_endpoint(Role::Chip, 0, efd_[0], "chip worker 0", &chip_).ok());
    ASSERT_TRUE(s_->add_endpoint(Role::Sub, 1, efd_[1], "sub-worker 0", &sub_).ok());
    ASSERT_TRUE(s_->add_endpoint(Role::Remote, -1, -1, "remote worker 1", &remote_).ok());
    tpl_ = s_->add_template(2, 7, "sub-task f");
    run_ = 1;
  }
  void TearDown() override {
    for (int fd : efd_) close(fd);
  }
  uint8_t* block(int b) { return box_.data() + Layout::kGlobalBytes + b * Layout::kChildBytes; }
  uint8_t* frame(int b, uint32_t seq) {
    return block(b) + Layout::kChildHeader + Layout::kCtrlBytes + ((seq - 1) % Layout::kFrames) * Layout::kFrameBytes;
  }
  // The task of `seq` on block b if it is posted (as the child sees it).
  bool posted(int b, uint32_t seq, Posted* p = nullptr) {
    uint8_t* f = frame(b, seq);
    uint32_t got_seq;
    std::memcpy(&got_seq, f + Layout::kHdr, 4);
    if (f[0] != Layout::kPosted || got_seq != seq) return false;
    if (p) {
      uint32_t h[9];
      std::memcpy(h, f + Layout::kHdr, sizeof h);
      *p = {h[0], h[3], h[4], h[5], h[6], h[7], h[8], uint64_t(h[1]) | uint64_t(h[2]) << 32};
    }
    return true;
  }
  // The child answers the task of `seq`: a status and, when it failed, a message.
  void answer(int b, uint32_t seq, int32_t status = 0, const std::string& msg = "") {
    ASSERT_TRUE(posted(b, seq)) << "seq " << seq << " is not posted on block " << b;
    uint8_t* f = frame(b, seq);
    const uint32_t n = uint32_t(msg.size());
    std::memcpy(f + Layout::kStatus, &status, 4);
    std::memcpy(f + Layout::kStatus + 4, &n, 4);
    std::memcpy(f + Layout::kMsg, msg.data(), n);
    f[0] = Layout::kDone;
  }
  // A one-dimensional float32 view of a buffer at 0x100000.
  static ChipTensor view(uint32_t n, uint64_t offset) {
    ChipTensor t{};
    t.buffer.addr = 0x100000;
    t.buffer.size = 1 << 20;
    t.start_offset = offset;
    t.ndims = 1;
    t.dtype = DataType(SIMPLER_DT_FLOAT32);
    t.shapes[0] = n;
    t.strides[0] = 1;
    return t;
  }
  Error submit1(uint64_t id, const ChipTensor& t, uint8_t dir, int32_t ep = -1, uint32_t idx = 0) {
    TaskArgs a;
    const uint32_t tag = idx + 1;
    a.nt = 1, a.keys = &t, a.tags = &tag, a.dirs = &dir, a.nshm = 1, a.shm = &idx;
    return s_->submit(run_, ep, tpl_, id, a);
  }
  std::string error() const { return s_->run(run_)->message; }
  bool done() const {
    const level3::Run* r = s_->run(run_);
    return r->closed && r->outstanding == 0;
  }

  std::vector<uint8_t> box_;
  std::unique_ptr<Scheduler> s_;
  int efd_[2] = {-1, -1};
  uint32_t chip_ = 0, sub_ = 0, remote_ = 0, tpl_ = 0, run_ = 0;
};

TEST_F(Level3Sched, AReaderWaitsForItsWriterAndTheFrameCarriesItsArguments) {
  s_->buffer_add(0, 0x100000, 1 << 20, "psm_test_0");
  ASSERT_TRUE(submit1(1, view(16, 0), SIMPLER_ARG_OUT).ok());
  const ChipTensor reader = view(4, 8);
  const uint8_t in = SIMPLER_ARG_IN;
  const uint32_t tag = 1, idx = 0;
  const uint64_t scalars[2] = {42, 7};
  TaskArgs a;
  a.nt = 1, a.keys = &reader, a.tags = &tag, a.dirs = &in, a.ns = 2, a.scalars = scalars, a.nshm = 1, a.shm = &idx;
  a.cfg = 3;
  ASSERT_TRUE(s_->submit(run_, -1, tpl_, 2, a).ok());
  s_->run_close(run_);
  Posted p;
  ASSERT_TRUE(posted(1, 1, &p));
  EXPECT_EQ(p.id, 1u);
  EXPECT_EQ(p.kind, 2u);
  EXPECT_EQ(p.slot, 7u);
  EXPECT_EQ(p.nt, 1u);
  EXPECT_EQ(p.nmaps, 1u);  // the buffer, mapped with the first task that names it
  uint8_t* f = frame(1, 1);
  uint32_t map_idx;
  uint64_t map_size, map_base;
  std::memcpy(&map_idx, f + Layout::kMaps, 4);
  std::memcpy(&map_size, f + Layout::kMaps + 8, 8);
  std::memcpy(&map_base, f + Layout::kMaps + 16, 8);
  EXPECT_EQ(map_idx, 0u);
  EXPECT_EQ(map_size, 1u << 20);
  EXPECT_EQ(map_base, 0x100000u);
  EXPECT_STREQ(reinterpret_cast<const char*>(f + Layout::kMaps + 24), "psm_test_0");
  EXPECT_FALSE(posted(1, 2)) << "the reader must wait for its writer";
  EXPECT_EQ(s_->notice()->live, 2u);
  answer(1, 1);
  EXPECT_TRUE(s_->poll());
  ASSERT_TRUE(posted(1, 2, &p));
  f = frame(1, 2);
  EXPECT_EQ(p.id, 2u);
  EXPECT_EQ(p.cfg, 3u);
  EXPECT_EQ(p.ns, 2u);
  EXPECT_EQ(p.nmaps, 0u);  // mapped already
  uint32_t got_tag;
  std::memcpy(&got_tag, f + Layout::kTags, 4);
  EXPECT_EQ(got_tag, 1u);
  EXPECT_EQ(f[Layout::kDirs], SIMPLER_ARG_IN);
  EXPECT_EQ(std::memcmp(f + Layout::kTensors, &reader, sizeof reader), 0);
  uint64_t got_scalars[2];
  std::memcpy(got_scalars, f + Layout::kScalars, sizeof got_scalars);
  EXPECT_EQ(got_scalars[0], 42u);
  EXPECT_EQ(got_scalars[1], 7u);
  EXPECT_FALSE(done());
  answer(1, 2);
  s_->poll();
  EXPECT_TRUE(done());
  EXPECT_EQ(s_->run(run_)->status, TC_OK);
  EXPECT_EQ(s_->notice()->live, 0u);
  EXPECT_EQ(frame(1, 1)[0], Layout::kFree);
}

TEST_F(Level3Sched, AFailedTaskCancelsItsReadersAndTheRunKeepsTheFirstError) {
  ASSERT_TRUE(submit1(1, view(16, 0), SIMPLER_ARG_OUT).ok());
  ASSERT_TRUE(submit1(2, view(4, 0), SIMPLER_ARG_IN).ok());
  ASSERT_TRUE(submit1(3, view(4, 4), SIMPLER_ARG_INOUT).ok());  // reads what 1 writes, so waits too
  s_->run_close(run_);
  answer(1, 1, TC_ERR_INVALID_ARG, "boom");
  s_->poll();
  EXPECT_TRUE(done());
  EXPECT_EQ(s_->run(run_)->status, TC_ERR_INVALID_ARG);
  EXPECT_EQ(error(), "sub-worker 0: task 1 (sub-task f) failed: boom");
  EXPECT_FALSE(posted(1, 2)) << "a cancelled task must not run";
  // A failed run takes no more tasks.
  ASSERT_TRUE(submit1(4, view(4, 64), SIMPLER_ARG_OUT).ok());
  EXPECT_EQ(s_->notice()->live, 0u);
  EXPECT_FALSE(posted(1, 2));
}

TEST_F(Level3Sched, AFailureCancelsALongChainWithoutRecursingPerTask) {
  const uint64_t n = 200000;  // far deeper than a thread's stack allows one frame a task
  for (uint64_t i = 1; i <= n; ++i) ASSERT_TRUE(submit1(i, view(16, 0), SIMPLER_ARG_INOUT).ok());
  s_->run_close(run_);
  EXPECT_EQ(s_->notice()->live, n);
  answer(1, 1, TC_ERR_INVALID_ARG, "first");
  s_->poll();
  EXPECT_TRUE(done());
  EXPECT_EQ(s_->notice()->live, 0u);
  EXPECT_EQ(error(), "sub-worker 0: task 1 (sub-task f) failed: first");
}

TEST_F(Level3Sched, ADeadChildFailsWhatItRanAndWhatWaitedForIt) {
  s_->notice()->defer = 1;
  const uint32_t n = Layout::kFrames + 3;
  for (uint32_t i = 1; i <= n; ++i) ASSERT_TRUE(s_->submit(run_, int32_t(sub_), tpl_, i, {}).ok());
  EXPECT_EQ(s_->notice()->inflight, Layout::kFrames);  // the ring is full, 3 wait
  s_->run_close(run_);
  answer(1, 1);  // the first one finished before the child died: it counts as done
  s_->poll();     // (and its frame takes task 17)
  s_->endpoint_dead(sub_, "sub-worker 0 (pid 1) exited with status 3");
  EXPECT_TRUE(done());
  EXPECT_EQ(s_->run(run_)->status, TC_ERR_DISPATCH);
  EXPECT_EQ(error(), "sub-worker 0 (pid 1) exited with status 3 while running task 2 (sub-task f)");
  EXPECT_EQ(s_->notice()->inflight, 0u);
  // A dead child's later tasks fail at once, with why.
  const uint32_t r2 = 2;
  ASSERT_TRUE(s_->submit(r2, int32_t(sub_), tpl_, n + 1, {}).ok());
  EXPECT_EQ(s_->run(r2)->message, "sub-worker 0 (pid 1) exited with status 3");
}

TEST_F(Level3Sched, PostsWakeASleepingChildAtOnceOrAfterABatch) {
  uint32_t* sleeping = reinterpret_cast<uint32_t*>(block(1) + Layout::kSleeping);
  uint64_t v = 0;
  *sleeping = 1;
  ASSERT_TRUE(s_->submit(run_, int32_t(sub_), tpl_, 1, {}).ok());
  EXPECT_EQ(*sleeping, 0u);
  EXPECT_EQ(read(efd_[1], &v, 8), 8);
  // While an orchestration submits, the wake waits for a batch (or the flush).
  s_->notice()->defer = 1;
  *sleeping = 1;
  ASSERT_TRUE(s_->submit(run_, int32_t(sub_), tpl_, 2, {}).ok());
  EXPECT_EQ(*sleeping, 1u);
  EXPECT_EQ(read(efd_[1], &v, 8), -1);
  s_->flush_wakes();
  EXPECT_EQ(*sleeping, 0u);
  EXPECT_EQ(read(efd_[1], &v, 8), 8);
}

TEST_F(Level3Sched, MoreNewBuffersThanAFrameMapsWaitForAControlRequest) {
  const uint32_t k = Layout::kMaxMaps + 1;
  std::vector<ChipTensor> ts(k);
  std::vector<uint32_t> tags(k), idx(k);
  std::vector<uint8_t> dirs(k, SIMPLER_ARG_IN);
  for (uint32_t i = 0; i < k; ++i) {
    ts[i] = view(4, 0);
    ts[i].buffer.addr = 0x100000 * (i + 1);
    idx[i] = i, tags[i] = i + 1;
    s_->buffer_add(i, ts[i].buffer.addr, 1 << 20, ("psm_" + std::to_string(i)).c_str());
  }
  TaskArgs a;
  a.nt = k, a.keys = ts.data(), a.tags = tags.data(), a.dirs = dirs.data(), a.nshm = k, a.shm = idx.data();
  ASSERT_TRUE(s_->submit(run_, int32_t(chip_), tpl_, 1, a).ok());
  EXPECT_FALSE(posted(0, 1));
  ASSERT_TRUE(s_->notice()->flags & kMapsNeeded);
  uint32_t ep = 99;
  std::vector<uint32_t> want;
  ASSERT_TRUE(s_->maps_needed(&ep, &want));
  EXPECT_EQ(ep, chip_);
  EXPECT_EQ(want, idx);
  s_->mark_mapped(ep, want.data(), uint32_t(want.size()));
  Posted p;
  ASSERT_TRUE(posted(0, 1, &p));
  EXPECT_EQ(p.nmaps, 0u);
  EXPECT_FALSE(s_->notice()->flags & kMapsNeeded);
  std::vector<uint32_t> holders;
  s_->buffer_drop(3, &holders);
  EXPECT_EQ(holders, std::vector<uint32_t>{chip_});
  EXPECT_TRUE(s_->uses_buffer(4));
}

TEST_F(Level3Sched, ARemoteTaskIsTakenSentAndCompletedByTheEngine) {
  ASSERT_TRUE(submit1(1, view(16, 0), SIMPLER_ARG_OUT, int32_t(remote_)).ok());
  ASSERT_TRUE(submit1(2, view(16, 0), SIMPLER_ARG_IN).ok());  // a local reader of the remote result
  s_->run_close(run_);
  ASSERT_TRUE(s_->notice()->flags & kExternalReady);
  uint64_t ids[4];
  ASSERT_EQ(s_->take_external(ids, 4), 1u);
  EXPECT_EQ(ids[0], 1u);
  EXPECT_EQ(s_->notice()->external_running, 1u);
  EXPECT_FALSE(s_->notice()->flags & kExternalReady);
  EXPECT_FALSE(posted(1, 1));
  ASSERT_TRUE(s_->complete(1, TC_OK, "").ok());
  EXPECT_EQ(s_->notice()->external_running, 0u);
  answer(1, 1);
  s_->poll();
  EXPECT_TRUE(done());
  EXPECT_EQ(s_->run(run_)->status, TC_OK);
  EXPECT_TRUE(s_->complete(1, TC_OK, "").ok()) << "a late completion is ignored";
}

TEST_F(Level3Sched, BadSubmitsAreRefusedAndRecordNothing) {
  ChipTensor bad = view(4, 0);
  bad.ndims = 9;
  Error e = submit1(1, bad, SIMPLER_ARG_IN);
  EXPECT_EQ(e.status, TC_ERR_INVALID_ARG);
  EXPECT_NE(e.message.find("sub-task f: task 1: tensor 0"), std::string::npos) << e.message;
  e = submit1(2, view(4, 0), 9);
  EXPECT_NE(e.message.find("access 9"), std::string::npos) << e.message;
  EXPECT_NE(submit1(2, view(4, 0), SIMPLER_ARG_IN).message.find("does not follow"), std::string::npos);
  EXPECT_NE(s_->submit(0, -1, tpl_, 10, {}).message.find("run 0"), std::string::npos);
  EXPECT_NE(s_->submit(run_, -1, tpl_ + 5, 11, {}).message.find("template"), std::string::npos);
  EXPECT_NE(s_->submit(run_, 7, tpl_, 12, {}).message.find("endpoint 7"), std::string::npos);
  EXPECT_EQ(s_->notice()->live, 0u);
  EXPECT_TRUE(s_->run(run_) == nullptr || s_->run(run_)->outstanding == 0u);
  uint32_t k;
  EXPECT_FALSE(s_->add_endpoint(Role::Sub, 2, -1, "past the end", &k).ok());
}

TEST(Level3SchedCapi, TheLayoutMustMatch) {
  std::vector<uint8_t> box(Layout::kGlobalBytes + Layout::kChildBytes);
  std::vector<uint32_t> values(std::begin(Layout::kValues), std::end(Layout::kValues));
  simpler_l3 s = nullptr;
  values[1] += 1;  // FRAME_BYTES
  EXPECT_EQ(simpler_l3_create(box.data(), box.size(), values.data(), uint32_t(values.size()), &s), TC_ERR_INVALID_ARG);
  EXPECT_NE(std::string(simpler_last_error_detail()).find("FRAME_BYTES"), std::string::npos);
  values[1] -= 1;
  ASSERT_EQ(simpler_l3_create(box.data(), box.size(), values.data(), uint32_t(values.size()), &s), TC_OK);
  uint32_t k;
  EXPECT_EQ(simpler_l3_add_endpoint(s, 5, 0, -1, "x", &k), TC_ERR_INVALID_ARG);
  EXPECT_EQ(simpler_l3_submit(s, 1, -1, 0, 1), TC_ERR_INVALID_ARG);  // no template, no sub-worker
  EXPECT_EQ(simpler_l3_run_state(s, 1), -1);
  simpler_l3_destroy(s);
}

}  // namespace
