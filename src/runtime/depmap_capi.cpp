// simpler_depmap_*: the DepMap (runtime/depmap.h) behind a small C ABI.
#include <new>
#include <string>

#include "runtime/depmap.h"
#include "runtime/error.h"
#include "simpler/simpler.h"

struct simpler_depmap_s {
  simpler::DepMap map;
};

using namespace simpler;

extern "C" {

tc_status simpler_depmap_create(simpler_depmap* out) {
  return guarded("simpler_depmap_create", [&]() -> Error {
    if (!out) return make_error(TC_ERR_INVALID_ARG, "simpler_depmap_create: output pointer is null");
    *out = new simpler_depmap_s();
    return {};
  });
}

tc_status simpler_depmap_destroy(simpler_depmap m) {
  delete m;
  return ok();
}

tc_status simpler_depmap_submit(simpler_depmap m, uint64_t task_id, const ChipTensor* tensors, const uint8_t* access,
                                uint32_t n, uint64_t* out_producers, uint32_t capacity, uint32_t* out_count) {
  return guarded("simpler_depmap_submit", [&]() -> Error {
    if (!m || !out_count || (n && (!tensors || !access)) || (capacity && !out_producers))
      return make_error(TC_ERR_INVALID_ARG, "simpler_depmap_submit: null argument");
    uint32_t count = 0;
    Error e = m->map.producers(task_id, tensors, access, n, [&](uint64_t id) {
      if (count < capacity) out_producers[count] = id;
      count++;
    });
    if (!e.ok()) return e;
    *out_count = count;
    if (count > capacity)  // nothing recorded: the task is not live
      return make_error(TC_ERR_INVALID_ARG, "task %llu has %u producers; the output holds %u",
                        (unsigned long long)task_id, count, capacity);
    m->map.record(task_id, tensors, access, n);
    return {};
  });
}

tc_status simpler_depmap_finish(simpler_depmap m, const uint64_t* task_ids, uint32_t n) {
  return guarded("simpler_depmap_finish", [&]() -> Error {
    if (!m || (n && !task_ids)) return make_error(TC_ERR_INVALID_ARG, "simpler_depmap_finish: null argument");
    Error e = m->map.finish(task_ids, n);
    if (!e.ok()) e.message = "simpler_depmap_finish: " + e.message;
    return e;
  });
}

uint64_t simpler_depmap_size(simpler_depmap m) { return m ? m->map.size() : 0; }

}  // extern "C"
