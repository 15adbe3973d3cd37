/* simpler: the task runtime's C ABI (the Python packages `simpler` and
 * `simpler_setup` are ctypes over it).
 *
 * A Worker drives one device (level 2). Callables are registered with it; a
 * run executes a ChipCallable's orchestration, which submits kernels as tasks
 * whose dependencies the runtime infers from the tensors they touch.
 * Every function returns a tc_status; a failure's detail (which argument,
 * which task) is in simpler_last_error_detail() on the calling thread. */
#ifndef SIMPLER_SIMPLER_H
#define SIMPLER_SIMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "simpler/tensor.h"
#include "tensorcore/channel.h"
#include "tensorcore/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct simpler_worker_s* simpler_worker;
typedef struct simpler_callable_s* simpler_callable;
typedef struct simpler_run_s* simpler_run;

/* Argument directions of a callable's signature. */
#define SIMPLER_ARG_SCALAR 0
#define SIMPLER_ARG_IN 1
#define SIMPLER_ARG_OUT 2
#define SIMPLER_ARG_INOUT 3

#define SIMPLER_RING_COUNT 4
#define SIMPLER_MAX_CALLABLES 64

typedef struct simpler_worker_config {
  uint32_t struct_size;    /* sizeof(simpler_worker_config) */
  int32_t level;           /* 2 (one device); 3 and up are not built yet */
  const char* platform;    /* "cpu" or "cuda" */
  const char* runtime;     /* "tensormap_and_ringbuffer" (default) or "host_build_graph" */
  int32_t device_id;       /* CUDA ordinal; 0 on cpu */
  int32_t num_cores;       /* cpu core threads; 0 = SIMPLER_CPU_CORES or the hardware threads */
  uint64_t heap_ring_size; /* bytes of each heap ring; 0 = 256 MiB */
} simpler_worker_config;

/* Per-call options. Zero means "default" for every field. */
typedef struct simpler_call_config {
  uint32_t struct_size;          /* sizeof(simpler_call_config) */
  int32_t aicpu_thread_num;      /* scheduler threads (cuda: launch streams); 0 = platform default */
  int32_t block_dim;             /* cores this run may use; 0 = all */
  int32_t enable_chip_swimlane;  /* 0 off, 1-4 detail */
  int32_t enable_dump_args;
  int32_t enable_pmu;            /* 0 off, > 0 event type */
  int32_t enable_dep_gen;
  int32_t enable_scope_stats;
  const char* output_prefix;     /* directory of diagnostic files; required when any is on */
  uint64_t ring_task_window[SIMPLER_RING_COUNT]; /* power of two >= 4, or 0 */
  uint64_t ring_heap[SIMPLER_RING_COUNT];        /* bytes >= 1024, or 0 */
  uint64_t ring_dep_pool[SIMPLER_RING_COUNT];    /* entries >= 4, or 0 */
} simpler_call_config;

typedef struct simpler_task_args {
  const ChipTensor* tensors; /* in signature order */
  uint32_t tensor_count;
  const uint64_t* scalars;
  uint32_t scalar_count;
} simpler_task_args;

typedef struct simpler_callable_info {
  int32_t kind;            /* 1 core callable, 2 chip callable */
  int32_t builtin;         /* 1 for a built-in tensorcore op */
  uint32_t signature_len;
  uint32_t child_count;
  uint64_t binary_size;
  char digest[65];         /* SHA-256 of the content, hex */
} simpler_callable_info;

typedef struct simpler_worker_info {
  int32_t level;
  int32_t initialized;
  int32_t closed;
  int32_t num_cores;       /* core threads (cpu) or launch streams (cuda) once initialised */
  char platform[16];
  char runtime[32];
  char device[256];        /* the device's name once initialised */
  uint64_t runs;           /* runs completed */
  uint64_t graph_builds;   /* host_build_graph: graphs recorded */
  uint64_t graph_replays;  /* host_build_graph: runs that replayed a cached graph */
} simpler_worker_info;

/* Version and errors. */
TC_API const char* simpler_version(void);
TC_API const char* simpler_last_error_detail(void);
TC_API tc_status simpler_last_error(void);

/* Checks a call config: a diagnostic needs output_prefix; ring overrides
 * follow their rules. */
TC_API tc_status simpler_call_config_validate(const simpler_call_config* cfg);

/* Workers. create validates the config; init opens the device and starts
 * the threads; close drains in-flight runs and releases everything (it is
 * idempotent); destroy closes and frees the handle. */
TC_API tc_status simpler_worker_create(const simpler_worker_config* cfg, simpler_worker* out);
TC_API tc_status simpler_worker_init(simpler_worker w);
TC_API tc_status simpler_worker_close(simpler_worker w);
TC_API tc_status simpler_worker_destroy(simpler_worker w);
TC_API tc_status simpler_worker_get_info(simpler_worker w, simpler_worker_info* out);

/* Device memory. Pointers are device addresses (host addresses on cpu).
 * copy_to/copy_from accept an interior address whose [addr, addr + nbytes)
 * lies within one live allocation. */
TC_API tc_status simpler_malloc(simpler_worker w, uint64_t nbytes, uint64_t* out);
TC_API tc_status simpler_free(simpler_worker w, uint64_t ptr);
TC_API tc_status simpler_copy_to(simpler_worker w, uint64_t dst, const void* src, uint64_t nbytes);
TC_API tc_status simpler_copy_from(simpler_worker w, void* dst, uint64_t src, uint64_t nbytes);

/* Callables. A core callable is one kernel binary (cpu: a shared object
 * exporting kernel_entry; cuda: a cubin) or a built-in tensorcore op; a chip
 * callable is an orchestration shared object plus (func_id, core callable)
 * children. Both are identified by a SHA-256 of their content. */
TC_API tc_status simpler_core_callable_create(const int32_t* signature, uint32_t signature_len, const void* binary,
                                              uint64_t binary_size, simpler_callable* out);
/* A built-in: `op` names a tensorcore op ("gemm", "gemm_batched"); `params`
 * is "key=value;key=value" (see docs/simpler.md). */
TC_API tc_status simpler_core_callable_builtin(const char* op, const char* params, simpler_callable* out);
TC_API tc_status simpler_chip_callable_create(const int32_t* signature, uint32_t signature_len, const char* func_name,
                                              const char* config_name, const void* binary, uint64_t binary_size,
                                              const int32_t* func_ids, const simpler_callable* children,
                                              uint32_t child_count, simpler_callable* out);
/* A chip callable whose orchestration is built in: it submits the tasks a
 * text description lists (func_ids of `children`, chip arguments, outputs of
 * earlier tasks, runtime-allocated outputs, scalars, scopes), so a graph of
 * built-in kernels needs no compiler. Format: src/runtime/task_list.h
 * (Python: ChipCallable.from_tasks). */
TC_API tc_status simpler_chip_callable_from_tasks(const int32_t* signature, uint32_t signature_len,
                                                  const char* description, const int32_t* func_ids,
                                                  const simpler_callable* children, uint32_t child_count,
                                                  simpler_callable* out);
TC_API tc_status simpler_callable_get_info(simpler_callable c, simpler_callable_info* out);
/* Signature of a callable (signature_len entries). */
TC_API tc_status simpler_callable_get_signature(simpler_callable c, int32_t* out, uint32_t capacity);
TC_API tc_status simpler_callable_release(simpler_callable c);

/* Registration, before or after init. Registering the same content again
 * returns the same slot. */
TC_API tc_status simpler_register(simpler_worker w, simpler_callable chip, int32_t* out_slot);
TC_API tc_status simpler_unregister(simpler_worker w, int32_t slot);

/* Runs. submit returns at once; runs of one worker execute in order. Host
 * tensors (addresses outside every allocation) must stay valid until the run
 * completes. */
TC_API tc_status simpler_submit(simpler_worker w, int32_t slot, const simpler_task_args* args,
                                const simpler_call_config* cfg, simpler_run* out);
/* Waits up to timeout_s seconds (< 0: forever). Returns TC_ERR_TIMEOUT when
 * the run is still going, else the run's status with its detail. */
TC_API tc_status simpler_run_wait(simpler_run r, double timeout_s);
TC_API int32_t simpler_run_done(simpler_run r);
TC_API tc_status simpler_run_release(simpler_run r);
/* submit + wait forever in one call, returning the run's status. A Worker
 * with nothing queued or running executes the run on the calling thread
 * (no hand-over to its orchestrating thread and back). */
TC_API tc_status simpler_run_sync(simpler_worker w, int32_t slot, const simpler_task_args* args,
                                  const simpler_call_config* cfg);


/* ---- dependency map (the TensorMap for a scheduler above the chips) ------
 * Tasks are named by ids the caller picks (each new one not live). submit
 * returns in out_producers the live tasks whose recorded writes overlap any
 * of the task's tensors (access: one byte each, SIMPLER_ARG_IN, OUT or
 * INOUT), each once,
 * then records the task's OUT/INOUT views as its writes. More producers than
 * `capacity` is an error (out_count says how many). finish ends n tasks
 * (all of them, or none when one is not live or named twice): their writes
 * order no later task. Views are checked as at a chip submit. */
typedef struct simpler_depmap_s* simpler_depmap;
TC_API tc_status simpler_depmap_create(simpler_depmap* out);
TC_API tc_status simpler_depmap_destroy(simpler_depmap m);
TC_API tc_status simpler_depmap_submit(simpler_depmap m, uint64_t task_id, const ChipTensor* tensors,
                                       const uint8_t* access, uint32_t n, uint64_t* out_producers,
                                       uint32_t capacity, uint32_t* out_count);
TC_API tc_status simpler_depmap_finish(simpler_depmap m, const uint64_t* task_ids, uint32_t n);
TC_API uint64_t simpler_depmap_size(simpler_depmap m);

/* ---- the level-3 scheduler (the parent of a level-3 Worker) -------------
 * Internal to the Python engine (python/simpler/level3/engine.py): task
 * records, dependencies, ready queues and the frames of the children's
 * shared-memory mailbox (python/simpler/level3/layout.py, whose values
 * `layout` must repeat), one call per task. Roles: 0 chip, 1 sub, 2 remote.
 * A run (its id picked by the caller) is recorded with its first task;
 * run_state: bit 0 done, bit 1 failed; -1 for a run without a record. See
 * docs/simpler.md. */
typedef struct simpler_l3_s* simpler_l3;
TC_API tc_status simpler_l3_create(void* mailbox, uint64_t mailbox_bytes, const uint32_t* layout, uint32_t n,
                                   simpler_l3* out);
TC_API tc_status simpler_l3_destroy(simpler_l3 s);
TC_API tc_status simpler_l3_notice(simpler_l3 s, void** out);
TC_API tc_status simpler_l3_add_endpoint(simpler_l3 s, int32_t role, int32_t block, int32_t efd, const char* label,
                                         uint32_t* out);
TC_API tc_status simpler_l3_add_template(simpler_l3 s, uint32_t kind, uint32_t slot, const char* label,
                                         uint32_t* out);
TC_API tc_status simpler_l3_endpoint_dead(simpler_l3 s, uint32_t ep, const char* why);
TC_API tc_status simpler_l3_run_close(simpler_l3 s, uint32_t run);
TC_API tc_status simpler_l3_run_release(simpler_l3 s, const uint32_t* runs, uint32_t n);
TC_API int32_t simpler_l3_run_state(simpler_l3 s, uint32_t run);
TC_API tc_status simpler_l3_run_error(simpler_l3 s, uint32_t run, int32_t* status, char* buf, uint64_t cap,
                                      uint64_t* len);
TC_API tc_status simpler_l3_submit(simpler_l3 s, uint32_t run, int32_t ep, uint32_t tpl, uint64_t id);
TC_API tc_status simpler_l3_submit_args(simpler_l3 s, uint32_t run, int32_t ep, uint32_t tpl, uint64_t id,
                                        uint32_t cfg, uint32_t nt, const ChipTensor* keys, const ChipTensor* child,
                                        const uint32_t* tags, const uint8_t* dirs, uint32_t ns,
                                        const uint64_t* scalars, uint32_t nshm, const uint32_t* shm, uint32_t ndev,
                                        const uint64_t* dev);
/* submit_args for the usual task of one tensor of a shared buffer and no
 * scalars (nt = nshm = 1): fewer arguments for the per-task call. */
TC_API tc_status simpler_l3_submit_one(simpler_l3 s, uint32_t run, int32_t ep, uint32_t tpl, uint64_t id, uint32_t cfg,
                                       const ChipTensor* key, const uint32_t* tag, const uint8_t* dir,
                                       const uint32_t* shm);
TC_API int32_t simpler_l3_poll(simpler_l3 s);
TC_API int32_t simpler_l3_any_done(simpler_l3 s);
TC_API tc_status simpler_l3_dispatch_all(simpler_l3 s);
TC_API tc_status simpler_l3_flush_wakes(simpler_l3 s);
TC_API tc_status simpler_l3_take_external(simpler_l3 s, uint64_t* ids, uint32_t cap, uint32_t* n);
TC_API tc_status simpler_l3_complete(simpler_l3 s, uint64_t id, int32_t status, const char* message);
TC_API tc_status simpler_l3_maps_needed(simpler_l3 s, uint32_t* ep, uint32_t* idx, uint32_t cap, uint32_t* n);
TC_API tc_status simpler_l3_mark_mapped(simpler_l3 s, uint32_t ep, const uint32_t* idx, uint32_t n);
TC_API tc_status simpler_l3_buffer_add(simpler_l3 s, uint32_t idx, uint64_t base, uint64_t nbytes,
                                       const char* name);
TC_API tc_status simpler_l3_buffer_drop(simpler_l3 s, uint32_t idx, uint32_t* holders, uint32_t cap, uint32_t* n);
TC_API int32_t simpler_l3_uses_buffer(simpler_l3 s, uint32_t idx);
TC_API int32_t simpler_l3_uses_dev(simpler_l3 s, uint32_t ep, uint64_t base);

/* ---- level-4 copies (a remote session and its parent) ---------------------
 * Internal to python/simpler/remote: a remote copy's request, bytes and
 * reply handled on the command lane's channel without the interpreter on
 * either side. The frames (COPY_TO, COPY_FROM, COPY_REPLY) are laid out in
 * python/simpler/remote/protocol.py and src/runtime/level4_copy.cpp.
 *
 * The session's side: a server knows the ranges it may copy into and out of
 * (its allocations and imports, host addresses of this process) and reads
 * the lane; a copy_from is answered inside its reply or, when the parent asks
 * for data frames, in frames of at most chunk_bytes (<= max_frame_bytes, and
 * no reply inside one frame is longer). simpler_l4_serve receives one
 * frame: a copy request is served (a range outside every allocation is
 * refused in the reply, its data
 * frames read and dropped) and *served is 1; any other frame is left in the
 * channel's buffer, *frame / *frame_bytes, as tc_channel_recv leaves it.
 * TC_ERR_TIMEOUT: no frame began (the lane is still in step). */
typedef struct simpler_l4_server_s* simpler_l4_server;
TC_API tc_status simpler_l4_server_create(tc_channel ch, uint64_t max_frame_bytes, uint64_t chunk_bytes,
                                          int64_t timeout_ms, simpler_l4_server* out);
TC_API tc_status simpler_l4_server_destroy(simpler_l4_server s);
TC_API tc_status simpler_l4_server_add(simpler_l4_server s, uint64_t addr, uint64_t nbytes);
TC_API tc_status simpler_l4_server_drop(simpler_l4_server s, uint64_t addr);
TC_API tc_status simpler_l4_serve(simpler_l4_server s, int32_t* served, const void** frame, uint64_t* frame_bytes);

/* The parent's side: a copier sends copies of at most inline_max bytes
 * inside their request or reply and longer ones as data frames of at most
 * chunk_bytes. copy_send sends the request (op 0: nbytes from buf to the
 * session's addr; op 1: from addr into buf) and, for op 0, its bytes; the
 * caller keeps other senders off the lane meanwhile. copy_await reads one
 * frame: the reply to `rid` sets *state to 0 (done: for op 1 the bytes are
 * in buf) or 2 (refused: simpler_l4_copier_refusal); any other frame sets
 * it to 1 and stays in the channel's buffer (simpler_l4_copier_frame). A
 * reply that does not match its request is TC_ERR_CORRUPT (the lane is out
 * of step); TC_ERR_TIMEOUT: no frame began (call again). */
typedef struct simpler_l4_copier_s* simpler_l4_copier;
TC_API tc_status simpler_l4_copier_create(tc_channel ch, uint64_t max_frame_bytes, uint64_t inline_max,
                                          uint64_t chunk_bytes, int64_t timeout_ms, simpler_l4_copier* out);
TC_API tc_status simpler_l4_copier_destroy(simpler_l4_copier c);
TC_API tc_status simpler_l4_copy_send(simpler_l4_copier c, int32_t op, uint64_t rid, uint64_t addr, void* buf,
                                      uint64_t nbytes);
TC_API tc_status simpler_l4_copy_await(simpler_l4_copier c, int32_t* state);
TC_API tc_status simpler_l4_copier_frame(simpler_l4_copier c, const void** frame, uint64_t* frame_bytes);
TC_API tc_status simpler_l4_copier_refusal(simpler_l4_copier c, int32_t* status, const char** message);

#ifdef __cplusplus
}
#endif

#endif /* SIMPLER_SIMPLER_H */
