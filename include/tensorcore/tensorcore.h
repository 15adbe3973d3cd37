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
#include "tensorcore/attention.h"

#endif /* TENSORCORE_TENSORCORE_H */
