// LLaMA-family hyper-parameters from a GGUF file's metadata.
#pragma once

#include "gguf/file.h"
#include "tensorcore/gguf.h"

namespace tc {
namespace gguf {

// Fills `out` (defaults in tensorcore/gguf.h). TC_ERR_UNSUPPORTED when the
// file has no architecture or lacks a required key, TC_ERR_CORRUPT when a
// key has the wrong type or an impossible value; the detail names the key.
tc_status llama_config(const File& f, tc_gguf_llama_config* out);

}  // namespace gguf
}  // namespace tc
