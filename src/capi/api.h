// Helpers shared by every C entry point: exception fences, handle checks and
// overflow-safe size arithmetic. Validation happens here and nowhere else.
#pragma once

#include <cstdint>
#include <exception>
#include <new>
#include <string>

#include "core/error.h"
#include "core/objects.h"

struct tc_gguf_s;
struct tc_tokenizer_s;

namespace tc {
namespace gguf {
class File;
}
namespace model {
class Tokenizer;
}
namespace capi {

// Runs an entry point's body: exceptions become statuses, success clears the
// thread's last error detail.
template <class F>
tc_status guarded(const char* fn_name, F&& body) noexcept {
  try {
    tc_status st = body();
    if (st == TC_OK) ok();
    return st;
  } catch (const std::bad_alloc&) {
    return fail(TC_ERR_ALLOC, "%s: out of host memory", fn_name);
  } catch (const std::exception& e) {
    return fail(TC_ERR_INTERNAL, "%s: %s", fn_name, e.what());
  } catch (...) {
    return fail(TC_ERR_INTERNAL, "%s: unknown exception", fn_name);
  }
}

// Handle checks take the caller's handle by reference and, when it is live,
// replace it with its object's address (core/handles.h): code after a check
// dereferences it. A handle already replaced passes again.
//
// `what` names the handle in messages ("buffer A", "gguf file"); failure
// records "<fn>: <what> (<value>) is not a live tensorcore <kind>: <why>".
tc_status check_handle(const char* fn, const char* what, void*& h, const HandleKind& kind);
template <class T>
tc_status check_handle(const char* fn, const char* what, T*& h, const HandleKind& kind) {
  void* p = h;
  tc_status st = check_handle(fn, what, p, kind);
  h = static_cast<T*>(p);
  return st;
}

tc_status check_context(const char* fn, tc_context& ctx);
tc_status check_stream(const char* fn, tc_context ctx, tc_stream& s);
// A live buffer of `ctx` (any context when ctx is null) whose bytes an op can
// use: not discarded by a checkpoint and in device memory (L0); a tier move
// in flight is waited for first. Every op, read, write and map checks this.
tc_status check_buffer(const char* fn, const char* arg, tc_context ctx, tc_buffer& b);
// Only a live buffer handle of `ctx`, wherever its bytes are (size, free,
// tier and checkpoint calls).
tc_status check_buffer_handle(const char* fn, const char* arg, tc_context ctx, tc_buffer& b);
tc_status check_out_ptr(const char* fn, const char* arg, const void* p);

// a * b (and a + b) without wrapping; false on overflow or negative inputs.
bool mul_ok(int64_t a, int64_t b, int64_t* out);
bool add_ok(int64_t a, int64_t b, int64_t* out);

// Bytes spanned by `rows` rows of `cols` elements at pitch `ld`, repeated
// `batch` times at `stride` elements, of `elem` bytes each:
//   ((batch-1)*stride + (rows-1)*ld + cols) * elem, or 0 when rows/cols is 0.
// false on overflow.
bool span_bytes(int64_t batch, int64_t stride, int64_t rows, int64_t cols, int64_t ld, int64_t elem, int64_t* out);

// The parsed file of a live tc_gguf handle (src/capi/gguf.cpp).
tc_status gguf_file_of(const char* fn, tc_gguf_s*& g, const gguf::File** out);

// A registered tokenizer handle built from a file's tokenizer.ggml.*
// metadata (src/capi/tokenizer.cpp); *none tells a file without a vocabulary.
tc_status tokenizer_from_gguf(const gguf::File& f, tc_tokenizer_s** out, bool* none);
const model::Tokenizer& tokenizer_model(const tc_tokenizer_s* t);

// A readable name for a dtype value in messages ("f16", or "dtype 42").
std::string dtype_label(int32_t dtype);

}  // namespace capi
}  // namespace tc
