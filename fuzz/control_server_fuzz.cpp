// libFuzzer target for the requests the control servers parse: the
// rendezvous store (sets and gets, namespaces, the store's bounds, sets
// refused on their length and read through) and the remote endpoint's
// fetches, each served by the library's own serve() over a socket pair.
// The first input byte picks the server and whether a well-formed plain
// hello is put first (so that most inputs reach the requests); the rest is
// what the client sends. Build: scripts/check_fuzz.sh; run:
//   build-fuzz/control_server_fuzz fuzz/corpus/control_server -max_total_time=300
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "dist/auth.h"
#include "dist/net.h"
#include "dist/remote.h"
#include "dist/store.h"
#include "socket_pair.h"

using namespace tc::dist;

namespace {

// A plain hello as client_handshake sends it (auth.h), framed.
std::string plain_hello(Purpose purpose, uint32_t rank) {
  std::string hello = "TCAUTH02";
  hello.push_back(0);  // plain
  hello.push_back(char(purpose));
  put_u64(&hello, rank);
  hello.append(32, '\0');
  const uint32_t n = uint32_t(hello.size());
  return std::string{char(n), char(n >> 8), char(n >> 16), char(n >> 24)} + hello;
}

void serve_store(const std::string& bytes) {
  StoreLimits limits;
  limits.max_message = 1 << 20;
  limits.max_bytes = 4096;
  std::unique_ptr<StoreServer> server;
  std::string why;
  if (StoreServer::start("127.0.0.1", 0, nullptr, 3, {}, 1000, &server, &why, nullptr, limits) != TC_OK) return;
  server->close_listener();  // fed by hand
  LocalStore local(server.get());
  local.set("tc/nccl_unique_id", "id", &why);
  local.set("0", "rank 0's address", &why);
  {
    fuzz::SocketPair pair(bytes);
    server->serve(pair.decoder_end());
  }
  if (server->held_bytes() > limits.max_bytes) __builtin_trap();
  std::string v;
  // Nothing a client sends may touch rank 0's namespace.
  if (!server->lookup("tc/nccl_unique_id", &v) || v != "id") __builtin_trap();
  if (!server->lookup("0", &v) || v != "rank 0's address") __builtin_trap();
}

void serve_remote(const std::string& bytes) {
  static char weights[64] = "published bytes";
  std::unique_ptr<RemoteEndpoint> ep;
  std::string why;
  if (RemoteEndpoint::create(TC_REMOTE_ROLE_WEIGHT_SERVER, "127.0.0.1", 0, nullptr, 1000, &ep, &why) != TC_OK) return;
  ep->publish("w", weights, sizeof weights);
  fuzz::SocketPair pair(bytes);
  ep->serve(pair.decoder_end());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool remote = data[0] & 1, hello = !(data[0] & 2);
  std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (hello) bytes = plain_hello(remote ? Purpose::Remote : Purpose::Store, remote ? 0xffffffffu : 1 + (data[0] >> 7)) + bytes;
  if (remote) serve_remote(bytes);
  else serve_store(bytes);
  return 0;
}
