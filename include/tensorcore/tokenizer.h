/* tensorcore: the tokenizers of llama-family models (SentencePiece BPE and
 * byte-level BPE), built from a vocabulary such as a GGUF file's
 * tokenizer.ggml.* metadata. */
#ifndef TENSORCORE_TOKENIZER_H
#define TENSORCORE_TOKENIZER_H

#include "tensorcore/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tc_tokenizer_s* tc_tokenizer;

/* tokenizer.ggml.model "llama" (SentencePiece) and "gpt2" (byte-level BPE). */
#define TC_TOKENIZER_SPM 0
#define TC_TOKENIZER_BPE 1
/* Pre-tokenizers of byte-level BPE (tokenizer.ggml.pre): "default"/"gpt2"
 * and "llama-bpe"/"llama3". */
#define TC_PRE_TOKENIZER_GPT2 0
#define TC_PRE_TOKENIZER_LLAMA3 1

typedef struct tc_tokenizer_desc {
  int32_t kind;            /* TC_TOKENIZER_* */
  int32_t pre_tokenizer;   /* TC_PRE_TOKENIZER_*, BPE only */
  int64_t n_tokens;
  const char* const* tokens;  /* n_tokens UTF-8 strings */
  const float* scores;        /* n_tokens, or NULL (SPM merge priority) */
  const int32_t* token_types; /* n_tokens GGUF token types, or NULL (all normal) */
  int64_t n_merges;
  const char* const* merges;  /* BPE: "left right" in rank order */
  int32_t bos_id, eos_id, unk_id; /* -1 when absent */
  int32_t add_space_prefix;   /* SPM: prefix a space before encoding (default 1) */
} tc_tokenizer_desc;

TC_API tc_status tc_tokenizer_create(const tc_tokenizer_desc* desc, tc_tokenizer* out);
TC_API tc_status tc_tokenizer_free(tc_tokenizer tok);
TC_API tc_status tc_tokenizer_vocab_size(tc_tokenizer tok, int64_t* out);

/* Encodes `len` bytes of UTF-8 text. Writes up to `capacity` ids and the
 * full count to *n_out; a capacity too small gives TC_ERR_INVALID_ARG with
 * *n_out set to the count needed (call again with a larger array). */
TC_API tc_status tc_tokenizer_encode(tc_tokenizer tok, const char* text, size_t len, int32_t add_bos, int32_t* ids,
                                     int64_t capacity, int64_t* n_out);

/* Decodes ids to UTF-8 (control tokens render as nothing); the same
 * capacity protocol as encode, in bytes. */
TC_API tc_status tc_tokenizer_decode(tc_tokenizer tok, const int32_t* ids, int64_t n, char* text, size_t capacity,
                                     size_t* n_out);

#ifdef __cplusplus
}
#endif

#endif /* TENSORCORE_TOKENIZER_H */
