// Activation checkpointing: a process-wide registry of buffers whose
// storage can be discarded and later recomputed (tensorcore/memory.h).
//
// Each entry moves through Resident -> Discarding -> Discarded -> Realizing
// -> Resident under one registry mutex; the storage swaps themselves
// (core/tiers.h) and the user's recompute callback run outside it, so a
// callback may call tensorcore (other checkpoints included) freely. Callers
// of the same id wait while another thread is between two states.
#pragma once

#include <cstdint>

#include "tensorcore/memory.h"

struct tc_buffer_s;

namespace tc {
namespace checkpoint {

// Arguments are validated by src/capi (live owned buffer, non-null fn).
tc_status register_buffer(tc_buffer_s* buf, tc_checkpoint_recompute_fn fn, void* user_data, uint64_t* out_id);
tc_status discard(uint64_t id);
tc_status realize(uint64_t id);
bool is_resident(uint64_t id);
tc_status unregister(uint64_t id);
uint64_t bytes_discarded();
uint64_t count_resident();
uint64_t count_discarded();

// tc_buffer_free of a registered buffer drops its entry (after a discard or
// realize in progress on another thread; refused from its own callback).
tc_status forget_buffer(tc_buffer_s* buf);

}  // namespace checkpoint
}  // namespace tc
