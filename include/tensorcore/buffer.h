/* tensorcore: buffers of device memory (host memory on the CPU backend). */
#ifndef TENSORCORE_BUFFER_H
#define TENSORCORE_BUFFER_H

#include "tensorcore/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Allocates `nbytes` (> 0) of the context's device memory; host memory is
 * 64-byte aligned. Contents are unspecified. */
TC_API tc_status tc_buffer_alloc(tc_context ctx, size_t nbytes, tc_buffer* out);

/* Wraps caller memory of `nbytes` without copying or owning it. The memory
 * must stay valid until the buffer is freed. */
TC_API tc_status tc_buffer_from_ptr(tc_context ctx, void* ptr, size_t nbytes, tc_buffer* out);

/* Releases the handle. Work already enqueued on a stream keeps the storage
 * alive until it completes. */
TC_API tc_status tc_buffer_free(tc_buffer buf);

/* Host pointer to the bytes, where one is valid (CPU buffers); device-only
 * buffers give TC_ERR_UNSUPPORTED. */
TC_API tc_status tc_buffer_map(tc_buffer buf, void** out);

TC_API tc_status tc_buffer_size(tc_buffer buf, size_t* out);

/* Copies between host memory and the buffer at a byte offset; the range must
 * lie inside the buffer. */
TC_API tc_status tc_buffer_write(tc_buffer buf, size_t offset, const void* src, size_t nbytes);
TC_API tc_status tc_buffer_read(tc_buffer buf, size_t offset, void* dst, size_t nbytes);

/* Device pointer of the bytes (the host pointer on the CPU), for zero-copy
 * interop with other libraries. */
TC_API tc_status tc_buffer_device_ptr(tc_buffer buf, void** out);

#ifdef __cplusplus
}
#endif

#endif /* TENSORCORE_BUFFER_H */
