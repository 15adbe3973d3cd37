// libFuzzer target for both sides of the control connections' handshake
// (auth.h): the server reading a hello and a proof, the client reading a
// challenge and the server's proof, with a keyring or plain. The first
// input byte picks the side and the mode; the rest is what the peer sends.
// Besides memory errors it traps on two wrongs: a keyed handshake that
// succeeds (the peer would have forged a MAC over a nonce it never saw) and
// error text carrying raw bytes (a peer could forge log lines). Build:
// scripts/check_fuzz.sh; run:
//   build-fuzz/handshake_fuzz fuzz/corpus/handshake -max_total_time=300
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "dist/auth.h"
#include "socket_pair.h"

using namespace tc::dist;

namespace {

const Keyring& ring() {
  static const Keyring r = [] {
    Keyring k;
    k.local_identity = "rank0";
    k.active_key_id = 1;
    k.keys.push_back(Key{"rank0", 1, std::string(32, 's')});
    k.keys.push_back(Key{"rank1", 1, std::string(32, 't')});
    return k;
  }();
  return r;
}

void check_text(const std::string& why) {
  for (char c : why)
    if (uint8_t(c) < 0x20 || uint8_t(c) >= 0x7f) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool client = data[0] & 1, keyed = data[0] & 2;
  const Keyring* r = keyed ? &ring() : nullptr;
  fuzz::SocketPair pair(std::string(reinterpret_cast<const char*>(data) + 1, size - 1));
  PeerInfo peer;
  Session session;
  std::string why;
  tc_status st;
  if (client) {
    st = client_handshake(pair.decoder_end(), r, Purpose::Store, 1, "", deadline_after_ms(1000), &peer, &why, &session);
  } else {
    AdmitFn admit = [](const PeerInfo& p) {
      return p.claimed_rank >= 1 && p.claimed_rank < 4 ? std::string() : std::string("rank out of range");
    };
    st = server_handshake(pair.decoder_end(), r, Purpose::Store, admit, deadline_after_ms(1000), &peer, &why,
                          &session);
  }
  if (keyed && st == TC_OK) __builtin_trap();
  if (st != TC_OK) check_text(why);
  return 0;
}
