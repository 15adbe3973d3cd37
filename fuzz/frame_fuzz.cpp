// libFuzzer target for the frames of the control connections (net.h's
// length-prefixed frames, and auth.h's frames with a session MAC): hostile
// bytes are read as frames, whole or in two steps (length, then the payload
// read or skipped), under every bound, until the reader refuses them; and
// payloads taken from the input, sealed by one side of a session, must be
// read back unchanged by the other. Build: scripts/check_fuzz.sh, or cmake
// -DTC_BUILD_FUZZERS=ON with clang; run:
//   build-fuzz/frame_fuzz fuzz/corpus/frame -max_total_time=300
#include <cstddef>
#include <cstdint>
#include <string>

#include "dist/auth.h"
#include "dist/net.h"
#include "socket_pair.h"

using namespace tc::dist;

namespace {

Session session(bool client) {
  Session s;
  s.client = client;
  key_session(&s, std::string(32, 'k'));
  return s;
}

void read_frames(uint8_t mode, const std::string& bytes) {
  static const size_t kBounds[4] = {0, 16, 4096, size_t(1) << 20};
  const size_t max_bytes = kBounds[(mode >> 1) & 3];
  fuzz::SocketPair pair(bytes);
  Socket& s = pair.decoder_end();
  Session server = session(false);
  if (!(mode & 1)) server.key.clear();
  for (int i = 0; i < 64; ++i) {
    std::string payload;
    tc_status st;
    if (mode & 8) {  // in two steps, taking or dropping the payload by its length
      uint64_t n = 0;
      st = recv_frame_length(s, server, &n, deadline_after_ms(1000));
      if (st == TC_OK) st = n > max_bytes ? skip_frame_payload(s, server, n, deadline_after_ms(1000))
                                          : recv_frame_payload(s, server, n, &payload, deadline_after_ms(1000));
    } else if (mode & 16) {  // net.h's plain frame
      uint64_t announced = 0;
      st = recv_frame(s, &payload, max_bytes, deadline_after_ms(1000), &announced);
      if (st == TC_ERR_CORRUPT && announced <= max_bytes) __builtin_trap();
    } else {
      st = recv_frame(s, server, &payload, max_bytes, deadline_after_ms(1000));
    }
    if (st == TC_OK && payload.size() > max_bytes) __builtin_trap();  // a bound was not kept
    if (st != TC_OK) return;
  }
}

// Payloads separated by '|' in the input, sealed by a client session and
// read by the server session: every one must verify and come back as sent.
void round_trip(const std::string& bytes) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return;
  Socket a(sv[0]), b(sv[1]);
  Session client = session(true), server = session(false);
  size_t start = 0;
  for (int i = 0; i < 16 && start <= bytes.size(); ++i) {
    size_t bar = bytes.find('|', start);
    if (bar == std::string::npos) bar = bytes.size();
    const std::string payload = bytes.substr(start, bar - start);
    start = bar + 1;
    if (send_frame(a, client, payload, deadline_after_ms(1000)) != TC_OK) __builtin_trap();
    std::string got;
    if (recv_frame(b, server, &got, payload.size(), deadline_after_ms(1000)) != TC_OK || got != payload)
      __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] == 0xff) round_trip(bytes);
  else read_frames(data[0], bytes);
  return 0;
}
