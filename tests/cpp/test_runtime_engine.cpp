// simpler runtime: the engine end to end on the cpu platform, with kernels
// and orchestrations that are functions of this binary.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <stdexcept>
#include <thread>

#include "runtime/fault_guard.h"
#include "runtime_test_util.h"

using namespace rt_test;
using simpler::make_native_chip_callable;
using simpler::make_native_core_callable;

namespace {

// ---- kernels (1-D f32 views; SPMD blocks split the elements) ---------------

#define ARG(i) SIMPLER_TENSOR_ARG(args, i)

void block_range(uint32_t n, uint32_t* lo, uint32_t* hi) {
  const uint64_t b = uint64_t(get_block_idx()), nb = uint64_t(get_block_num());
  *lo = uint32_t(n * b / nb);
  *hi = uint32_t(n * (b + 1) / nb);
}

inline float& at(const ChipTensor* t, uint32_t i) { return SIMPLER_TENSOR_DATA(float, t)[int64_t(i) * t->strides[0]]; }

void k_add(int64_t* args) {  // out = a + b
  uint32_t lo, hi;
  block_range(ARG(2)->shapes[0], &lo, &hi);
  for (uint32_t i = lo; i < hi; i++) at(ARG(2), i) = at(ARG(0), i) + at(ARG(1), i);
}
void k_add_scalar(int64_t* args) {  // out = in + s
  const float s = bits_f32(uint64_t(args[2]));
  uint32_t lo, hi;
  block_range(ARG(1)->shapes[0], &lo, &hi);
  for (uint32_t i = lo; i < hi; i++) at(ARG(1), i) = at(ARG(0), i) + s;
}
void k_mul(int64_t* args) {  // out = a * b
  uint32_t lo, hi;
  block_range(ARG(2)->shapes[0], &lo, &hi);
  for (uint32_t i = lo; i < hi; i++) at(ARG(2), i) = at(ARG(0), i) * at(ARG(1), i);
}
void k_inc(int64_t* args) {  // x += 1
  for (uint32_t i = 0; i < ARG(0)->shapes[0]; i++) at(ARG(0), i) += 1.0f;
}
void k_fill(int64_t* args) {  // out[:] = src[i], i = scalar
  const float v = at(ARG(0), uint32_t(args[2]));
  for (uint32_t j = 0; j < ARG(1)->shapes[0]; j++) at(ARG(1), j) = v;
}
void k_sum(int64_t* args) {  // out[0] = sum(in)
  double s = 0;
  for (uint32_t i = 0; i < ARG(0)->shapes[0]; i++) s += at(ARG(0), i);
  at(ARG(1), 0) = float(s);
}
void k_copy_slow(int64_t* args) {  // out = in, slowly (so a racing writer would win)
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  for (uint32_t i = 0; i < ARG(1)->shapes[0]; i++) at(ARG(1), i) = at(ARG(0), i);
}
std::atomic<int> g_throw_runs{0}, g_after_runs{0};
void k_throw(int64_t*) {
  g_throw_runs++;
  throw std::runtime_error("boom from the kernel");
}
void k_counted_inc(int64_t* args) {
  g_after_runs++;
  k_inc(args);
}
void k_segv(int64_t*) {
  // An unmapped address that is not null: a real SIGSEGV, and nothing
  // UndefinedBehaviorSanitizer reports on the way.
  volatile int* p = reinterpret_cast<volatile int*>(uintptr_t(64));
  *p = 1;
}
void k_block_id(int64_t* args) {  // out[i] = block that wrote it
  uint32_t lo, hi;
  block_range(ARG(0)->shapes[0], &lo, &hi);
  for (uint32_t i = lo; i < hi; i++) at(ARG(0), i) = float(get_block_idx()) + 100.0f * float(get_block_num());
}

enum { F_ADD = 0, F_ADD_SCALAR = 1, F_MUL = 2, F_INC = 3, F_FILL = 4, F_SUM = 5, F_COPY_SLOW = 6, F_THROW = 7,
       F_COUNTED_INC = 8, F_SEGV = 9, F_BLOCK_ID = 10 };

const int32_t IN = SIMPLER_ARG_IN, OUT = SIMPLER_ARG_OUT, INOUT = SIMPLER_ARG_INOUT, SC = SIMPLER_ARG_SCALAR;

std::vector<std::pair<int32_t, CallablePtr>> kernels() {
  return {{F_ADD, make_native_core_callable({IN, IN, OUT}, k_add)},
          {F_ADD_SCALAR, make_native_core_callable({IN, OUT, SC}, k_add_scalar)},
          {F_MUL, make_native_core_callable({IN, IN, OUT}, k_mul)},
          {F_INC, make_native_core_callable({INOUT}, k_inc)},
          {F_FILL, make_native_core_callable({IN, OUT, SC}, k_fill)},
          {F_SUM, make_native_core_callable({IN, OUT}, k_sum)},
          {F_COPY_SLOW, make_native_core_callable({IN, OUT}, k_copy_slow)},
          {F_THROW, make_native_core_callable({INOUT}, k_throw)},
          {F_COUNTED_INC, make_native_core_callable({INOUT}, k_counted_inc)},
          {F_SEGV, make_native_core_callable({INOUT}, k_segv)},
          {F_BLOCK_ID, make_native_core_callable({OUT}, k_block_id)}};
}

// ---- orchestrations ---------------------------------------------------------

// f = (a + b + 1) * (a + b + 2) + (a + b), intermediates allocated by the runtime.
void diamond_orch(const ChipTaskArgs& args) {
  const ChipTensor& a = args.tensor(0).ref();
  const ChipTensor& b = args.tensor(1).ref();
  const ChipTensor& f = args.tensor(2).ref();
  const uint32_t n = a.shapes[0];
  TensorCreateInfo ci(&n, 1, DataType::FLOAT32);
  PTO2_SCOPE() {
    CoreTaskArgs p0;
    p0.add_input(a);
    p0.add_input(b);
    p0.add_output(ci);
    TaskOutputTensors t0 = rt_submit_aiv_task(F_ADD, p0);
    const ChipTensor& c = t0.get_ref(0);
    PTO2_SCOPE() {  // d, e and g live in this scope; c in the outer one
      CoreTaskArgs p1;
      p1.add_input(c);
      p1.add_output(ci);
      p1.add_scalar(1.0f);
      p1.set_block_num(3);
      TaskOutputTensors t1 = rt_submit_aiv_task(F_ADD_SCALAR, p1);
      CoreTaskArgs p2;
      p2.add_input(c);
      p2.add_output(ci);
      p2.add_scalar(2.0f);
      TaskOutputTensors t2 = rt_submit_aiv_task(F_ADD_SCALAR, p2);
      CoreTaskArgs p3;
      p3.add_input(t1.get_ref(0));
      p3.add_input(t2.get_ref(0));
      p3.add_output(ci);
      TaskOutputTensors t3 = rt_submit_aiv_task(F_MUL, p3);
      CoreTaskArgs p4;
      p4.add_input(t3.get_ref(0));
      p4.add_input(c);
      p4.add_output(f);
      rt_submit_task(F_ADD, p4);
    }
  }
}

// Uses a tensor created in a scope after that scope ended.
void escaped_orch(const ChipTaskArgs& args) {
  uint32_t n = 4;
  TensorCreateInfo ci(&n, 1, DataType::FLOAT32);
  TaskOutputTensors t;
  PTO2_SCOPE() {
    CoreTaskArgs p;
    p.add_output(ci);
    t = rt_submit_task(F_BLOCK_ID, p);
  }
  CoreTaskArgs q;
  q.add_input(t.get_ref(0));
  q.add_output(args.tensor(0).ref());
  q.add_scalar(1.0f);
  rt_submit_task(F_ADD_SCALAR, q);
}

PTO2OrchestrationConfig diamond_config(const ChipTaskArgs&) { return PTO2OrchestrationConfig{3}; }

// x += 1, N times, in scopes of `per_scope` tasks (0: one flat scope).
void chain_orch(const ChipTaskArgs& args) {
  const ChipTensor& x = args.tensor(0).ref();
  const uint64_t n = args.scalar(0), per_scope = args.scalar(1);
  uint64_t i = 0;
  while (i < n) {
    uint64_t end = per_scope ? std::min(n, i + per_scope) : n;
    PTO2_SCOPE() {
      for (; i < end; i++) {
        CoreTaskArgs p;
        p.add_inout(x);
        rt_submit_task(F_INC, p);
      }
    }
  }
}

// y[16 i : 16 i + 16] = x[i] for every i, then s = sum(y).
void fanout_orch(const ChipTaskArgs& args) {
  const ChipTensor& x = args.tensor(0).ref();
  const ChipTensor& y = args.tensor(1).ref();
  const ChipTensor& s = args.tensor(2).ref();
  const uint64_t n = args.scalar(0), per_scope = args.scalar(1);
  const uint32_t width = 16;
  for (uint64_t i = 0; i < n;) {
    uint64_t end = std::min(n, i + per_scope);
    PTO2_SCOPE() {
      for (; i < end; i++) {
        uint32_t shape = width, off = uint32_t(i) * width;
        CoreTaskArgs p;
        p.add_input(x);
        p.add_output(make_view(y, &shape, &off));
        p.add_scalar(i);
        rt_submit_task(F_FILL, p);
      }
    }
  }
  CoreTaskArgs p;
  p.add_input(y);
  p.add_output(s);
  rt_submit_task(F_SUM, p);
}

// Every task creates an output and nothing retires until the scope ends.
void one_scope_orch(const ChipTaskArgs& args) {
  const uint64_t n = args.scalar(0);
  uint32_t shape = 256;
  TensorCreateInfo ci(&shape, 1, DataType::FLOAT32);
  PTO2_SCOPE() {
    for (uint64_t i = 0; i < n; i++) {
      CoreTaskArgs p;
      p.add_output(ci);
      p.set_block_num(1);
      rt_submit_task(F_BLOCK_ID, p);
    }
  }
}

// t0 fails; t1 depends on it; t2 does not.
void fail_orch(const ChipTaskArgs& args) {
  const ChipTensor& x = args.tensor(0).ref();
  CoreTaskArgs p0;
  p0.add_inout(x);
  rt_submit_task(F_THROW, p0);
  CoreTaskArgs p1;
  p1.add_inout(x);
  rt_submit_task(F_COUNTED_INC, p1);
}

void segv_orch(const ChipTaskArgs& args) {
  CoreTaskArgs p;
  p.add_inout(args.tensor(0).ref());
  rt_submit_task(F_SEGV, p);
}

void unknown_func_orch(const ChipTaskArgs& args) {
  CoreTaskArgs p;
  p.add_inout(args.tensor(0).ref());
  rt_submit_task(99, p);
}

void bad_signature_orch(const ChipTaskArgs& args) {
  CoreTaskArgs p;
  p.add_input(args.tensor(0).ref());
  p.add_input(args.tensor(0).ref());
  rt_submit_task(F_SUM, p);  // (IN, OUT) kernel given (IN, IN)
}

void outside_orch(const ChipTaskArgs& args) {
  ChipTensor t = args.tensor(0).ref();
  t.shapes[0] += 1;  // one element past the allocation
  CoreTaskArgs p;
  p.add_inout(t);
  rt_submit_task(F_INC, p);
}

void throw_orch(const ChipTaskArgs&) { throw std::runtime_error("the orchestration gave up"); }

void unbalanced_orch(const ChipTaskArgs&) { rt_scope_begin(); }

// Manual scope: dependencies only by add_dep.
void manual_orch(const ChipTaskArgs& args) {
  const ChipTensor& x = args.tensor(0).ref();
  const ChipTensor& y = args.tensor(1).ref();
  PTO2_SCOPE(PTO2ScopeMode::MANUAL) {
    CoreTaskArgs p0;
    p0.add_inout(x);
    TaskOutputTensors t0 = rt_submit_task(F_INC, p0);
    CoreTaskArgs p1;
    p1.add_input(x);
    p1.add_output(y);
    p1.add_dep(t0);
    rt_submit_task(F_COPY_SLOW, p1);
  }
}

// A reader declared INOUT orders a later writer after it (WAR).
void war_orch(const ChipTaskArgs& args) {
  const ChipTensor& x = args.tensor(0).ref();
  const ChipTensor& y = args.tensor(1).ref();
  CoreTaskArgs p0;
  p0.add_inout(x);  // really a read; INOUT so the writer below waits
  p0.add_output(y);
  rt_submit_task(F_COPY_SLOW, p0);
  CoreTaskArgs p1;
  p1.add_inout(x);
  rt_submit_task(F_INC, p1);
}

void spmd_orch(const ChipTaskArgs& args) {
  CoreTaskArgs p;
  p.add_output(args.tensor(0).ref());
  p.set_block_num(uint32_t(args.scalar(0)));
  rt_submit_task(F_BLOCK_ID, p);
}

std::vector<float> random_vec(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(-2.f, 2.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

}  // namespace

TEST(RuntimeEngine, DiamondWithScopesAndCreatedTensors) {
  for (bool hbg : {false, true}) {
    TestWorker tw(hbg);
    int32_t slot = tw.reg(make_native_chip_callable({IN, IN, OUT}, diamond_orch, kernels(), diamond_config));
    // Sizes change between runs (slots and heap offsets are reused with new
    // shapes); host_build_graph replays its cached graph for a repeated one.
    for (uint32_t n : {1000u, 4096u, 777u, 4096u, 4096u}) {
      auto a = random_vec(n, n), b = random_vec(n, n + 1);
      uint64_t pa = tw.upload(a), pb = tw.upload(b), pf = tw.upload(std::vector<float>(n, NAN));
      Error e = tw.run(slot, {vec(pa, n), vec(pb, n), vec(pf, n)});
      ASSERT_TRUE(e.ok()) << e.message;
      auto f = tw.download(pf, n);
      for (uint32_t i = 0; i < n; i++) {
        double c = double(a[i]) + b[i];
        ASSERT_NEAR(f[i], (c + 1) * (c + 2) + c, 1e-4 * (1 + std::fabs((c + 1) * (c + 2) + c))) << i;
      }
      for (uint64_t p : {pa, pb, pf}) tw.w->free(p);
    }
  }
}

// A pool of many cores running runs that may use only two of them (block_dim
// 2), alternating with runs that use them all: a wake-up meant for the run's
// cores must never be taken by a core outside its share (a lost wake-up left
// the run's cores asleep with work queued, and the run never ended).
TEST(RuntimeEngine, FewCoresOfALargePoolAlwaysWake) {
  for (bool hbg : {false, true}) {
    TestWorker tw(hbg, 16);
    int32_t slot = tw.reg(make_native_chip_callable({IN, IN, OUT}, diamond_orch, kernels(), diamond_config));
    const uint32_t n = 256;
    auto a = random_vec(n, 7), b = random_vec(n, 8);
    uint64_t pa = tw.upload(a), pb = tw.upload(b), pf = tw.upload(std::vector<float>(n, NAN));
    simpler_call_config two{}, all{};
    two.struct_size = all.struct_size = sizeof two;
    two.block_dim = 2;
    std::vector<ChipTensor> t{vec(pa, n), vec(pb, n), vec(pf, n)};
    for (int i = 0; i < 200; i++) {
      // Let idle cores stop spinning and go to sleep before the next run.
      if (i % 2) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      simpler_task_args args{t.data(), uint32_t(t.size()), nullptr, 0};
      std::shared_ptr<simpler::RunState> r;
      Error e = tw.w->submit(slot, args, i % 8 == 7 ? &all : &two, &r);
      ASSERT_TRUE(e.ok()) << e.message;
      std::unique_lock<std::mutex> lk(r->mu);
      if (!r->cv.wait_for(lk, std::chrono::seconds(20), [&] { return r->done; })) {
        std::fprintf(stderr, "run %d (%s) never finished\n", i, hbg ? "host_build_graph" : "dynamic");
        std::abort();  // the worker cannot be closed with a run stuck
      }
      ASSERT_TRUE(r->error.ok()) << r->error.message;
    }
    auto f = tw.download(pf, n);
    for (uint32_t i = 0; i < n; i++) {
      double c = double(a[i]) + b[i];
      ASSERT_NEAR(f[i], (c + 1) * (c + 2) + c, 1e-4 * (1 + std::fabs((c + 1) * (c + 2) + c))) << i;
    }
  }
}

TEST(RuntimeEngine, ConfigFunctionChecksArgumentCount) {
  TestWorker tw;
  uint64_t p = tw.upload(std::vector<float>(4, 0.f));
  auto chip = make_native_chip_callable({IN, IN, OUT, SC}, diamond_orch, kernels(), diamond_config);
  Error e = tw.run(tw.reg(chip), {vec(p, 4), vec(p, 4), vec(p, 4)}, {1});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.message.find("expects 3 argument(s)"), std::string::npos) << e.message;
}

TEST(RuntimeEngine, DependentChainAcrossScopesAndRingWrap) {
  TestWorker tw;
  int32_t slot = tw.reg(make_native_chip_callable({INOUT, SC, SC}, chain_orch, kernels()));
  uint64_t px = tw.upload({0.f});
  // Default rings; then a 4-slot window that wraps around 2500 times.
  Error e = tw.run(slot, {vec(px, 1)}, {10000, 64});
  ASSERT_TRUE(e.ok()) << e.message;
  EXPECT_EQ(tw.download(px, 1)[0], 10000.f);
  simpler_call_config small = rings(4, 4096, 8);
  e = tw.run(slot, {vec(px, 1)}, {10000, 3}, &small);
  ASSERT_TRUE(e.ok()) << e.message;
  EXPECT_EQ(tw.download(px, 1)[0], 20000.f);
}

TEST(RuntimeEngine, FanOutFanInOverSlices) {
  TestWorker tw;
  int32_t slot = tw.reg(make_native_chip_callable({IN, OUT, OUT, SC, SC}, fanout_orch, kernels()));
  const uint32_t n = 3000;
  auto x = random_vec(n, 3);
  uint64_t px = tw.upload(x), py = tw.upload(std::vector<float>(n * 16, NAN)), ps = tw.upload({NAN});
  for (uint64_t window : {uint64_t(0), uint64_t(64)}) {
    simpler_call_config cfg = rings(window, 0, window ? 4096 : 0);
    Error e = tw.run(slot, {vec(px, n), vec(py, n * 16), vec(ps, 1)}, {n, 50}, window ? &cfg : nullptr);
    ASSERT_TRUE(e.ok()) << e.message;
    auto y = tw.download(py, n * 16);
    double want = 0;
    for (uint32_t i = 0; i < n; i++) {
      want += 16.0 * x[i];
      for (int j = 0; j < 16; j++) ASSERT_EQ(y[i * 16 + j], x[i]);
    }
    EXPECT_NEAR(tw.download(ps, 1)[0], want, 1e-3 * (1 + std::fabs(want)));
  }
}

TEST(RuntimeEngine, HeapRingWrapsAndBackPressure) {
  // 256-float outputs (1 KiB each) through a 4 KiB heap and a 4-slot window:
  // the orchestration must wait for retirement, many times over.
  TestWorker tw;
  int32_t slot = tw.reg(make_native_chip_callable({SC}, [](const ChipTaskArgs& args) {
    const uint64_t n = args.scalar(0);
    uint32_t shape = 256;
    TensorCreateInfo ci(&shape, 1, DataType::FLOAT32);
    for (uint64_t i = 0; i < n; i++) {
      PTO2_SCOPE() {
        CoreTaskArgs p;
        p.add_output(ci);
        TaskOutputTensors t = rt_submit_task(F_BLOCK_ID, p);
        CoreTaskArgs q;
        q.add_input(t.get_ref(0));
        q.add_output(ci);
        q.add_scalar(1.0f);
        rt_submit_task(F_ADD_SCALAR, q);
      }
    }
  }, kernels()));
  simpler_call_config cfg = rings(4, 4096, 4);
  Error e = tw.run(slot, {}, {500}, &cfg);
  ASSERT_TRUE(e.ok()) << e.message;
}

TEST(RuntimeEngine, DeadlockIsReportedNotHung) {
  TestWorker tw;
  int32_t slot = tw.reg(make_native_chip_callable({SC}, one_scope_orch, kernels()));
  simpler_call_config cfg = rings(8);
  Error e = tw.run(slot, {}, {20}, &cfg);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.message.find("deadlock"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("ring_task_window"), std::string::npos) << e.message;
  // Heap: 20 x 1 KiB outputs in one scope through a 4 KiB heap.
  cfg = rings(64, 4096);
  e = tw.run(slot, {}, {20}, &cfg);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.message.find("ring_heap"), std::string::npos) << e.message;
  // One output larger than the whole heap fails at once.
  cfg = rings(64, 1024);
  int32_t big = tw.reg(make_native_chip_callable({}, [](const ChipTaskArgs&) {
    uint32_t shape = 1024;
    TensorCreateInfo ci(&shape, 1, DataType::FLOAT32);
    CoreTaskArgs p;
    p.add_output(ci);
    rt_submit_task(F_BLOCK_ID, p);
  }, kernels()));
  e = tw.run(big, {}, {}, &cfg);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.message.find("4096 bytes"), std::string::npos) << e.message;
  // The worker is still usable, with enough room.
  cfg = rings(64);
  e = tw.run(slot, {}, {20}, &cfg);
  EXPECT_TRUE(e.ok()) << e.message;
}

TEST(RuntimeEngine, FailurePoisonsDependentsAndWorkerStaysUsable) {
  TestWorker tw;
  int32_t slot = tw.reg(make_native_chip_callable({INOUT}, fail_orch, kernels()));
  uint64_t px = tw.upload({5.f});
  g_throw_runs = 0, g_after_runs = 0;
  Error e = tw.run(slot, {vec(px, 1)});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.message.find("boom from the kernel"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("func_id 7"), std::string::npos) << e.message;
  EXPECT_EQ(g_throw_runs.load(), 1);
  EXPECT_EQ(g_after_runs.load(), 0);  // the dependent never ran
  EXPECT_EQ(tw.download(px, 1)[0], 5.f);
  int32_t chain = tw.reg(make_native_chip_callable({INOUT, SC, SC}, chain_orch, kernels()));
  e = tw.run(chain, {vec(px, 1)}, {10, 0});
  ASSERT_TRUE(e.ok()) << e.message;
  EXPECT_EQ(tw.download(px, 1)[0], 15.f);
}

TEST(RuntimeEngine, FaultingKernelIsReported) {
  TestWorker tw;
  uint64_t px = tw.upload({1.f});
  Error e = tw.run(tw.reg(make_native_chip_callable({INOUT}, segv_orch, kernels())), {vec(px, 1)});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.message.find("SIGSEGV"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("func_id 9"), std::string::npos) << e.message;
  int32_t chain = tw.reg(make_native_chip_callable({INOUT, SC, SC}, chain_orch, kernels()));
  e = tw.run(chain, {vec(px, 1)}, {3, 0});
  ASSERT_TRUE(e.ok()) << e.message;
  EXPECT_EQ(tw.download(px, 1)[0], 4.f);
}

// A core thread that caught a fault catches the next one too: the fault
// path leaves the signal unblocked (a blocked SIGSEGV would kill the process).
TEST(RuntimeEngine, OneCoreCatchesRepeatedFaults) {
  TestWorker tw(false, 1);
  uint64_t px = tw.upload({1.f});
  int32_t segv = tw.reg(make_native_chip_callable({INOUT}, segv_orch, kernels()));
  for (int i = 0; i < 3; i++) {
    Error e = tw.run(segv, {vec(px, 1)});
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.message.find("SIGSEGV"), std::string::npos) << e.message;
  }
  Error e = tw.run(tw.reg(make_native_chip_callable({INOUT, SC, SC}, chain_orch, kernels())), {vec(px, 1)}, {2, 0});
  ASSERT_TRUE(e.ok()) << e.message;
  EXPECT_EQ(tw.download(px, 1)[0], 3.f);
}

// An executor thread's alternate signal stack is its own while it lives:
// the stack the thread had before (here a stack of the test's) is in place
// again when it ends, and ours is freed. A thread_local constructed before
// prepare_thread_for_faults() is destroyed after its guard, so it sees the
// thread's last state; it then puts back the stack the thread was born with
// (a sanitizer's, which the sanitizer frees itself).
namespace {
struct AltStackProbe {
  stack_t* seen = nullptr;
  stack_t born{};
  AltStackProbe() { sigaltstack(nullptr, &born); }
  ~AltStackProbe() {
    if (seen) sigaltstack(nullptr, seen);
    if (!(born.ss_flags & SS_DISABLE)) born.ss_flags = 0;
    sigaltstack(&born, nullptr);
  }
};
}  // namespace

TEST(RuntimeEngine, FaultGuardRestoresTheThreadsSignalStack) {
  static char theirs[64 * 1024];
  stack_t during{}, after{};
  std::thread t([&] {
    static thread_local AltStackProbe probe;
    probe.seen = &after;
    stack_t mine{};
    mine.ss_sp = theirs;
    mine.ss_size = sizeof theirs;
    ASSERT_EQ(sigaltstack(&mine, nullptr), 0);
    simpler::prepare_thread_for_faults();
    simpler::prepare_thread_for_faults();  // a second call keeps the first stack
    sigaltstack(nullptr, &during);
  });
  t.join();
  EXPECT_NE(during.ss_sp, static_cast<void*>(theirs));  // the guard's own stack while the thread ran
  EXPECT_EQ(during.ss_flags & SS_DISABLE, 0);
  EXPECT_EQ(after.ss_sp, static_cast<void*>(theirs));  // the previous stack again at its end
  EXPECT_EQ(after.ss_size, sizeof theirs);
  EXPECT_EQ(after.ss_flags & SS_DISABLE, 0);
  // A thread that had none has none again.
  stack_t none_after{};
  std::thread u([&] {
    static thread_local AltStackProbe probe;
    probe.seen = &none_after;
    stack_t off{};
    off.ss_flags = SS_DISABLE;
    ASSERT_EQ(sigaltstack(&off, nullptr), 0);
    simpler::prepare_thread_for_faults();
  });
  u.join();
  EXPECT_NE(none_after.ss_flags & SS_DISABLE, 0);
}

TEST(RuntimeEngine, BadSubmitsNameTheTask) {
  TestWorker tw;
  uint64_t px = tw.upload({1.f, 2.f});
  struct Case {
    simpler::OrchEntry orch;
    const char* expect;
  } cases[] = {
      {unknown_func_orch, "unknown func_id 99"},
      {bad_signature_orch, "tensor argument 1 is OUT in the kernel's signature but was added with add_input"},
      {outside_orch, "outside its allocation"},
      {throw_orch, "the orchestration gave up"},
      {unbalanced_orch, "scope(s) still open"},
      {escaped_orch, "created (TensorCreateInfo) in a scope that has ended"},
  };
  for (const Case& c : cases) {
    Error e = tw.run(tw.reg(make_native_chip_callable({INOUT}, c.orch, kernels())), {vec(px, 2)});
    ASSERT_FALSE(e.ok()) << c.expect;
    EXPECT_NE(e.message.find(c.expect), std::string::npos) << e.message;
  }
  // Wrong number of chip arguments.
  Error e = tw.run(tw.reg(make_native_chip_callable({INOUT}, segv_orch, kernels())), {vec(px, 2), vec(px, 2)});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.message.find("signature has 1 tensor(s)"), std::string::npos) << e.message;
  // A chip tensor running past its allocation.
  e = tw.run(tw.reg(make_native_chip_callable({INOUT, SC, SC}, chain_orch, kernels())), {vec(px + 4, 2)}, {1, 0});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.message.find("outside its allocation"), std::string::npos) << e.message;
  // Still usable.
  e = tw.run(tw.reg(make_native_chip_callable({INOUT, SC, SC}, chain_orch, kernels())), {vec(px + 4, 1)}, {2, 0});
  ASSERT_TRUE(e.ok()) << e.message;
  EXPECT_EQ(tw.download(px, 2)[1], 4.f);
}

TEST(RuntimeEngine, ManualScopeAndExplicitDependencies) {
  TestWorker tw;
  uint64_t px = tw.upload({1.f, 2.f, 3.f}), py = tw.upload({0.f, 0.f, 0.f});
  Error e = tw.run(tw.reg(make_native_chip_callable({INOUT, OUT}, manual_orch, kernels())), {vec(px, 3), vec(py, 3)});
  ASSERT_TRUE(e.ok()) << e.message;
  EXPECT_EQ(tw.download(py, 3), (std::vector<float>{2.f, 3.f, 4.f}));
}

TEST(RuntimeEngine, WriteAfterReadNeedsInout) {
  TestWorker tw;
  uint64_t px = tw.upload({1.f, 2.f}), py = tw.upload({0.f, 0.f});
  Error e = tw.run(tw.reg(make_native_chip_callable({INOUT, OUT}, war_orch, kernels())), {vec(px, 2), vec(py, 2)});
  ASSERT_TRUE(e.ok()) << e.message;
  EXPECT_EQ(tw.download(py, 2), (std::vector<float>{1.f, 2.f}));  // read before the write
  EXPECT_EQ(tw.download(px, 2), (std::vector<float>{2.f, 3.f}));
}

TEST(RuntimeEngine, SpmdBlocksCoverTheOutput) {
  TestWorker tw(false, 3);
  const uint32_t n = 1000;
  uint64_t p = tw.upload(std::vector<float>(n, NAN));
  int32_t slot = tw.reg(make_native_chip_callable({OUT, SC}, spmd_orch, kernels()));
  for (uint64_t blocks : {1, 7, 64}) {
    Error e = tw.run(slot, {vec(p, n)}, {blocks});
    ASSERT_TRUE(e.ok()) << e.message;
    auto v = tw.download(p, n);
    for (uint32_t i = 0; i < n; i++) {
      ASSERT_EQ(v[i] >= 100.f * blocks && v[i] < 100.f * blocks + blocks, true) << i;
      const uint32_t blk = uint32_t(v[i] - 100.f * float(blocks));
      ASSERT_GE(i, uint32_t(uint64_t(n) * blk / blocks));
      ASSERT_LT(i, uint32_t(uint64_t(n) * (blk + 1) / blocks));
    }
  }
}

TEST(RuntimeEngine, BuiltinGemmRunsWithoutACompiler) {
  TestWorker tw;
  const uint32_t M = 33, K = 20, N = 17;
  auto A = random_vec(M * K, 5), B = random_vec(K * N, 6);
  uint64_t pa = tw.upload(A), pb = tw.upload(B), pc = tw.upload(std::vector<float>(M * N, NAN));
  CallablePtr gemm, gemm_t;
  ASSERT_TRUE(simpler::make_builtin_callable("gemm", "", &gemm).ok());
  Error bad = simpler::make_builtin_callable("gemm", "transpose_q=1", &gemm_t);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message.find("unknown built-in parameter"), std::string::npos);
  EXPECT_FALSE(simpler::make_builtin_callable("no_such_op", "", &gemm_t).ok());
  // C = A @ B, then D = C (M x N) split in two row blocks, each C_block @ I... keep it simple:
  // two tasks on row halves of A and C (independent), then the full product again into D.
  auto orch = [](const ChipTaskArgs& args) {
    const ChipTensor& a = args.tensor(0).ref();
    const ChipTensor& b = args.tensor(1).ref();
    const ChipTensor& c = args.tensor(2).ref();
    const uint32_t m = a.shapes[0], k = a.shapes[1], n = b.shapes[1];
    const uint32_t half = m / 2;
    uint32_t sa0[2] = {half, k}, sa1[2] = {m - half, k}, sc0[2] = {half, n}, sc1[2] = {m - half, n};
    uint32_t o0[2] = {0, 0}, o1[2] = {half, 0};
    CoreTaskArgs p0, p1;
    p0.add_input(make_view(a, sa0, o0));
    p0.add_input(b);
    p0.add_output(make_view(c, sc0, o0));
    p1.add_input(make_view(a, sa1, o1));
    p1.add_input(b);
    p1.add_output(make_view(c, sc1, o1));
    rt_submit_task(0, p0);
    rt_submit_task(0, p1);
  };
  Error e = tw.run(tw.reg(make_native_chip_callable({IN, IN, OUT}, orch, {{0, gemm}})),
                   {mat(pa, M, K), mat(pb, K, N), mat(pc, M, N)});
  ASSERT_TRUE(e.ok()) << e.message;
  auto C = tw.download(pc, M * N);
  for (uint32_t i = 0; i < M; i++)
    for (uint32_t j = 0; j < N; j++) {
      double want = 0;
      for (uint32_t k = 0; k < K; k++) want += double(A[i * K + k]) * B[k * N + j];
      ASSERT_NEAR(C[i * N + j], want, 1e-4 * (1 + std::fabs(want))) << i << "," << j;
    }
}
