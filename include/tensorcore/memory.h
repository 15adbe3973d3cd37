/* tensorcore: memory tiers and activation checkpointing.
 *
 * Memory tiers. A buffer's bytes live in one tier at a time:
 *   L0 device memory (the context's memory: GPU memory on CUDA, RAM on the CPU)
 *   L1 host RAM (page-locked on CUDA, so copies to and from the GPU are DMA)
 *   L3 a spill file on local disk, one file per buffer, in the directory
 *      tc_context_set_spill_dir() names, else $TC_TIER_DIR, else
 *      <system temp dir>/tensorcore-spill-<euid>; removed when the buffer is
 *      freed or its bytes move back. The directory is created 0700 and used
 *      only while it is a real directory (not a symbolic link) owned by the
 *      effective user with no group/other permission bits; otherwise a move
 *      to L3 fails with TC_ERR_IO naming the path and the reason.
 * L2 (remote RAM) and L4 (remote NVMe) need a remote runtime that this build
 * does not have: every call naming them returns TC_ERR_UNSUPPORTED.
 *
 * Ops, tc_buffer_read/write/map/device_ptr accept only buffers whose bytes
 * are in L0; any other buffer is refused with TC_ERR_INVALID_ARG and a
 * detail naming its tier (promote it first). A call on a buffer with a move
 * in flight waits for the move to finish. See docs/memory-tiers.md. */
#ifndef TENSORCORE_MEMORY_H
#define TENSORCORE_MEMORY_H

#include "tensorcore/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Tiers (values are part of the ABI). */
typedef int32_t tc_memory_tier;
#define TC_TIER_L0_DEVICE 0
#define TC_TIER_L1_HOST_RAM 1
#define TC_TIER_L2_REMOTE_RAM 2
#define TC_TIER_L3_LOCAL_NVME 3
#define TC_TIER_L4_REMOTE_NVME 4

/* Hints: how soon the caller expects to use a buffer again. HOT and WARM
 * buffers never move on their own; COLD and ICE buffers (ICE first) may be
 * demoted automatically when an allocation would exceed the context's
 * memory budget. */
typedef int32_t tc_tier_hint;
#define TC_TIER_HINT_HOT 0
#define TC_TIER_HINT_WARM 1
#define TC_TIER_HINT_COLD 2
#define TC_TIER_HINT_ICE 3

/* Records the hint (every buffer starts WARM). */
TC_API tc_status tc_buffer_set_tier_hint(tc_buffer buf, tc_tier_hint hint);

/* The tier the buffer's bytes are in now. While a move is in flight that is
 * still the source tier; tc_buffer_tier_sync waits for the move. */
TC_API tc_status tc_buffer_get_tier(tc_buffer buf, tc_memory_tier* out);

/* Moves the bytes to a faster (promote) or slower (demote) tier. With a
 * stream the move is ordered after the work already enqueued on it and the
 * call returns at once; with a null stream it completes before returning.
 * The target may equal the current tier (nothing happens); a promote to a
 * slower tier or a demote to a faster one is TC_ERR_INVALID_ARG. Buffers
 * wrapping caller memory (tc_buffer_from_ptr) and discarded checkpoints do
 * not move (TC_ERR_INVALID_ARG). A failed move (TC_ERR_IO for a full disk or
 * an unwritable spill directory, TC_ERR_ALLOC) leaves the bytes where they
 * were; an asynchronous move reports its failure at tc_buffer_tier_sync.
 * A move does not wait for work that uses the buffer on other streams. */
TC_API tc_status tc_buffer_promote_async(tc_buffer buf, tc_memory_tier target_tier, tc_stream stream);
TC_API tc_status tc_buffer_demote_async(tc_buffer buf, tc_memory_tier target_tier, tc_stream stream);

/* Waits for the buffer's move in flight, if any, and returns its status
 * (TC_OK when none failed since the last sync). */
TC_API tc_status tc_buffer_tier_sync(tc_buffer buf);

/* Bytes resident in `tier` for this context and the tier's capacity:
 *   L0: bytes of the context's buffers in device memory / the memory budget
 *       if one is set, else the device's memory (physical RAM on the CPU)
 *   L1: bytes of the context's buffers in host RAM / the host budget if set,
 *       else physical RAM
 *   L3: bytes of the context's spill files / free space of the spill
 *       directory's file system
 * Either output pointer may be null. */
TC_API tc_status tc_memory_tier_usage(tc_context ctx, tc_memory_tier tier, uint64_t* out_bytes_resident,
                                      uint64_t* out_bytes_capacity);

/* Caps the bytes of the context's buffers in device memory (0 = no cap).
 * An allocation (tc_buffer_alloc, a checkpoint realize, a promote to L0)
 * that would pass it first demotes idle COLD/ICE buffers (ICE first) to L1,
 * or to L3 when L1 would pass the host budget; if it still does not fit it
 * fails with TC_ERR_ALLOC. A new cap applies to later allocations. */
TC_API tc_status tc_context_set_memory_budget(tc_context ctx, uint64_t device_bytes);

/* Caps the bytes of the context's buffers in host RAM (L1; 0 = no cap). A
 * move into L1 that would pass it first demotes idle COLD/ICE L1 buffers to
 * L3; if it still does not fit it fails with TC_ERR_ALLOC. */
TC_API tc_status tc_context_set_host_memory_budget(tc_context ctx, uint64_t host_bytes);

/* The directory of the context's L3 spill files (created 0700 on first use,
 * and checked to be private at every move to L3, as above); null or ""
 * restores the default ($TC_TIER_DIR, else the system temp dir). */
TC_API tc_status tc_context_set_spill_dir(tc_context ctx, const char* path);

/* Activation checkpointing.
 *
 * A registered buffer can be discarded (its storage is freed, the handle
 * stays valid, and any op, read, write or map of it fails with
 * TC_ERR_INVALID_ARG until it is realized) and realized (storage of the same
 * size is allocated in L0, then the recompute callback fills it). Work
 * already enqueued on a stream keeps the discarded storage alive until it
 * completes. Ids are process-wide and never reused; every call is safe from
 * any thread. Freeing a registered buffer unregisters it. */
typedef uint64_t tc_checkpoint_id;

/* Fills the realized buffer (typically by running the ops that produced
 * it); returns TC_OK or a failure status. It runs on the thread that called
 * tc_checkpoint_realize and may call any tensorcore function except
 * discard/realize/unregister of its own checkpoint. */
typedef tc_status (*tc_checkpoint_recompute_fn)(void* user_data);

/* Registers `buf` (an owned buffer, not yet registered; TC_ERR_INVALID_ARG
 * otherwise) with its recompute callback (non-null). It starts resident. */
TC_API tc_status tc_checkpoint_register(tc_buffer buf, tc_checkpoint_recompute_fn recompute_fn, void* user_data,
                                        tc_checkpoint_id* out_id);

/* Frees the buffer's storage, in whatever tier it is. Discarding a
 * discarded checkpoint does nothing. */
TC_API tc_status tc_checkpoint_discard(tc_checkpoint_id id);

/* Allocates the storage again and runs the recompute callback. Realizing a
 * resident checkpoint does nothing. If the allocation or the callback fails,
 * the buffer stays discarded and that status is returned. */
TC_API tc_status tc_checkpoint_realize(tc_checkpoint_id id);

/* 1 when the checkpoint is registered and resident, else 0. */
TC_API int32_t tc_checkpoint_is_resident(tc_checkpoint_id id);

/* Forgets the checkpoint. A discarded buffer stays without storage (free it
 * or register it again to realize it). */
TC_API tc_status tc_checkpoint_unregister(tc_checkpoint_id id);

/* Over all registered checkpoints: bytes currently discarded, and how many
 * are resident and discarded. */
TC_API uint64_t tc_checkpoint_total_bytes_discarded(void);
TC_API uint64_t tc_checkpoint_count_resident(void);
TC_API uint64_t tc_checkpoint_count_discarded(void);

#ifdef __cplusplus
}
#endif

#endif /* TENSORCORE_MEMORY_H */
