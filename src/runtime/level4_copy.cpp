// simpler_l4_*: a level-4 copy served by the session and awaited by the
// parent without Python on either side (include/simpler/simpler.h). A copy
// is a request and a reply on the command lane; at tens of kilobytes its
// cost was the two interpreters decoding and answering it, not the bytes.
//
// Frames (python/simpler/remote/protocol.py repeats the header and types):
//   header     magic "SL4F", version u16, type u16, body length u32
//   COPY_TO    request id u64, address u64, nbytes u64, flags u32, then the
//              bytes themselves unless flags has STREAMED
//   COPY_FROM  request id u64, address u64, nbytes u64, flags u32
//   COPY_REPLY request id u64, status i32, flags u32, then: a refusal's
//              message (status != 0), or a COPY_FROM's bytes unless STREAMED
// STREAMED: the bytes travel as data frames right after the request (to)
// or the reply (from), no header, any size up to what is left; the
// channel's MAC covers each one and its place in the lane.
#include <algorithm>
#include <cstring>
#include <map>
#include <string>

#include "runtime/error.h"
#include "runtime/wire.h"
#include "simpler/simpler.h"
#include "tensorcore/diagnostics.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the level-4 frames are little-endian, as this host");

namespace {

using simpler::Error;
using simpler::make_error;

constexpr char kMagic[4] = {'S', 'L', '4', 'F'};
constexpr uint16_t kVersion = 3;
constexpr uint16_t kCopyTo = 8, kCopyFrom = 9, kCopyReply = 10;
constexpr size_t kHeader = 12, kRequest = 28, kReply = 16;
constexpr uint32_t kStreamed = 1;
constexpr size_t kMessageMax = 8192;

struct Header {
  uint16_t type = 0;
  uint32_t body = 0;
};

using simpler::wire::load;
using simpler::wire::store;

// The header of a frame of ours whose length adds up, or type 0 (a frame
// for the caller to decode, and to refuse with its own message).
Header header_of(const uint8_t* f, uint64_t n) {
  Header h;
  if (n < kHeader || std::memcmp(f, kMagic, 4) != 0 || load<uint16_t>(f + 4) != kVersion) return h;
  const uint32_t body = load<uint32_t>(f + 8);
  if (body != n - kHeader) return h;
  h.type = load<uint16_t>(f + 6);
  h.body = body;
  return h;
}

uint8_t* put_header(uint8_t* p, uint16_t type, uint64_t body) {
  std::memcpy(p, kMagic, 4);
  p = store<uint16_t>(p + 4, kVersion);
  p = store<uint16_t>(p, type);
  return store<uint32_t>(p, uint32_t(body));
}

// A failed channel call, with tensorcore's detail.
Error lane_error(tc_status st, const char* what) {
  return make_error(st, "%s: %s", what, tc_last_error_detail());
}

Error send(tc_channel ch, const void* a, size_t na, const void* b, size_t nb, int64_t timeout_ms) {
  const tc_channel_part parts[2] = {{a, na}, {b, nb}};
  tc_status st = tc_channel_sendv(ch, parts, nb ? 2 : 1, timeout_ms);
  return st ? lane_error(st, "sending on the command lane") : Error{};
}

// Reads a copy's data frames, nbytes in all, into dst (or, dst null, reads
// and drops them). A deadline passing here is a broken lane, not an idle one.
Error read_data(tc_channel ch, uint8_t* dst, uint64_t nbytes, uint64_t max_frame, int64_t timeout_ms) {
  for (uint64_t at = 0; at < nbytes;) {
    const uint64_t left = nbytes - at;
    size_t got = 0;
    tc_status st;
    if (dst) {
      st = tc_channel_recv_into(ch, dst + at, size_t(left), timeout_ms, &got);
    } else {
      const void* scratch = nullptr;
      st = tc_channel_recv(ch, size_t(std::min(left, max_frame)), timeout_ms, &scratch, &got);
    }
    if (st) {
      Error e = lane_error(st, "reading a copy's data frames");
      if (e.status == TC_ERR_TIMEOUT) e.status = TC_ERR_IO;  // the lane is out of step
      return e;
    }
    if (!got) return make_error(TC_ERR_CORRUPT, "an empty data frame inside a copy");
    at += got;
  }
  return {};
}

Error send_data(tc_channel ch, const uint8_t* src, uint64_t nbytes, uint64_t chunk, int64_t timeout_ms) {
  for (uint64_t at = 0; at < nbytes; at += chunk) {
    tc_status st = tc_channel_send(ch, src + at, size_t(std::min(chunk, nbytes - at)), timeout_ms);
    if (st) return lane_error(st, "sending a copy's data frames");
  }
  return {};
}

}  // namespace

// ---- the session --------------------------------------------------------------

struct simpler_l4_server_s {
  tc_channel ch;
  uint64_t max_frame, chunk;  // chunk: a copy_from's data frames, and the longest one inside its reply
  int64_t timeout_ms;
  std::map<uint64_t, uint64_t> ranges;  // base -> length

  // Whether [addr, addr + n) lies within one range (an empty copy: at most
  // at its end).
  bool holds(uint64_t addr, uint64_t n) const {
    auto it = ranges.upper_bound(addr);
    if (it == ranges.begin()) return false;
    --it;
    const uint64_t off = addr - it->first;
    return off <= it->second && n <= it->second - off;
  }

  Error reply(uint64_t rid, int32_t status, uint32_t flags, const void* data, size_t n) {
    uint8_t head[kHeader + kReply];
    uint8_t* p = put_header(head, kCopyReply, kReply + n);
    p = store<uint64_t>(p, rid);
    p = store<int32_t>(p, status);
    store<uint32_t>(p, flags);
    return send(ch, head, sizeof head, data, n, timeout_ms);
  }

  Error serve(uint16_t type, const uint8_t* body, uint32_t body_bytes) {
    if (body_bytes < kRequest) return make_error(TC_ERR_CORRUPT, "a copy request of %u bytes", body_bytes);
    const uint64_t rid = load<uint64_t>(body), addr = load<uint64_t>(body + 8), n = load<uint64_t>(body + 16);
    const uint32_t flags = load<uint32_t>(body + 24);
    const bool streamed = flags & kStreamed;
    const uint64_t inline_bytes = body_bytes - kRequest;
    if (flags & ~kStreamed) return make_error(TC_ERR_CORRUPT, "a copy request with flags 0x%x", flags);
    if (type == kCopyTo ? inline_bytes != (streamed ? 0 : n) : inline_bytes != 0)
      return make_error(TC_ERR_CORRUPT, "a %s request of %llu bytes carries %llu", type == kCopyTo ? "copy_to"
                        : "copy_from", (unsigned long long)n, (unsigned long long)inline_bytes);
    std::string refusal;
    if (!holds(addr, n)) {
      refusal = simpler::format("[0x%llx, +%llu) is not inside one remote allocation of this session",
                                (unsigned long long)addr, (unsigned long long)n);
    } else if (type == kCopyFrom && !streamed && n > chunk) {
      refusal = simpler::format("copy_from of %llu bytes inside one reply", (unsigned long long)n);
    }
    uint8_t* at = refusal.empty() ? reinterpret_cast<uint8_t*>(uintptr_t(addr)) : nullptr;
    if (type == kCopyTo) {
      if (streamed) {
        if (Error e = read_data(ch, at, n, max_frame, timeout_ms); !e.ok()) return e;
      } else if (at && n) {
        std::memcpy(at, body + kRequest, n);
      }
    } else if (at) {
      if (!streamed) return reply(rid, 0, 0, at, n);
      if (Error e = reply(rid, 0, kStreamed, nullptr, 0); !e.ok()) return e;
      return send_data(ch, at, n, chunk, timeout_ms);
    }
    if (!at) return reply(rid, TC_ERR_INVALID_ARG, 0, refusal.data(), std::min(refusal.size(), kMessageMax));
    return reply(rid, 0, 0, nullptr, 0);
  }
};

// ---- the parent -------------------------------------------------------------------

struct simpler_l4_copier_s {
  tc_channel ch;
  uint64_t max_frame, inline_max, chunk;
  int64_t timeout_ms;
  // The copy in flight.
  int32_t op = -1;
  uint64_t rid = 0, nbytes = 0;
  uint8_t* buf = nullptr;
  bool streamed = false;
  // The frame that was not its reply, and the session's refusal.
  const void* frame = nullptr;
  uint64_t frame_bytes = 0;
  int32_t refused = 0;
  std::string message;

  Error send_request(int32_t op_, uint64_t rid_, uint64_t addr, uint8_t* buf_, uint64_t n) {
    op = -1;
    streamed = n > inline_max;
    const bool data_inline = op_ == 0 && !streamed;
    uint8_t head[kHeader + kRequest];
    uint8_t* p = put_header(head, op_ == 0 ? kCopyTo : kCopyFrom, kRequest + (data_inline ? n : 0));
    p = store<uint64_t>(p, rid_);
    p = store<uint64_t>(p, addr);
    p = store<uint64_t>(p, n);
    store<uint32_t>(p, streamed ? kStreamed : 0);
    if (Error e = send(ch, head, sizeof head, buf_, data_inline ? n : 0, timeout_ms); !e.ok()) return e;
    if (op_ == 0 && streamed)
      if (Error e = send_data(ch, buf_, n, chunk, timeout_ms); !e.ok()) return e;
    op = op_, rid = rid_, buf = buf_, nbytes = n;
    return {};
  }

  Error await(int32_t* state) {
    if (op < 0) return make_error(TC_ERR_INVALID_ARG, "no copy awaits its reply");
    frame = nullptr;
    frame_bytes = 0;
    const void* f = nullptr;
    size_t n = 0;
    if (tc_status st = tc_channel_recv(ch, size_t(max_frame), timeout_ms, &f, &n))
      return lane_error(st, "awaiting a copy's reply");
    const uint8_t* bytes = static_cast<const uint8_t*>(f);
    const Header h = header_of(bytes, n);
    if (h.type != kCopyReply) {
      frame = f, frame_bytes = n;
      *state = 1;
      return {};
    }
    const char* what = op == 0 ? "copy_to" : "copy_from";
    if (h.body < kReply) return make_error(TC_ERR_CORRUPT, "a COPY_REPLY of %u bytes", h.body);
    const uint8_t* body = bytes + kHeader;
    const uint64_t got_rid = load<uint64_t>(body);
    const int32_t status = load<int32_t>(body + 8);
    const uint32_t flags = load<uint32_t>(body + 12);
    const uint64_t rest = h.body - kReply;
    if (got_rid != rid)
      return make_error(TC_ERR_CORRUPT, "a COPY_REPLY to request %llu where %llu was awaited",
                        (unsigned long long)got_rid, (unsigned long long)rid);
    const bool from = op == 1;
    op = -1;  // answered, whatever follows
    if (status) {
      refused = status;
      message.assign(reinterpret_cast<const char*>(body + kReply), size_t(std::min<uint64_t>(rest, kMessageMax)));
      *state = 2;
      return {};
    }
    const bool want_streamed = from && streamed;
    const uint64_t want_inline = from && !streamed ? nbytes : 0;
    if (bool(flags & kStreamed) != want_streamed || (flags & ~kStreamed) || rest != want_inline)
      return make_error(TC_ERR_CORRUPT, "a %s reply with flags 0x%x and %llu bytes; %llu%s were asked for", what,
                        flags, (unsigned long long)rest, (unsigned long long)nbytes,
                        want_streamed ? " as data frames" : "");
    if (want_inline) std::memcpy(buf, body + kReply, size_t(want_inline));
    if (want_streamed)
      if (Error e = read_data(ch, buf, nbytes, max_frame, timeout_ms); !e.ok()) return e;
    *state = 0;
    return {};
  }
};

// ---- the C ABI ------------------------------------------------------------------------

namespace {

Error check_lane(const char* fn, tc_channel ch, uint64_t max_frame, int64_t timeout_ms) {
  if (!ch) return make_error(TC_ERR_INVALID_ARG, "%s: the channel is null", fn);
  if (max_frame < kHeader + kRequest || max_frame > TC_CHANNEL_MAX_FRAME_BYTES)
    return make_error(TC_ERR_INVALID_ARG, "%s: max_frame_bytes %llu outside %zu..%d", fn,
                      (unsigned long long)max_frame, kHeader + kRequest, TC_CHANNEL_MAX_FRAME_BYTES);
  if (timeout_ms <= 0) return make_error(TC_ERR_INVALID_ARG, "%s: timeout_ms %lld", fn, (long long)timeout_ms);
  return {};
}

template <class T, class F>
tc_status guarded(const char* fn, T* obj, F&& body) noexcept {
  return simpler::guarded(fn, [&]() -> Error {
    if (!obj) return make_error(TC_ERR_INVALID_ARG, "%s: null handle", fn);
    Error e = body();
    if (!e.ok()) e.message = std::string(fn) + ": " + e.message;
    return e;
  });
}

}  // namespace

extern "C" {

tc_status simpler_l4_server_create(tc_channel ch, uint64_t max_frame_bytes, uint64_t chunk_bytes,
                                   int64_t timeout_ms, simpler_l4_server* out) {
  const char* fn = "simpler_l4_server_create";
  return simpler::guarded(fn, [&]() -> Error {
    if (!out) return make_error(TC_ERR_INVALID_ARG, "%s: out is null", fn);
    if (Error e = check_lane(fn, ch, max_frame_bytes, timeout_ms); !e.ok()) return e;
    if (!chunk_bytes || chunk_bytes > max_frame_bytes - kHeader - kReply)
      return make_error(TC_ERR_INVALID_ARG, "%s: chunk_bytes %llu does not fit frames of %llu", fn,
                        (unsigned long long)chunk_bytes, (unsigned long long)max_frame_bytes);
    *out = new simpler_l4_server_s{ch, max_frame_bytes, chunk_bytes, timeout_ms, {}};
    return {};
  });
}

tc_status simpler_l4_server_destroy(simpler_l4_server s) {
  delete s;
  return simpler::ok();
}

tc_status simpler_l4_server_add(simpler_l4_server s, uint64_t addr, uint64_t nbytes) {
  return guarded("simpler_l4_server_add", s, [&]() -> Error {
    if (!addr || !nbytes || nbytes > UINT64_MAX - addr)
      return make_error(TC_ERR_INVALID_ARG, "the range [0x%llx, +%llu) is not memory", (unsigned long long)addr,
                        (unsigned long long)nbytes);
    auto next = s->ranges.lower_bound(addr);
    const bool overlaps = (next != s->ranges.end() && next->first < addr + nbytes) ||
                          (next != s->ranges.begin() && std::prev(next)->first + std::prev(next)->second > addr);
    if (overlaps) return make_error(TC_ERR_INVALID_ARG, "[0x%llx, +%llu) overlaps a range already served",
                                    (unsigned long long)addr, (unsigned long long)nbytes);
    s->ranges.emplace(addr, nbytes);
    return {};
  });
}

tc_status simpler_l4_server_drop(simpler_l4_server s, uint64_t addr) {
  return guarded("simpler_l4_server_drop", s, [&]() -> Error {
    if (!s->ranges.erase(addr))
      return make_error(TC_ERR_INVALID_ARG, "0x%llx is not a range served", (unsigned long long)addr);
    return {};
  });
}

tc_status simpler_l4_serve(simpler_l4_server s, int32_t* served, const void** frame, uint64_t* frame_bytes) {
  return guarded("simpler_l4_serve", s, [&]() -> Error {
    if (!served || !frame || !frame_bytes) return make_error(TC_ERR_INVALID_ARG, "an output is null");
    const void* f = nullptr;
    size_t n = 0;
    if (tc_status st = tc_channel_recv(s->ch, size_t(s->max_frame), s->timeout_ms, &f, &n))
      return lane_error(st, "receiving on the command lane");
    const uint8_t* bytes = static_cast<const uint8_t*>(f);
    const Header h = header_of(bytes, n);
    if (h.type != kCopyTo && h.type != kCopyFrom) {
      *served = 0, *frame = f, *frame_bytes = n;
      return {};
    }
    *served = 1, *frame = nullptr, *frame_bytes = 0;
    return s->serve(h.type, bytes + kHeader, h.body);
  });
}

tc_status simpler_l4_copier_create(tc_channel ch, uint64_t max_frame_bytes, uint64_t inline_max,
                                   uint64_t chunk_bytes, int64_t timeout_ms, simpler_l4_copier* out) {
  const char* fn = "simpler_l4_copier_create";
  return simpler::guarded(fn, [&]() -> Error {
    if (!out) return make_error(TC_ERR_INVALID_ARG, "%s: out is null", fn);
    if (Error e = check_lane(fn, ch, max_frame_bytes, timeout_ms); !e.ok()) return e;
    if (inline_max > max_frame_bytes - kHeader - kRequest || !chunk_bytes || chunk_bytes > max_frame_bytes)
      return make_error(TC_ERR_INVALID_ARG, "%s: inline_max %llu or chunk_bytes %llu do not fit frames of %llu", fn,
                        (unsigned long long)inline_max, (unsigned long long)chunk_bytes,
                        (unsigned long long)max_frame_bytes);
    auto* c = new simpler_l4_copier_s();
    c->ch = ch, c->max_frame = max_frame_bytes, c->inline_max = inline_max, c->chunk = chunk_bytes;
    c->timeout_ms = timeout_ms;
    *out = c;
    return {};
  });
}

tc_status simpler_l4_copier_destroy(simpler_l4_copier c) {
  delete c;
  return simpler::ok();
}

tc_status simpler_l4_copy_send(simpler_l4_copier c, int32_t op, uint64_t rid, uint64_t addr, void* buf,
                               uint64_t nbytes) {
  return guarded("simpler_l4_copy_send", c, [&]() -> Error {
    if (op != 0 && op != 1) return make_error(TC_ERR_INVALID_ARG, "op %d (0 copy_to, 1 copy_from)", op);
    if (nbytes && !buf) return make_error(TC_ERR_INVALID_ARG, "buf is null");
    return c->send_request(op, rid, addr, static_cast<uint8_t*>(buf), nbytes);
  });
}

tc_status simpler_l4_copy_await(simpler_l4_copier c, int32_t* state) {
  return guarded("simpler_l4_copy_await", c, [&]() -> Error {
    if (!state) return make_error(TC_ERR_INVALID_ARG, "state is null");
    return c->await(state);
  });
}

tc_status simpler_l4_copier_frame(simpler_l4_copier c, const void** frame, uint64_t* frame_bytes) {
  return guarded("simpler_l4_copier_frame", c, [&]() -> Error {
    if (!frame || !frame_bytes) return make_error(TC_ERR_INVALID_ARG, "an output is null");
    *frame = c->frame, *frame_bytes = c->frame_bytes;
    return {};
  });
}

tc_status simpler_l4_copier_refusal(simpler_l4_copier c, int32_t* status, const char** message) {
  return guarded("simpler_l4_copier_refusal", c, [&]() -> Error {
    if (!status || !message) return make_error(TC_ERR_INVALID_ARG, "an output is null");
    *status = c->refused, *message = c->message.c_str();
    return {};
  });
}

}  // extern "C"
