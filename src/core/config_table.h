// Every environment variable that tensorcore and simpler read, one line
// each; src/core/config.h reads them and docs/configuration.md lists them
// (tests/python/test_config.py checks that the two agree).
//
// TC_CONFIG(key, name, type, default, allowed, read, description)
//   type     Bool (unset/empty: the default; 0/false/off/no; 1/true/on/yes),
//            Int (allowed is "lo..hi"), Enum (allowed is "a|b|c", in order),
//            String, Path
//   default  the value used when the variable is unset, empty or invalid;
//            "auto" when the code decides (see the description)
//   read     Once (at first use, then cached) or PerCall (at every use, so
//            that a test or benchmark can change it between calls)
// No include guard: the includer defines TC_CONFIG.
// clang-format off

// ---- tensorcore: every backend
TC_CONFIG(kTrace, "TC_TRACE", Bool, "off", "", Once,
          "one line per op on stderr (op, shapes, status, backend, microseconds), after the resolved settings")
TC_CONFIG(kDevice, "TC_DEVICE", String, "", "cpu, cuda or cuda:N", PerCall,
          "device of tc_init(): unset means CUDA device 0 when usable, else the CPU")
TC_CONFIG(kTierDir, "TC_TIER_DIR", Path, "", "", PerCall,
          "directory of the disk tier's spill files (docs/memory-tiers.md); unset: the temp directory's tensorcore-spill-UID")

// ---- tensorcore: CPU backend
TC_CONFIG(kNumThreads, "TC_NUM_THREADS", Int, "auto", "1..1024", Once,
          "threads of the CPU pool and of a linked OpenBLAS; auto: the physical cores of the affinity mask")
TC_CONFIG(kCpuIsa, "TC_CPU_ISA", Enum, "amx", "portable|avx2|avx_vnni|avx512|avx512_vnni|avx512_bf16|amx", PerCall,
          "caps the instruction set of every CPU kernel (never enables what the processor lacks); below the "
          "processor's own level the f32 GEMM runs tensorcore's kernels, not the BLAS")
TC_CONFIG(kCpuBlas, "TC_CPU_BLAS", Bool, "auto", "", PerCall,
          "f32 GEMM through the linked BLAS (on) or tensorcore's kernels (off); auto: the BLAS unless it "
          "misdetected the processor")

// ---- tensorcore: CUDA backend
TC_CONFIG(kCudaGemm, "TC_CUDA_GEMM", Bool, "on", "", PerCall,
          "off: a CUDA context created now runs its GEMMs on the CPU backend instead of cuBLASLt")
TC_CONFIG(kUseCudaGemm, "TC_USE_CUDA_GEMM", Bool, "on", "", PerCall,
          "the reference's spelling of TC_CUDA_GEMM (off: GEMMs of a new CUDA context on the CPU backend)")
TC_CONFIG(kDisableCudaGemm, "TC_DISABLE_CUDA_GEMM", Bool, "off", "", PerCall,
          "the reference's inverse spelling of TC_CUDA_GEMM (on: GEMMs of a new CUDA context on the CPU backend)")
TC_CONFIG(kCudaPdl, "TC_CUDA_PDL", Bool, "on", "", PerCall,
          "programmatic dependent launch of the kernels that support it (the LLaMA decode step's); a recorded "
          "graph keeps what it was captured with")
TC_CONFIG(kCudaQ8MmaRows, "TC_CUDA_Q8_MMA_ROWS", Int, "8", "0..1048576", PerCall,
          "the 8-bit products (gemv_q8, and gemv_quantized's few-row path) of at least this many rows of X run "
          "on the int8 tensor cores; fewer rows, or 0, take the one-row kernels (a recorded graph keeps what it was captured with)")
TC_CONFIG(kCudaQ8Stream, "TC_CUDA_Q8_STREAM", Bool, "on", "", PerCall,
          "one-row 8-bit products on split Q4_0 / Q8_0 weights hold X in registers (K > 4096, X given "
          "in 8 bits) or stream W by bulk copies, and quantise their own X where the call brings "
          "it in f32; off: quantize_q8, then the warp-per-row kernel (a recorded graph keeps what it was captured "
          "with)")
TC_CONFIG(kCudaQ8Xreg, "TC_CUDA_Q8_XREG", Bool, "on", "", PerCall,
          "with TC_CUDA_Q8_STREAM on, one-row 8-bit products on split Q4_0 / Q8_0 weights with K > 4096 and X "
          "given in 8 bits hold X in registers; off: they stream W as at K <= 4096 (a recorded graph keeps what "
          "it was captured with)")
TC_CONFIG(kCudaAttentionCudnn, "TC_CUDA_ATTENTION_CUDNN", Bool, "on", "", PerCall,
          "attention through cuDNN's fused flash attention where the build has cuDNN 9 and the case allows")
TC_CONFIG(kCudnnAutotune, "TC_CUDNN_AUTOTUNE", Bool, "on", "", PerCall,
          "time up to four of cuDNN's attention plans at the first call that runs a shape's plan and keep the "
          "fastest; off: the heuristics' first")
TC_CONFIG(kCudnnPlanAfter, "TC_CUDNN_PLAN_AFTER", Int, "64", "1..1000000", PerCall,
          "an attention shape runs on tensorcore's kernels until its Nth call, which starts the build of its cuDNN "
          "plan (cuDNN compiles its engines: 0.1-2 s a shape); 1: at the first call. Every layer of a model's "
          "forward calls the same shape, so 64 lets a prompt length met once (a chat's every new turn) never pay "
          "for a plan, while a shape that repeats (training steps, a benchmark's warm-up) gets one")
TC_CONFIG(kCudnnPlanBackground, "TC_CUDNN_PLAN_BACKGROUND", Bool, "on", "", PerCall,
          "a cuDNN attention plan is built on a helper thread while the shape's calls go on through tensorcore's "
          "kernels, and used from the first call after it is ready (then timed, TC_CUDNN_AUTOTUNE); off: the call "
          "that starts the build waits for it and runs cuDNN's plan")
TC_CONFIG(kCudnnDebug, "TC_CUDNN_DEBUG", Bool, "off", "", Once,
          "on stderr: the cuDNN version, which engine each attention shape got, or why cuDNN rejected it")

// ---- tensorcore: LLaMA model
TC_CONFIG(kLlamaDevicePath, "TC_LLAMA_DEVICE_PATH", Bool, "off", "", PerCall,
          "run the forward through device buffers even on a host-accessible backend (tests the CUDA path on the CPU)")
TC_CONFIG(kLlamaSplit, "TC_LLAMA_SPLIT", Bool, "on", "", Once,
          "a GPU LLaMA model with f16 activations keeps a second, 16-byte-aligned copy of its Q4_0 / Q8_0 / "
          "Q6_K matrices (Q5_0 ones as Q8_0) for the decode products (off saves their size; Q4_0 decode ~10% "
          "slower, and a file with Q6_K or Q5_0 matrices takes the f16 products)")
TC_CONFIG(kLlamaRows8, "TC_LLAMA_ROWS8", Bool, "on", "", Once,
          "a CPU LLaMA model with f16 / bf16 activations on an AVX512-VNNI processor keeps a second copy of its "
          "Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / Q4_K / Q5_K / Q6_K matrices with their rows interleaved by eight for "
          "the products (off saves their size; prompt and decode slower wherever no AMX tile product takes them)")
TC_CONFIG(kLlamaQ8, "TC_LLAMA_Q8", Bool, "on", "", Once,
          "a GPU LLaMA decode step with f16 activations runs 8-bit products with fused epilogues; off: the "
          "older f16 products and separate norm, add and SwiGLU kernels")

// ---- tensorcore: distributed
TC_CONFIG(kDistTimeoutMs, "TC_DIST_TIMEOUT_MS", Int, "120000", "1..9223372036854775807", PerCall,
          "default deadline of distributed calls, milliseconds; a URL's ?timeout_ms= wins")
TC_CONFIG(kDistDevicePath, "TC_DIST_DEVICE_PATH", Bool, "off", "", PerCall,
          "collectives and DiLoCo handle a host backend's buffers as device memory (staged through page-locked "
          "host memory, the exchange through device scratch): tests the GPU path on the CPU")
TC_CONFIG(kChannelHashThread, "TC_CHANNEL_HASH_THREAD", Bool, "auto", "", PerCall,
          "authenticated frames longer than 128 KiB hashed by a helper thread while they move through the "
          "socket (a channel's sends and receives each); auto: on where the process may run on at least 4 CPUs "
          "(its affinity mask)")
TC_CONFIG(kNcclNonblocking, "TC_NCCL_NONBLOCKING", Bool, "off", "", PerCall,
          "NCCL collectives on the non-blocking communicator itself (every enqueue polled; slower) instead of "
          "the blocking one split from it")
TC_CONFIG(kNcclRuntimeConnect, "NCCL_RUNTIME_CONNECT", String, "", "", PerCall,
          "NCCL's own variable; unset, tensorcore sets it to 0 so a blocking communicator connects when created")

// ---- simpler
TC_CONFIG(kSimplerLogLevel, "SIMPLER_LOG_LEVEL", Enum, "warn", "error|warn|info|debug", Once,
          "threshold of the orchestration's log lines")
TC_CONFIG(kSimplerCpuCores, "SIMPLER_CPU_CORES", Int, "auto", "1..1024", PerCall,
          "cores of a CPU chip worker; auto: the hardware threads")
TC_CONFIG(kSimplerCudaThreads, "SIMPLER_CUDA_THREADS", Int, "256", "32..1024", Once,
          "threads per block of the CUDA chip's kernel launches")
TC_CONFIG(kSimplerHbgCache, "SIMPLER_HBG_CACHE", Bool, "on", "", PerCall,
          "replay host_build_graph graphs recorded for the same callable and arguments")
TC_CONFIG(kRingTaskWindow, "PTO2_RING_TASK_WINDOW", String, "", "N or a,b,c,d", PerCall,
          "task window of the four rings (power of two in [4, 2^24]) unless the call config sets it")
TC_CONFIG(kRingHeap, "PTO2_RING_HEAP", String, "", "N or a,b,c,d", PerCall,
          "heap bytes of the four rings unless the call config sets it")
TC_CONFIG(kRingDepPool, "PTO2_RING_DEP_POOL", String, "", "N or a,b,c,d", PerCall,
          "dependency pool entries of the four rings ([4, 2^28]) unless the call config sets it")
TC_CONFIG(kTmpdir, "TMPDIR", Path, "/tmp", "", PerCall,
          "where simpler writes a kernel object to load it when memfd_create is unavailable")

// clang-format on
