/* tensorcore: contexts, device information and runtime capabilities. */
#ifndef TENSORCORE_CONTEXT_H
#define TENSORCORE_CONTEXT_H

#include "tensorcore/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Used as `struct tc_device_info` (no typedef: the name is also a function). */
struct tc_device_info {
  char name[256];          /* processor or GPU name */
  char family[64];         /* "cpu" or the GPU architecture, e.g. "hopper" */
  char features[256];      /* comma-separated ISA features the kernels use */
  tc_backend backend;      /* backend that runs this context's ops */
  int32_t device_index;    /* CUDA ordinal; 0 on the CPU */
  int32_t compute_units;   /* worker threads on the CPU, SMs on a GPU */
  int32_t compute_capability; /* major*10+minor on CUDA, 0 elsewhere */
  uint64_t memory_bytes;   /* device memory (physical RAM on the CPU) */
};

/* Capability bits. A bit is meaningful only if it is in `known`; callers use
 * tc_capability_available(), so bits from a newer library fail closed. */
#define TC_CAPABILITY_GEMM_F32 (1ull << 0)
#define TC_CAPABILITY_GEMM_F16 (1ull << 1)
#define TC_CAPABILITY_GEMM_BF16 (1ull << 2)
#define TC_CAPABILITY_GEMM_I8 (1ull << 3)
#define TC_CAPABILITY_GEMM_BATCHED (1ull << 4)
#define TC_CAPABILITY_STREAMS (1ull << 5)
#define TC_CAPABILITY_GEMM_TF32 (1ull << 6)
/* Training kernels (tensorcore/training.h): norms, RoPE, SwiGLU, softmax,
 * AdamW, fused norm + GEMV. */
#define TC_CAPABILITY_TRAINING_KERNELS (1ull << 9)
/* conv2d: forward, backward_input, backward_weight (tensorcore/conv2d.h). */
#define TC_CAPABILITY_CONV2D (1ull << 10)
/* Activation checkpointing and memory tiers (tensorcore/memory.h). */
#define TC_CAPABILITY_CHECKPOINT (1ull << 13)
#define TC_CAPABILITY_MEMORY_TIERS (1ull << 14)
/* -- dist (dist.h, diloco.h) -- */
#define TC_CAPABILITY_DIST_GLOO (1ull << 15) /* gloo collectives on this context's (host) buffers */
#define TC_CAPABILITY_DIST_NCCL (1ull << 16) /* NCCL collectives on this context's (CUDA) buffers */
#define TC_CAPABILITY_DILOCO (1ull << 17)    /* DiLoCo outer steps on this context's buffers */
/* attention */
#define TC_CAPABILITY_ATTENTION (1ull << 7)
#define TC_CAPABILITY_ATTENTION_BACKWARD (1ull << 8)
/* end attention */
/* quantized, gguf */
#define TC_CAPABILITY_QUANTIZED (1ull << 11) /* quantize_weights, gemv_quantized, fused_rmsnorm_gemv_quantized */
#define TC_CAPABILITY_GGUF (1ull << 12)      /* GGUF files load into this context's buffers */
#define TC_CAPABILITIES_VERSION 1u

struct tc_runtime_capabilities {
  uint32_t struct_size; /* set by the caller to sizeof(tc_runtime_capabilities) */
  uint32_t version;     /* TC_CAPABILITIES_VERSION of the library that filled it */
  uint64_t known;       /* bits this library version defines */
  uint64_t available;   /* bits this context can run now (a subset of known) */
};

/* Context for the best device: the device named by TC_DEVICE ("cpu",
 * "cuda", "cuda:N") when set, else CUDA device 0 when built with CUDA and a
 * GPU is present, else the portable CPU. */
TC_API tc_status tc_init(tc_context* out);

/* Context for an explicit device: "cpu", "cuda", "cuda:N", or NULL/"" for
 * tc_init()'s choice. Asking for CUDA where none is usable is TC_ERR_NO_DEVICE. */
TC_API tc_status tc_init_device(const char* device, tc_context* out);

/* Destroys the context. Refused (TC_ERR_INVALID_ARG) while buffers or streams
 * of the context are alive. */
TC_API tc_status tc_shutdown(tc_context ctx);

TC_API tc_status tc_device_info(tc_context ctx, struct tc_device_info* out);

TC_API tc_status tc_runtime_capabilities(tc_context ctx, struct tc_runtime_capabilities* out);

/* 1 when `capability` is a single bit that is both known and available. */
TC_API int32_t tc_capability_available(const struct tc_runtime_capabilities* caps, uint64_t capability);

/* CPU ops called from the calling thread run on that thread alone when `on`
 * is non-zero: no fan-out to the CPU thread pool, and f32 products on
 * tensorcore's own kernels rather than a BLAS with threads of its own. For a
 * runtime that already keeps one thread per core busy (simpler's cpu
 * executor), so that the machine is not oversubscribed. Off by default;
 * each thread has its own setting. */
TC_API tc_status tc_cpu_run_inline(int32_t on);

#ifdef __cplusplus
}
#endif

#endif /* TENSORCORE_CONTEXT_H */
