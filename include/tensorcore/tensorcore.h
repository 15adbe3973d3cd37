/* tensorcore: the whole C ABI. */
#ifndef TENSORCORE_TENSORCORE_H
#define TENSORCORE_TENSORCORE_H

#include "tensorcore/types.h"
#include "tensorcore/diagnostics.h"
#include "tensorcore/context.h"
#include "tensorcore/buffer.h"
#include "tensorcore/stream.h"
#include "tensorcore/gemm.h"
#include "tensorcore/cuda.h"
#include "tensorcore/tokenizer.h"
/* Memory tiers, checkpointing, and backends this build lacks (HIP, TensorOps). */
#include "tensorcore/memory.h"
#include "tensorcore/hip.h"
#include "tensorcore/tensorops.h"

#endif /* TENSORCORE_TENSORCORE_H */
