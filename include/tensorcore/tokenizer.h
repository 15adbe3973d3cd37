/* tensorcore: the tokenizers of llama-family models (SentencePiece BPE and
 * byte-level BPE), built from a vocabulary such as a GGUF file's
 * tokenizer.ggml.* metadata, and run as llama.cpp runs them: the same ids for
 * the same text, special tokens and pre-tokenizers included. */
#ifndef TENSORCORE_TOKENIZER_H
#define TENSORCORE_TOKENIZER_H

#include "tensorcore/gguf.h"
#include "tensorcore/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tc_tokenizer_s* tc_tokenizer;

/* tokenizer.ggml.model "llama" (SentencePiece) and "gpt2" (byte-level BPE). */
#define TC_TOKENIZER_SPM 0
#define TC_TOKENIZER_BPE 1
/* Pre-tokenizers of byte-level BPE for tc_tokenizer_desc: GPT-2's ("gpt-2")
 * and LLaMA-3's ("llama-bpe"). tc_tokenizer_desc2 names any of them. */
#define TC_PRE_TOKENIZER_GPT2 0
#define TC_PRE_TOKENIZER_LLAMA3 1

/* GGUF token types (tokenizer.ggml.token_type). */
#define TC_TOKEN_NORMAL 1
#define TC_TOKEN_UNKNOWN 2
#define TC_TOKEN_CONTROL 3
#define TC_TOKEN_USER_DEFINED 4
#define TC_TOKEN_UNUSED 5
#define TC_TOKEN_BYTE 6

/* The first vocabulary description (kept as it was): BOS/EOS are added only
 * when an encode asks for them (add_bos defaults to what llama.cpp does for
 * the kind: SPM yes when there is a BOS, BPE no). */
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

/* The full description, with the fields of a GGUF file's tokenizer.ggml.*
 * metadata. struct_size: sizeof(tc_tokenizer_desc2), set by the caller. */
typedef struct tc_tokenizer_desc2 {
  uint32_t struct_size;
  int32_t kind;               /* TC_TOKENIZER_* */
  const char* pre_tokenizer;  /* BPE: a tokenizer.ggml.pre name as llama.cpp knows it ("llama-bpe",
                                 "qwen2", "smollm", ...); NULL: "default" */
  int64_t n_tokens;
  const char* const* tokens;  /* n_tokens UTF-8 strings */
  const float* scores;        /* n_tokens, or NULL */
  const int32_t* token_types; /* n_tokens TC_TOKEN_*, or NULL (all normal) */
  int64_t n_merges;
  const char* const* merges;  /* BPE: "left right" in rank order */
  int32_t bos_id, eos_id, unk_id; /* -1 when absent */
  int32_t eot_id, eom_id;     /* -1: looked for by their text as llama.cpp does ("<|eot_id|>", "<|im_end|>", ...) */
  int32_t add_bos, add_eos;   /* 1/0: what TC_ENCODE_ADD_SPECIAL adds; -1: llama.cpp's default for the kind
                                 and pre-tokenizer (BOS: SPM, llama-bpe and tekken; EOS: none) */
  int32_t add_space_prefix;   /* SPM: 1/0, -1: 1 */
} tc_tokenizer_desc2;

TC_API tc_status tc_tokenizer_create(const tc_tokenizer_desc* desc, tc_tokenizer* out);
/* TC_ERR_UNSUPPORTED for a pre-tokenizer name this library does not run (the
 * detail lists those it does); TC_ERR_CORRUPT for an inconsistent vocabulary
 * (sizes, ids out of range, a merge of missing tokens, a token twice). */
TC_API tc_status tc_tokenizer_create2(const tc_tokenizer_desc2* desc, tc_tokenizer* out);
/* The tokenizer of a GGUF file's tokenizer.ggml.* metadata, read as
 * llama.cpp reads it (its defaults where a key is absent). TC_ERR_UNSUPPORTED:
 * no vocabulary, or a tokenizer model / pre-tokenizer this library does not
 * run; TC_ERR_CORRUPT: a key of the wrong type or inconsistent values. The
 * detail names the key. The tokenizer does not refer to the file afterwards. */
TC_API tc_status tc_tokenizer_create_from_gguf(tc_gguf file, tc_tokenizer* out);
TC_API tc_status tc_tokenizer_free(tc_tokenizer tok);
TC_API tc_status tc_tokenizer_vocab_size(tc_tokenizer tok, int64_t* out);

/* What a tokenizer is. struct_size: set by the caller to sizeof. */
typedef struct tc_tokenizer_info {
  uint32_t struct_size;
  int32_t kind;                 /* TC_TOKENIZER_* */
  int64_t n_tokens;
  int32_t bos_id, eos_id, unk_id, eot_id, eom_id; /* -1 when absent (eot/eom: also found by text) */
  int32_t add_bos, add_eos;     /* what TC_ENCODE_ADD_SPECIAL adds */
  int32_t add_space_prefix;     /* SPM */
  int64_t n_eog;                /* end-of-generation ids (tc_tokenizer_eog_ids) */
  char pre_tokenizer[32];       /* BPE: the pre-tokenizer's canonical name ("llama-bpe", "starcoder", ...) */
} tc_tokenizer_info;
TC_API tc_status tc_tokenizer_get_info(tc_tokenizer tok, tc_tokenizer_info* out);

/* End-of-generation ids, ascending, as llama.cpp finds them: eos, eot, eom,
 * the FIM pad/repo/separator tokens and the tokens whose text says so
 * ("<|im_end|>", "<end_of_turn>", "<|endoftext|>", "</s>", ...). Writes up to
 * `capacity` ids and the count to *n_out; a capacity too small gives
 * TC_ERR_INVALID_ARG with *n_out set to the count needed. */
TC_API tc_status tc_tokenizer_eog_ids(tc_tokenizer tok, int32_t* ids, int64_t capacity, int64_t* n_out);
/* *out = 1 when `id` ends generation, else 0 (also for ids outside the vocabulary). */
TC_API tc_status tc_tokenizer_is_eog(tc_tokenizer tok, int32_t id, int32_t* out);
/* Token attributes, llama.cpp's: the file's token type as a bit, with its
 * changes (eot, eom, FIM and end-of-generation tokens found by their text
 * become control tokens, control tokens named "unused" unused ones, ...). */
#define TC_TOKEN_ATTR_UNKNOWN (1u << 0)
#define TC_TOKEN_ATTR_UNUSED (1u << 1)
#define TC_TOKEN_ATTR_NORMAL (1u << 2)
#define TC_TOKEN_ATTR_CONTROL (1u << 3)
#define TC_TOKEN_ATTR_USER_DEFINED (1u << 4)
#define TC_TOKEN_ATTR_BYTE (1u << 5)
/* TC_ERR_INVALID_ARG outside the vocabulary. */
TC_API tc_status tc_tokenizer_token_attr(tc_tokenizer tok, int32_t id, uint32_t* out);

/* Encode flags (tc_tokenizer_encode2). Without ADD_SPECIAL, FORCE_*: no BOS/EOS. */
#define TC_ENCODE_ADD_SPECIAL 1u   /* BOS/EOS as the vocabulary says (add_bos/add_eos): llama.cpp's add_special */
#define TC_ENCODE_PARSE_SPECIAL 2u /* the text of control and unknown tokens ("<|im_start|>") becomes their
                                      ids: llama.cpp's parse_special; user-defined tokens always do */
#define TC_ENCODE_FORCE_BOS 4u     /* prefix BOS (when there is one), whatever the vocabulary says */
#define TC_ENCODE_NO_BOS 8u        /* no BOS, whatever the vocabulary says */
#define TC_ENCODE_FORCE_EOS 16u
#define TC_ENCODE_NO_EOS 32u

/* Encodes `len` bytes of UTF-8 text. Writes up to `capacity` ids and the
 * full count to *n_out; a capacity too small (0 with ids NULL to ask) gives
 * TC_ERR_INVALID_ARG with *n_out set to the count needed and nothing
 * written: call again with that capacity. */
TC_API tc_status tc_tokenizer_encode2(tc_tokenizer tok, const char* text, size_t len, uint32_t flags, int32_t* ids,
                                      int64_t capacity, int64_t* n_out);
/* The first encode: add_bos != 0 is TC_ENCODE_FORCE_BOS, else no BOS; no EOS,
 * no parsing of control tokens. The same capacity protocol. */
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
