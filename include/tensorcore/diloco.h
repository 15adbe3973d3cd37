/* tensorcore: DiLoCo, low-communication data-parallel training.
 *
 * Every worker trains its own copy theta of the parameters for inner_steps
 * local steps (the caller's optimizer), then the outer step runs:
 *
 *   Delta_i = anchor - theta_i                      outer gradient of worker i
 *   c_i     = C(Delta_i + e_i),  e_i <- Delta_i + e_i - D(c_i)   compression
 *                                                   with error feedback
 *   g       = mean_i D(c_i)                         exchanged over the group
 *   anchor  = OuterOpt(anchor, g)                   identical on every rank
 *   theta_i = anchor
 *
 * Outer optimizers: SGD (anchor -= lr g); Nesterov (v = mu v + g;
 * anchor -= lr (g + mu v)); Adam (m, v moments with beta1 = outer_momentum,
 * beta2 = outer_beta2, bias-corrected, anchor -= lr m^ / (sqrt(v^) + eps)).
 * Compression: NONE (f32 allreduce), FP16 (f16 allreduce of Delta / n),
 * TOPK_1PCT / TOPK_01PCT (the largest 1% / 0.1% magnitudes of the whole
 * outer gradient as (index, value) pairs, allgathered). FP8, LOWRANK,
 * SIGNSGD and tolerate_dropouts are TC_ERR_UNSUPPORTED.
 *
 * async_overlap: apply_outer snapshots Delta (in the caller's thread) and
 * runs compression, exchange and the optimizer in a worker thread on private
 * copies while training continues. async_commit (or the next apply_outer)
 * installs the round at that boundary: anchor <- new anchor, and
 * theta <- new anchor + (theta - theta_at_snapshot), keeping the local
 * progress made while the round was in flight. Only caller-thread calls
 * read or write theta. */
#ifndef TENSORCORE_DILOCO_H
#define TENSORCORE_DILOCO_H

#include "tensorcore/dist.h"
#include "tensorcore/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tc_diloco_s* tc_diloco;

#define TC_DILOCO_COMPRESS_NONE 0
#define TC_DILOCO_COMPRESS_FP16 1
#define TC_DILOCO_COMPRESS_FP8 2
#define TC_DILOCO_COMPRESS_TOPK_1PCT 3
#define TC_DILOCO_COMPRESS_TOPK_01PCT 4
#define TC_DILOCO_COMPRESS_LOWRANK 5
#define TC_DILOCO_COMPRESS_SIGNSGD 6

#define TC_DILOCO_OUTER_SGD 0
#define TC_DILOCO_OUTER_NESTEROV 1
#define TC_DILOCO_OUTER_ADAM 2

/* States of the asynchronous round (tc_diloco_async_poll). */
#define TC_DILOCO_ASYNC_IDLE 0
#define TC_DILOCO_ASYNC_RUNNING 1
#define TC_DILOCO_ASYNC_READY 2
#define TC_DILOCO_ASYNC_FAILED 3

/* State blobs: v2 "TCDLSTA2" with a 64-byte header (version, header size,
 * payload size, SHA-256 of the payload); v1 "TCDLSTA1" with a 32-byte header
 * and no digest. */
#define TC_DILOCO_STATE_ABI_VERSION_1 1
#define TC_DILOCO_STATE_ABI_VERSION_2 2
#define TC_DILOCO_STATE_ABI_VERSION_MIN 1
#define TC_DILOCO_STATE_ABI_VERSION_CURRENT 2
#define TC_DILOCO_STATE_V1_HEADER_SIZE 32
#define TC_DILOCO_STATE_V2_HEADER_SIZE 64
#define TC_DILOCO_STATE_V2_DIGEST_BYTES 32

#define TC_DILOCO_CAPABILITIES_ABI_VERSION_1 1
#define TC_DILOCO_CAPABILITIES_ABI_VERSION_CURRENT 1

/* What a state blob carries (tc_diloco_capabilities.state_feature_mask). */
#define TC_DILOCO_STATE_FEATURE_OUTER_ANCHOR (1ull << 0)
#define TC_DILOCO_STATE_FEATURE_OUTER_MOMENTS (1ull << 1)
#define TC_DILOCO_STATE_FEATURE_ERROR_FEEDBACK (1ull << 2)
#define TC_DILOCO_STATE_FEATURE_COUNTERS (1ull << 3)
#define TC_DILOCO_STATE_FEATURE_PENDING_ROUND (1ull << 4)
#define TC_DILOCO_STATE_FEATURE_TOPOLOGY_EPOCH (1ull << 5)
#define TC_DILOCO_STATE_FEATURE_MEMBERSHIP_EPOCH (1ull << 6)
#define TC_DILOCO_STATE_FEATURE_PAYLOAD_SHA256 (1ull << 7)
#define TC_DILOCO_STATE_FEATURE_DETERMINISTIC_LAYOUT (1ull << 8)
#define TC_DILOCO_STATE_FEATURE_ATOMIC_RESTORE (1ull << 9)

typedef struct tc_diloco_config {
  int32_t inner_steps;     /* >= 1 */
  float outer_lr;          /* > 0 */
  float outer_momentum;    /* Nesterov mu / Adam beta1, in [0, 1) */
  float outer_beta2;       /* Adam, in [0, 1) */
  float outer_eps;         /* Adam, > 0 */
  int32_t outer_optimizer; /* TC_DILOCO_OUTER_* */
  int32_t compress;        /* TC_DILOCO_COMPRESS_* */
  int32_t async_overlap;   /* 0 or 1 */
  int32_t tolerate_dropouts; /* must be 0: not implemented */
} tc_diloco_config;

struct tc_diloco_capabilities {
  uint32_t struct_size; /* set by the caller */
  uint32_t abi_version;
  uint32_t state_abi_version_min;
  uint32_t state_abi_version_max;
  uint32_t state_abi_version_current;
  uint32_t state_header_size;
  uint32_t state_payload_digest_bytes;
  uint32_t reserved0;
  uint64_t outer_optimizer_supported_mask;    /* bit (1 << TC_DILOCO_OUTER_x) */
  uint64_t outer_optimizer_serializable_mask;
  uint64_t compress_supported_mask;           /* bit (1 << TC_DILOCO_COMPRESS_x) */
  uint64_t compress_serializable_mask;
  uint64_t compress_sparse_wire_mask;         /* modes that send (index, value) pairs */
  uint64_t state_feature_mask;
  uint32_t async_overlap_supported;
  uint32_t async_state_serializable;          /* 0: serialize refuses an unfinished round */
  uint32_t tolerate_dropouts_supported;
  uint32_t reserved1;
};

/* Collective over the dist's group: every rank calls it with the same
 * config. Needs a SINGLE or GLOO group (NCCL: TC_ERR_UNSUPPORTED). Parameters
 * in device memory are read and written through the host by the outer step. */
TC_API tc_status tc_diloco_init(tc_dist dist, const tc_diloco_config* config, tc_diloco* out);
/* Waits for an unfinished round, drops it, and frees the context. */
TC_API tc_status tc_diloco_finalize(tc_diloco diloco);

/* Collective: every rank registers the same parameters in the same order
 * (checked); rank 0's values are broadcast into every theta, so all workers
 * start from one point. dtype F32, F16 or BF16 (the anchor is kept in f32). */
TC_API tc_status tc_diloco_add_parameter(tc_diloco diloco, const char* name, tc_buffer theta_local,
                                         size_t num_elements, tc_dtype dtype);

/* Counts one inner step; *out_outer_pending is 1 every inner_steps steps. */
TC_API tc_status tc_diloco_step(tc_diloco diloco, int32_t* out_outer_pending);
/* The outer step (collective). With async_overlap it commits a previous
 * round first, then launches this one and returns. */
TC_API tc_status tc_diloco_apply_outer(tc_diloco diloco);

TC_API tc_status tc_diloco_async_poll(tc_diloco diloco, int32_t* out_state, int32_t* out_worker_status,
                                      uint64_t* out_round_id);
/* Waits for the round; returns the worker's failure, if any. */
TC_API tc_status tc_diloco_async_wait(tc_diloco diloco);
/* READY: installs the round; RUNNING: waits, then installs; FAILED: drops
 * the round (its error feedback is restored); IDLE: nothing to do. */
TC_API tc_status tc_diloco_async_commit(tc_diloco diloco);

/* Changes the outer learning rate and momentum for the following outer
 * steps (a schedule); the same checks as tc_diloco_config's fields. Every rank
 * sets the same values (not checked). Adam keeps its step count, so its bias
 * correction uses the new momentum from then on. Refused while an
 * asynchronous round is unfinished. Serialized state records the current
 * values; restoring it leaves this context's values as they are. */
TC_API tc_status tc_diloco_set_outer_hyperparameters(tc_diloco diloco, float outer_lr, float outer_momentum);

/* diloco NULL: what this build supports; else refined for that context. */
TC_API tc_status tc_diloco_capability_query(tc_diloco diloco, uint32_t abi_version,
                                            struct tc_diloco_capabilities* out);

/* Epochs bind a state blob to a topology: a non-zero local epoch must match
 * the blob's on restore; zero adopts the blob's. */
TC_API tc_status tc_diloco_state_set_epochs(tc_diloco diloco, uint64_t topology_epoch, uint64_t membership_epoch);
TC_API tc_status tc_diloco_state_get_epochs(tc_diloco diloco, uint64_t* out_topology_epoch,
                                            uint64_t* out_membership_epoch);

/* DiLoCo-owned state (anchors, optimizer moments, error feedback, counters,
 * epochs); the caller restores its parameter buffers itself. Refused while a
 * round is unfinished. Deserialize checks everything (digest, sizes, names,
 * config) before changing anything: TC_ERR_CORRUPT for a damaged blob,
 * TC_ERR_INVALID_ARG for a blob of another setup. */
TC_API tc_status tc_diloco_state_size(tc_diloco diloco, uint32_t abi_version, size_t* out);
TC_API tc_status tc_diloco_state_serialize(tc_diloco diloco, uint32_t abi_version, void* out, size_t capacity,
                                           size_t* out_written);
TC_API tc_status tc_diloco_state_deserialize(tc_diloco diloco, uint32_t abi_version, const void* blob,
                                             size_t nbytes);

TC_API tc_status tc_diloco_outer_steps_completed(tc_diloco diloco, uint64_t* out);
TC_API tc_status tc_diloco_inner_steps_completed(tc_diloco diloco, uint64_t* out);
TC_API tc_status tc_diloco_last_outer_step_seconds(tc_diloco diloco, double* out);
/* Bytes this rank sent in the last outer step's exchange. */
TC_API tc_status tc_diloco_last_outer_bytes_sent(tc_diloco diloco, double* out);

#ifdef __cplusplus
}
#endif

#endif /* TENSORCORE_DILOCO_H */
