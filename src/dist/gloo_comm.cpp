// Collectives on host memory through the gloo library (TCP transport).
//
//   allreduce       gloo::allreduce, ring algorithm, our element-wise
//                   reduction for f32/f16/bf16 (16-bit values are widened to
//                   f32, combined, and rounded back, pairwise as the ring
//                   meets them); AVG = SUM, then * 1/n
//   broadcast       gloo::broadcast (root sends to every rank)
//   allgather       gloo::allgather (ring)
//   reduce_scatter  gloo::ReduceScatterHalvingDoubling on a scratch copy
//   barrier         gloo::barrier
//
// Rendezvous goes through our Store (adapted to gloo's Store interface) or
// gloo's FileStore. Every operation carries the group's timeout; gloo throws
// on a deadline or a closed connection, which becomes TC_ERR_TIMEOUT here and
// marks the group broken (gloo's pairs are unusable after an error).
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "core/error.h"
#include "core/half.h"
#include "core/convert.h"
#include "dist/comm.h"

namespace tc {
namespace dist {

namespace {

// ---- element-wise reductions --------------------------------------------

struct SumOp {
  static float apply(float a, float b) { return a + b; }
};
struct MaxOp {
  static float apply(float a, float b) { return a > b || a != a ? a : b; }  // NaN propagates
};
struct MinOp {
  static float apply(float a, float b) { return a < b || a != a ? a : b; }
};

template <class Op>
void reduce_f32(void* out, const void* a, const void* b, size_t n) {
  float* o = static_cast<float*>(out);
  const float* x = static_cast<const float*>(a);
  const float* y = static_cast<const float*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = Op::apply(x[i], y[i]);
}

// 16-bit: widen a chunk of each input, combine in f32, narrow (round to
// nearest even), chunk by chunk so the scratch stays on the stack.
template <class Op, bool BF16>
void reduce_16(void* out, const void* a, const void* b, size_t n) {
  constexpr size_t kChunk = 2048;
  float xa[kChunk], xb[kChunk];
  auto* o = static_cast<uint16_t*>(out);
  auto* x = static_cast<const uint16_t*>(a);
  auto* y = static_cast<const uint16_t*>(b);
  for (size_t i = 0; i < n; i += kChunk) {
    int64_t m = int64_t(std::min(kChunk, n - i));
    widen_row(BF16, x + i, xa, m);
    widen_row(BF16, y + i, xb, m);
    for (int64_t j = 0; j < m; ++j) xa[j] = Op::apply(xa[j], xb[j]);
    narrow_row(BF16, xa, o + i, m);
  }
}

template <class Op>
gloo::AllreduceOptions::Func reduce_for(tc_dtype dtype) {
  if (dtype == TC_DTYPE_F32) return &reduce_f32<Op>;
  if (dtype == TC_DTYPE_BF16) return &reduce_16<Op, true>;
  return &reduce_16<Op, false>;
}

gloo::AllreduceOptions::Func reduce_fn(tc_dtype dtype, int32_t op) {
  if (op == TC_REDUCE_MAX) return reduce_for<MaxOp>(dtype);
  if (op == TC_REDUCE_MIN) return reduce_for<MinOp>(dtype);
  return reduce_for<SumOp>(dtype);  // SUM and AVG
}

// The old-style reduce-scatter takes a ReductionFunction<T>; 16-bit types
// ride on uint16_t with our functions.
template <class Op, bool BF16>
void reduce_16_inplace(uint16_t* x, const uint16_t* y, size_t n) {
  reduce_16<Op, BF16>(x, x, y, n);
}
template <class Op>
void reduce_f32_inplace(float* x, const float* y, size_t n) {
  reduce_f32<Op>(x, x, y, n);
}

void scale(void* buf, size_t n, tc_dtype dtype, float s) {
  if (dtype == TC_DTYPE_F32) {
    float* p = static_cast<float*>(buf);
    for (size_t i = 0; i < n; ++i) p[i] *= s;
    return;
  }
  bool bf16 = dtype == TC_DTYPE_BF16;
  auto* p = static_cast<uint16_t*>(buf);
  constexpr size_t kChunk = 2048;
  float t[kChunk];
  for (size_t i = 0; i < n; i += kChunk) {
    int64_t m = int64_t(std::min(kChunk, n - i));
    widen_row(bf16, p + i, t, m);
    for (int64_t j = 0; j < m; ++j) t[j] *= s;
    narrow_row(bf16, t, p + i, m);
  }
}

// ---- rendezvous ------------------------------------------------------------

// Our Store under gloo's interface. gloo expects exceptions on failure.
class StoreAdapter final : public gloo::rendezvous::Store {
 public:
  StoreAdapter(dist::Store* store, int64_t timeout_ms, std::function<std::string()> note)
      : store_(store), timeout_ms_(timeout_ms), note_(std::move(note)) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    std::string why;
    if (store_->set(key, std::string(data.begin(), data.end()), &why) != TC_OK) throw gloo::IoException(why);
  }
  std::vector<char> get(const std::string& key) override {
    std::string v, why;
    if (store_->get(key, deadline_after_ms(timeout_ms_), &v, &why) != TC_OK) throw gloo::IoException(why + (note_ ? note_() : std::string()));
    return std::vector<char>(v.begin(), v.end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, std::chrono::milliseconds(timeout_ms_)); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    Deadline d = Clock::now() + std::min(timeout, std::chrono::milliseconds(timeout_ms_));
    for (auto& k : keys) {
      std::string v, why;
      if (store_->get(k, d, &v, &why) != TC_OK) throw gloo::IoException(why + (note_ ? note_() : std::string()));
    }
  }

 private:
  dist::Store* store_;
  int64_t timeout_ms_;
  std::function<std::string()> note_;
};

// ---- the communicator --------------------------------------------------------

class GlooComm final : public Comm {
 public:
  GlooComm(std::shared_ptr<gloo::transport::Device> dev, std::shared_ptr<gloo::Context> ctx, int64_t timeout_ms)
      : dev_(std::move(dev)), ctx_(std::move(ctx)), timeout_(timeout_ms) {}

  int rank() const override { return ctx_->rank; }
  int size() const override { return ctx_->size; }
  void set_timeout_ms(int64_t ms) override {
    timeout_ = std::chrono::milliseconds(ms);
    ctx_->setTimeout(timeout_);
  }

  tc_status allreduce(void* buf, size_t n, tc_dtype dtype, int32_t op) override {
    return run("allreduce", [&] {
      gloo::AllreduceOptions o(ctx_);
      if (dtype == TC_DTYPE_F32)
        o.setOutput(static_cast<float*>(buf), n);
      else
        o.setOutput(static_cast<uint16_t*>(buf), n);
      o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      o.setReduceFunction(reduce_fn(dtype, op));
      o.setTimeout(timeout_);
      gloo::allreduce(o);
      if (op == TC_REDUCE_AVG) scale(buf, n, dtype, 1.0f / float(size()));
    });
  }

  tc_status broadcast(void* buf, size_t n, tc_dtype dtype, int root) override {
    return run("broadcast", [&] {
      gloo::BroadcastOptions o(ctx_);
      o.setOutput(static_cast<char*>(buf), n * dtype_size(dtype));
      o.setRoot(root);
      o.setTimeout(timeout_);
      gloo::broadcast(o);
    });
  }

  tc_status allgather(const void* src, void* dst, size_t n, tc_dtype dtype) override {
    return run("allgather", [&] {
      size_t bytes = n * dtype_size(dtype);
      gloo::AllgatherOptions o(ctx_);
      o.setInput(const_cast<char*>(static_cast<const char*>(src)), bytes);
      o.setOutput(static_cast<char*>(dst), bytes * size_t(size()));
      o.setTimeout(timeout_);
      gloo::allgather(o);
    });
  }

  tc_status reduce_scatter(const void* src, void* dst, size_t n, tc_dtype dtype, int32_t op) override {
    if (uint64_t(n) * uint64_t(size()) > uint64_t(INT32_MAX))
      return fail(TC_ERR_INVALID_SHAPE, "reduce_scatter: gloo's reduce-scatter counts elements in int (%zu x %d)", n,
                  size());
    return run("reduce_scatter", [&] {
      size_t esz = dtype_size(dtype), total = n * size_t(size());
      std::vector<char> scratch(static_cast<const char*>(src), static_cast<const char*>(src) + total * esz);
      std::vector<int> recv(static_cast<size_t>(size()), static_cast<int>(n));
      if (dtype == TC_DTYPE_F32) {
        using RF = gloo::ReductionFunction<float>;
        static const RF sum(gloo::SUM, &reduce_f32_inplace<SumOp>), mx(gloo::MAX, &reduce_f32_inplace<MaxOp>),
            mn(gloo::MIN, &reduce_f32_inplace<MinOp>);
        const RF* fn = op == TC_REDUCE_MAX ? &mx : op == TC_REDUCE_MIN ? &mn : &sum;
        gloo::ReduceScatterHalvingDoubling<float> algo(ctx_, {reinterpret_cast<float*>(scratch.data())}, int(total),
                                                       recv, fn);
        algo.run();
      } else {
        using RF = gloo::ReductionFunction<uint16_t>;
        bool bf = dtype == TC_DTYPE_BF16;
        static const RF sum_b(gloo::SUM, &reduce_16_inplace<SumOp, true>),
            max_b(gloo::MAX, &reduce_16_inplace<MaxOp, true>), min_b(gloo::MIN, &reduce_16_inplace<MinOp, true>),
            sum_h(gloo::SUM, &reduce_16_inplace<SumOp, false>), max_h(gloo::MAX, &reduce_16_inplace<MaxOp, false>),
            min_h(gloo::MIN, &reduce_16_inplace<MinOp, false>);
        const RF* fn = op == TC_REDUCE_MAX ? (bf ? &max_b : &max_h)
                       : op == TC_REDUCE_MIN ? (bf ? &min_b : &min_h)
                                             : (bf ? &sum_b : &sum_h);
        gloo::ReduceScatterHalvingDoubling<uint16_t> algo(ctx_, {reinterpret_cast<uint16_t*>(scratch.data())},
                                                          int(total), recv, fn);
        algo.run();
      }
      // The algorithm's distribution phase leaves this rank's block at the
      // start of the buffer.
      std::memcpy(dst, scratch.data(), n * esz);
      if (op == TC_REDUCE_AVG) scale(dst, n, dtype, 1.0f / float(size()));
    });
  }

  tc_status barrier() override {
    return run("barrier", [&] {
      gloo::BarrierOptions o(ctx_);
      o.setTimeout(timeout_);
      gloo::barrier(o);
    });
  }

  tc_status fork(std::unique_ptr<Comm>* out) override {
    std::shared_ptr<gloo::Context> c;
    tc_status st = run("fork", [&] {
      gloo::rendezvous::ContextFactory factory(ctx_);
      c = factory.makeContext(dev_);
      c->setTimeout(timeout_);
    });
    if (st) return st;
    *out = std::make_unique<GlooComm>(dev_, c, timeout_.count());
    return TC_OK;
  }

 private:
  template <class F>
  tc_status run(const char* what, F&& body) {
    if (broken_)
      return fail(TC_ERR_TIMEOUT, "%s: the group is broken by an earlier failure (%s); finalize it", what,
                  broken_detail_.c_str());
    try {
      body();
      return TC_OK;
    } catch (const gloo::IoException& e) {
      return broke(what, e.what());
    } catch (const gloo::EnforceNotMet& e) {
      return broke(what, e.what());
    } catch (const gloo::Exception& e) {
      return broke(what, e.what());
    }
  }
  tc_status broke(const char* what, const char* msg) {
    broken_ = true;
    broken_detail_ = msg;
    return fail(TC_ERR_TIMEOUT, "%s: a peer died or did not answer within %lld ms (gloo: %s)", what,
                (long long)timeout_.count(), msg);
  }

  std::shared_ptr<gloo::transport::Device> dev_;
  std::shared_ptr<gloo::Context> ctx_;
  std::chrono::milliseconds timeout_;
  bool broken_ = false;
  std::string broken_detail_;
};

}  // namespace

bool gloo_built() { return true; }

tc_status make_gloo_comm(const GroupSpec& spec, std::unique_ptr<Comm>* out) {
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = spec.iface_host.empty() ? "127.0.0.1" : spec.iface_host;
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(spec.rank, spec.size);
    ctx->setTimeout(std::chrono::milliseconds(spec.timeout_ms));
    if (spec.store) {
      StoreAdapter adapter(spec.store, spec.timeout_ms, spec.note);
      ctx->connectFullMesh(adapter, dev);
    } else {
      gloo::rendezvous::FileStore fs(spec.file_dir);
      ctx->connectFullMesh(fs, dev);
    }
    *out = std::make_unique<GlooComm>(dev, ctx, spec.timeout_ms);
    return TC_OK;
  } catch (const gloo::IoException& e) {
    return fail(TC_ERR_TIMEOUT, "gloo rendezvous of rank %d/%d failed within %lld ms: %s", spec.rank, spec.size,
                (long long)spec.timeout_ms, e.what());
  } catch (const gloo::EnforceNotMet& e) {
    return fail(TC_ERR_TIMEOUT, "gloo rendezvous of rank %d/%d failed: %s", spec.rank, spec.size, e.what());
  } catch (const gloo::Exception& e) {
    return fail(TC_ERR_TIMEOUT, "gloo rendezvous of rank %d/%d failed: %s", spec.rank, spec.size, e.what());
  }
}

}  // namespace dist
}  // namespace tc
