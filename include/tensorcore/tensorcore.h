/* tensorcore: the whole C ABI. */
#ifndef TENSORCORE_TENSORCORE_H
#define TENSORCORE_TENSORCORE_H

#include "tensorcore/types.h"
#include "tensorcore/diagnostics.h"
#include "tensorcore/config.h"
#include "tensorcore/context.h"
#include "tensorcore/buffer.h"
#include "tensorcore/stream.h"
#include "tensorcore/gemm.h"
#include "tensorcore/cuda.h"
#include "tensorcore/tokenizer.h"
#include "tensorcore/training.h"
/* Memory tiers, checkpointing, and backends this build lacks (HIP, TensorOps). */
#include "tensorcore/memory.h"
#include "tensorcore/hip.h"
#include "tensorcore/tensorops.h"
/* -- dist -- */
#include "tensorcore/dist.h"
#include "tensorcore/diloco.h"
#include "tensorcore/channel.h"
/* conv2d */
#include "tensorcore/conv2d.h"
/* attention */
#include "tensorcore/attention.h"
/* quantized, gguf */
#include "tensorcore/quant.h"
#include "tensorcore/gguf.h"
#include "tensorcore/llama.h"

#endif /* TENSORCORE_TENSORCORE_H */
