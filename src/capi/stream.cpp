#include "tensorcore/stream.h"

#include "capi/api.h"

using namespace tc;
using namespace tc::capi;

extern "C" {

tc_status tc_stream_create(tc_context ctx, tc_stream* out) {
  return guarded("tc_stream_create", [&] {
    if (tc_status st = check_context("tc_stream_create", ctx)) return st;
    if (tc_status st = check_out_ptr("tc_stream_create", "out", out)) return st;
    auto queue = ctx->backend->create_queue();
    if (!queue) return last_status() != TC_OK ? last_status() : fail(TC_ERR_INTERNAL, "tc_stream_create: failed");
    auto* s = new tc_stream_s();
    s->ctx = ctx;
    s->queue = std::move(queue);
    ctx->live_streams++;
    *out = register_handle(s, stream_kind());
    return TC_OK;
  });
}

tc_status tc_stream_sync(tc_stream stream) {
  return guarded("tc_stream_sync", [&] {
    if (tc_status st = check_stream("tc_stream_sync", nullptr, stream)) return st;
    std::string detail;
    tc_status st = stream->queue->sync(&detail);
    if (st != TC_OK) return fail_with(st, "stream work failed: " + detail);
    return TC_OK;
  });
}

tc_status tc_stream_destroy(tc_stream stream) {
  return guarded("tc_stream_destroy", [&] {
    if (tc_status st = check_stream("tc_stream_destroy", nullptr, stream)) return st;
    unregister_handle(stream);
    std::string detail;
    tc_status st = stream->queue->sync(&detail);
    stream->ctx->live_streams--;
    delete stream;
    if (st != TC_OK) return fail_with(st, "work still queued on the destroyed stream failed: " + detail);
    return TC_OK;
  });
}

}  // extern "C"
