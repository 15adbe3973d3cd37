/* tensorcore: streams, ordered queues of work. An `_async` op enqueues on a
 * stream and returns at once; tc_stream_sync waits for everything enqueued. */
#ifndef TENSORCORE_STREAM_H
#define TENSORCORE_STREAM_H

#include "tensorcore/types.h"

#ifdef __cplusplus
extern "C" {
#endif

TC_API tc_status tc_stream_create(tc_context ctx, tc_stream* out);

/* Waits for all enqueued work. Returns the first failure of that work since
 * the previous sync (its detail goes to tc_last_error_detail), else TC_OK.
 * Work enqueued after a failure still runs. */
TC_API tc_status tc_stream_sync(tc_stream stream);

/* Waits for enqueued work, then destroys the stream. Returns the first
 * failure of work not yet reported by a sync; the stream is destroyed either
 * way. */
TC_API tc_status tc_stream_destroy(tc_stream stream);

#ifdef __cplusplus
}
#endif

#endif /* TENSORCORE_STREAM_H */
