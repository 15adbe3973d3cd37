// Helpers of the simpler runtime tests: a cpu Worker driven through the
// engine's C++ interface, with kernels and orchestrations that are plain
// functions of the test binary (no compiler needed).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "runtime/callable.h"
#include "runtime/worker.h"
#include "simpler/kernel.h"
#include "simpler/orchestration.h"
#include "simpler/simpler.h"

namespace rt_test {

using simpler::CallablePtr;
using simpler::Error;

inline ChipTensor vec(uint64_t ptr, uint32_t n, DataType dt = DataType::FLOAT32) {
  ChipTensor t{};
  t.buffer.addr = ptr;
  t.buffer.size = uint64_t(n) * simpler_dtype_size(int32_t(dt));
  t.ndims = 1;
  t.dtype = dt;
  t.shapes[0] = n;
  t.strides[0] = 1;
  return t;
}

inline ChipTensor mat(uint64_t ptr, uint32_t rows, uint32_t cols, DataType dt = DataType::FLOAT32) {
  ChipTensor t = vec(ptr, rows * cols, dt);
  t.ndims = 2;
  t.shapes[0] = rows, t.shapes[1] = cols;
  t.strides[0] = cols, t.strides[1] = 1;
  return t;
}

inline uint64_t f32_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

inline float bits_f32(uint64_t v) {
  uint32_t b = uint32_t(v);
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

struct TestWorker {
  std::unique_ptr<simpler::Worker> w;
  explicit TestWorker(bool host_build_graph = false, int cores = 2, uint64_t heap = 0) {
    simpler::WorkerConfig c;
    c.build_graph = host_build_graph;
    c.num_cores = cores;
    if (heap) c.heap_ring_size = heap;
    w = std::make_unique<simpler::Worker>(c);
    Error e = w->init();
    EXPECT_TRUE(e.ok()) << e.message;
  }
  ~TestWorker() { w->close(); }

  uint64_t upload(const std::vector<float>& v) {
    uint64_t p = 0;
    Error e = w->malloc(v.size() * 4, &p);
    EXPECT_TRUE(e.ok()) << e.message;
    e = w->copy_to(p, v.data(), v.size() * 4);
    EXPECT_TRUE(e.ok()) << e.message;
    return p;
  }
  std::vector<float> download(uint64_t p, size_t n) {
    std::vector<float> v(n);
    Error e = w->copy_from(v.data(), p, n * 4);
    EXPECT_TRUE(e.ok()) << e.message;
    return v;
  }

  int32_t reg(const CallablePtr& chip) {
    int32_t slot = -1;
    Error e = w->register_callable(chip, &slot);
    EXPECT_TRUE(e.ok()) << e.message;
    return slot;
  }

  // Runs to completion; returns the run's error.
  Error run(int32_t slot, const std::vector<ChipTensor>& tensors, const std::vector<uint64_t>& scalars = {},
            const simpler_call_config* cfg = nullptr) {
    simpler_task_args a{tensors.data(), uint32_t(tensors.size()), scalars.data(), uint32_t(scalars.size())};
    std::shared_ptr<simpler::RunState> r;
    if (Error e = w->submit(slot, a, cfg, &r); !e.ok()) return e;
    std::unique_lock<std::mutex> lk(r->mu);
    r->cv.wait(lk, [&] { return r->done; });
    return r->error;
  }
};

inline simpler_call_config rings(uint64_t window, uint64_t heap = 0, uint64_t deps = 0) {
  simpler_call_config c{};
  c.struct_size = sizeof c;
  for (int i = 0; i < SIMPLER_RING_COUNT; i++) {
    c.ring_task_window[i] = window;
    c.ring_heap[i] = heap;
    c.ring_dep_pool[i] = deps;
  }
  return c;
}

}  // namespace rt_test
