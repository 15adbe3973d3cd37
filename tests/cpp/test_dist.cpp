// DiLoCo's asynchronous round under concurrency: the caller keeps training
// (writing theta) while the worker thread exchanges and updates, on a world
// of one and on two gloo ranks in one process. Run under ThreadSanitizer
// (a build with -fsanitize=thread) this is the proof that nothing races
// with the caller's parameters; without it, it checks the arithmetic.
//
// The remote endpoint's wire: a fake server (raw sockets on loopback) sends
// replies a real one never does, and the client refuses them as soon as
// their length arrives; peer identity strings stay put; identity bytes a
// peer sends reach error text escaped.
//
// Authenticated channels (channel.h): frames pass through a relay that can
// alter, replay, reorder or drop them; every such frame is refused with
// TC_ERR_AUTH, and a peer of the old handshake version is refused by name.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "tensorcore/channel.h"
#include "tensorcore/tensorcore.h"

namespace {

struct Rank {
  tc_context ctx = nullptr;
  tc_dist dist = nullptr;
  tc_diloco diloco = nullptr;
  tc_buffer theta = nullptr;
  float* p = nullptr;
};

tc_diloco_config async_config(int32_t compress) {
  tc_diloco_config c{};
  c.inner_steps = 4;
  c.outer_lr = 0.7f;
  c.outer_momentum = 0.9f;
  c.outer_beta2 = 0.999f;
  c.outer_eps = 1e-8f;
  c.outer_optimizer = TC_DILOCO_OUTER_NESTEROV;
  c.compress = compress;
  c.async_overlap = 1;
  return c;
}

// Trains `rounds` outer rounds of 4 inner steps; inner steps keep writing
// theta while the previous round is in flight (apply_outer commits it).
void train(Rank& r, int rank, int rounds, size_t n) {
  std::mt19937 gen(1234 + rank);
  std::normal_distribution<float> normal(0.f, 0.01f);
  for (int outer = 0; outer < rounds; ++outer) {
    for (int s = 0; s < 4; ++s) {
      for (size_t i = 0; i < n; ++i) r.p[i] -= normal(gen);  // the "optimizer step"
      int32_t due = 0;
      ASSERT_EQ(tc_diloco_step(r.diloco, &due), TC_OK);
      int32_t state = 0, ws = 0;
      uint64_t rid = 0;
      ASSERT_EQ(tc_diloco_async_poll(r.diloco, &state, &ws, &rid), TC_OK);  // polled while the worker runs
      if (due) ASSERT_EQ(tc_diloco_apply_outer(r.diloco), TC_OK) << tc_last_error_detail();
    }
  }
  ASSERT_EQ(tc_diloco_async_wait(r.diloco), TC_OK) << tc_last_error_detail();
  ASSERT_EQ(tc_diloco_async_commit(r.diloco), TC_OK);
  uint64_t outer = 0;
  ASSERT_EQ(tc_diloco_outer_steps_completed(r.diloco, &outer), TC_OK);
  EXPECT_EQ(outer, uint64_t(rounds));
}

void open_rank(Rank& r, int32_t backend, int world, int rank, const std::string& url, int32_t compress, size_t n) {
  ASSERT_EQ(tc_init_device("cpu", &r.ctx), TC_OK);
  ASSERT_EQ(tc_dist_init(r.ctx, backend, world, rank, url.c_str(), &r.dist), TC_OK) << tc_last_error_detail();
  tc_diloco_config c = async_config(compress);
  ASSERT_EQ(tc_diloco_init(r.dist, &c, &r.diloco), TC_OK) << tc_last_error_detail();
  ASSERT_EQ(tc_buffer_alloc(r.ctx, n * 4, &r.theta), TC_OK);
  void* p = nullptr;
  ASSERT_EQ(tc_buffer_map(r.theta, &p), TC_OK);
  r.p = static_cast<float*>(p);
  for (size_t i = 0; i < n; ++i) r.p[i] = float(rank + 1) * std::sin(float(i));
  ASSERT_EQ(tc_diloco_add_parameter(r.diloco, "theta", r.theta, n, TC_DTYPE_F32), TC_OK) << tc_last_error_detail();
}

void close_rank(Rank& r) {
  EXPECT_EQ(tc_diloco_finalize(r.diloco), TC_OK);
  EXPECT_EQ(tc_dist_finalize(r.dist), TC_OK);
  EXPECT_EQ(tc_buffer_free(r.theta), TC_OK);
  EXPECT_EQ(tc_shutdown(r.ctx), TC_OK);
}

}  // namespace

TEST(DilocoAsync, SingleRankTrainingOverlapsTheRound) {
  const size_t n = 4096;
  Rank r;
  open_rank(r, TC_DIST_SINGLE, 1, 0, "single://t", TC_DILOCO_COMPRESS_TOPK_1PCT, n);
  train(r, 0, 6, n);
  for (size_t i = 0; i < n; ++i) ASSERT_TRUE(std::isfinite(r.p[i]));
  close_rank(r);
}

TEST(DilocoAsync, TwoGlooRanksInOneProcess) {
  tc_context probe = nullptr;
  ASSERT_EQ(tc_init_device("cpu", &probe), TC_OK);
  struct tc_runtime_capabilities caps {};
  caps.struct_size = sizeof caps;
  ASSERT_EQ(tc_runtime_capabilities(probe, &caps), TC_OK);
  tc_shutdown(probe);
  if (!tc_capability_available(&caps, TC_CAPABILITY_DIST_GLOO)) GTEST_SKIP() << "gloo not built";
  const size_t n = 2048;
  const std::string url = "gloo+tcp://127.0.0.1:" + std::to_string(29000 + (getpid() % 2000)) + "?timeout_ms=30000";
  for (int32_t compress : {TC_DILOCO_COMPRESS_NONE, TC_DILOCO_COMPRESS_FP16, TC_DILOCO_COMPRESS_TOPK_1PCT}) {
    Rank ranks[2];
    std::thread t1([&] { open_rank(ranks[1], TC_DIST_GLOO, 2, 1, url, compress, n); });
    open_rank(ranks[0], TC_DIST_GLOO, 2, 0, url, compress, n);
    t1.join();
    std::thread u1([&] { train(ranks[1], 1, 5, n); });
    train(ranks[0], 0, 5, n);
    u1.join();
    // After the final commit with no progress since, theta is the anchor,
    // identical on both ranks.
    EXPECT_EQ(std::memcmp(ranks[0].p, ranks[1].p, n * 4), 0) << "compress " << compress;
    std::thread c1([&] { close_rank(ranks[1]); });
    close_rank(ranks[0]);
    c1.join();
  }
}

// TC_DIST_DEVICE_PATH=1: theta is staged through a queue's worker thread and
// the exchange goes through device scratch and the staging again, on the
// DiLoCo worker thread, while the caller trains: the handoffs between the
// three threads are what ThreadSanitizer checks here.
TEST(DilocoAsync, DevicePathWhileTraining) {
  ASSERT_EQ(setenv("TC_DIST_DEVICE_PATH", "1", 1), 0);
  {
    const size_t n = 4096;
    Rank r;
    open_rank(r, TC_DIST_SINGLE, 1, 0, "single://t", TC_DILOCO_COMPRESS_FP16, n);
    train(r, 0, 6, n);
    for (size_t i = 0; i < n; ++i) ASSERT_TRUE(std::isfinite(r.p[i]));
    close_rank(r);
  }
  tc_context probe = nullptr;
  ASSERT_EQ(tc_init_device("cpu", &probe), TC_OK);
  struct tc_runtime_capabilities caps {};
  caps.struct_size = sizeof caps;
  ASSERT_EQ(tc_runtime_capabilities(probe, &caps), TC_OK);
  tc_shutdown(probe);
  if (tc_capability_available(&caps, TC_CAPABILITY_DIST_GLOO)) {
    const size_t n = 2048;
    const std::string url =
        "gloo+tcp://127.0.0.1:" + std::to_string(31000 + (getpid() % 2000)) + "?timeout_ms=30000";
    Rank ranks[2];
    std::thread t1([&] { open_rank(ranks[1], TC_DIST_GLOO, 2, 1, url, TC_DILOCO_COMPRESS_NONE, n); });
    open_rank(ranks[0], TC_DIST_GLOO, 2, 0, url, TC_DILOCO_COMPRESS_NONE, n);
    t1.join();
    std::thread u1([&] { train(ranks[1], 1, 5, n); });
    train(ranks[0], 0, 5, n);
    u1.join();
    EXPECT_EQ(std::memcmp(ranks[0].p, ranks[1].p, n * 4), 0);
    std::thread c1([&] { close_rank(ranks[1]); });
    close_rank(ranks[0]);
    c1.join();
  }
  unsetenv("TC_DIST_DEVICE_PATH");
}

TEST(DistApi, NullAndStaleHandlesAreRefused) {
  int32_t v = 0;
  EXPECT_EQ(tc_dist_world_size(nullptr, &v), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_allreduce(reinterpret_cast<tc_dist>(0x1000), nullptr, 1, TC_DTYPE_F32, 0), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_diloco_apply_outer(nullptr), TC_ERR_INVALID_ARG);
  struct tc_diloco_capabilities caps {};
  caps.struct_size = sizeof caps;
  EXPECT_EQ(tc_diloco_capability_query(nullptr, TC_DILOCO_CAPABILITIES_ABI_VERSION_1, &caps), TC_OK);
  EXPECT_EQ(caps.state_abi_version_current, 2u);
  EXPECT_EQ(tc_diloco_capability_query(nullptr, 99, &caps), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_remote_shutdown(nullptr), TC_ERR_INVALID_ARG);
}

// ---- the remote endpoint on the wire ------------------------------------------

namespace {

bool read_exact(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n) {
    ssize_t k = ::recv(fd, c, n, 0);
    if (k <= 0) return false;
    c += k;
    n -= size_t(k);
  }
  return true;
}
bool write_exact(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n) {
    ssize_t k = ::send(fd, c, n, MSG_NOSIGNAL);
    if (k <= 0) return false;
    c += k;
    n -= size_t(k);
  }
  return true;
}
void put_u32(std::string* s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s->push_back(char(uint8_t(v >> (8 * i))));
}
void put_u64(std::string* s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s->push_back(char(uint8_t(v >> (8 * i))));
}
bool send_frame_raw(int fd, const std::string& payload, uint32_t announced) {
  std::string m;
  put_u32(&m, announced);
  m += payload;
  return write_exact(fd, m.data(), m.size());
}
bool send_frame_raw(int fd, const std::string& payload) { return send_frame_raw(fd, payload, uint32_t(payload.size())); }
bool recv_frame_raw(int fd, std::string* out) {
  unsigned char len[4];
  if (!read_exact(fd, len, 4)) return false;
  uint32_t n = uint32_t(len[0]) | uint32_t(len[1]) << 8 | uint32_t(len[2]) << 16 | uint32_t(len[3]) << 24;
  if (n > (1u << 24)) return false;
  out->assign(n, '\0');
  return n == 0 || read_exact(fd, &(*out)[0], n);
}

// One connection on a loopback port, served by `script` on a thread; the
// connection stays open until the script returns and the peer hangs up.
class FakeServer {
 public:
  explicit FakeServer(std::function<void(int fd)> script) {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(listener_, 4), 0);
    socklen_t len = sizeof a;
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this, script] {
      int fd = ::accept(listener_, nullptr, nullptr);
      if (fd < 0) return;
      script(fd);
      char c;
      while (::recv(fd, &c, 1, 0) > 0) {
      }  // until the client hangs up
      ::close(fd);
    });
  }
  ~FakeServer() {
    ::shutdown(listener_, SHUT_RDWR);
    thread_.join();
    ::close(listener_);
  }
  std::string url() const { return "tcp://127.0.0.1:" + std::to_string(port_); }

 private:
  int listener_ = -1;
  int port_ = 0;
  std::thread thread_;
};

// The plain (unauthenticated) hello of the handshake, server side.
bool plain_hello(int fd) {
  std::string hello;
  if (!recv_frame_raw(fd, &hello) || hello.size() != 50 || hello.compare(0, 8, "TCAUTH02") != 0) return false;
  return send_frame_raw(fd, "P");
}

// The client's timeout is read when the endpoint is made: a short one keeps
// a test that would wait for bytes that never come bounded in time.
struct ShortTimeout {
  std::string saved;
  bool had = false;
  ShortTimeout() {
    if (const char* v = std::getenv("TC_DIST_TIMEOUT_MS")) {
      had = true;
      saved = v;
    }
    ::setenv("TC_DIST_TIMEOUT_MS", "6000", 1);
  }
  ~ShortTimeout() {
    if (had) ::setenv("TC_DIST_TIMEOUT_MS", saved.c_str(), 1);
    else ::unsetenv("TC_DIST_TIMEOUT_MS");
  }
};

struct Client {
  tc_context ctx = nullptr;
  tc_remote ep = nullptr;
  Client() {
    ShortTimeout t;
    EXPECT_EQ(tc_init_device("cpu", &ctx), TC_OK);
    EXPECT_EQ(tc_remote_init(ctx, TC_REMOTE_ROLE_COMPUTE_CLIENT, nullptr, &ep), TC_OK) << tc_last_error_detail();
  }
  ~Client() {
    if (ep) EXPECT_EQ(tc_remote_shutdown(ep), TC_OK);
    if (ctx) tc_shutdown(ctx);
  }
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST(RemoteWire, RequestSaysTheSizeAndAnExactReplyIsAccepted) {
  std::string request;
  FakeServer server([&](int fd) {
    if (!plain_hello(fd) || !recv_frame_raw(fd, &request)) return;
    send_frame_raw(fd, "D" + std::string("0123456789abcdef"));
  });
  Client c;
  int32_t peer = -1;
  ASSERT_EQ(tc_remote_connect(c.ep, server.url().c_str(), &peer), TC_OK) << tc_last_error_detail();
  char out[16];
  ASSERT_EQ(tc_remote_tensor_fetch(c.ep, peer, "w", out, sizeof out), TC_OK) << tc_last_error_detail();
  EXPECT_EQ(std::string(out, 16), "0123456789abcdef");
  std::string want(1, 'F');
  put_u64(&want, 16);
  want += "w";
  EXPECT_EQ(request, want);
}

TEST(RemoteWire, ReplyLongerThanAskedIsRefusedAtItsLength) {
  // A 'D' frame announcing 4 GiB - 16 bytes for a 16-byte tensor, and then
  // nothing: the client refuses it at once, allocating nothing and waiting
  // for none of it; the connection is closed, so a later fetch fails at once.
  for (uint32_t announced : {0xfffffff0u, 4096u, 1u << 20}) {
    SCOPED_TRACE(announced);
    FakeServer server([&](int fd) {
      std::string request;
      if (!plain_hello(fd) || !recv_frame_raw(fd, &request)) return;
      std::string head;
      put_u32(&head, announced);
      head += "D0123456789abcdef";
      write_exact(fd, head.data(), head.size());
    });
    Client c;
    int32_t peer = -1;
    ASSERT_EQ(tc_remote_connect(c.ep, server.url().c_str(), &peer), TC_OK) << tc_last_error_detail();
    char out[16];
    std::memset(out, 0x5a, sizeof out);
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(tc_remote_tensor_fetch(c.ep, peer, "w", out, sizeof out), TC_ERR_CORRUPT);
    EXPECT_LT(seconds_since(t0), 3.0);
    std::string d = tc_last_error_detail();
    EXPECT_NE(d.find("announced a reply of " + std::to_string(announced) + " bytes"), std::string::npos) << d;
    for (char ch : out) EXPECT_EQ(ch, 0x5a);  // dst untouched
    t0 = std::chrono::steady_clock::now();
    EXPECT_NE(tc_remote_tensor_fetch(c.ep, peer, "w", out, sizeof out), TC_OK);
    EXPECT_LT(seconds_since(t0), 3.0);
  }
}

TEST(RemoteWire, MalformedAndShortRepliesAreRefused) {
  // A reply within the bound but of the wrong size or tag.
  for (std::string reply : {std::string("D0123"), std::string("X0123456789abcdef"), std::string("D")}) {
    SCOPED_TRACE(reply);
    FakeServer server([&](int fd) {
      std::string request;
      if (!plain_hello(fd) || !recv_frame_raw(fd, &request)) return;
      send_frame_raw(fd, reply);
    });
    Client c;
    int32_t peer = -1;
    ASSERT_EQ(tc_remote_connect(c.ep, server.url().c_str(), &peer), TC_OK) << tc_last_error_detail();
    char out[16];
    std::memset(out, 0x5a, sizeof out);
    EXPECT_EQ(tc_remote_tensor_fetch(c.ep, peer, "w", out, sizeof out), TC_ERR_CORRUPT);
    for (char ch : out) EXPECT_EQ(ch, 0x5a);
  }
}

TEST(RemoteWire, ServerReasonsAreEscaped) {
  FakeServer server([&](int fd) {
    std::string request;
    if (!plain_hello(fd) || !recv_frame_raw(fd, &request)) return;
    send_frame_raw(fd, std::string("Eno such tensor\n\x1b[31mFORGED"));
  });
  Client c;
  int32_t peer = -1;
  ASSERT_EQ(tc_remote_connect(c.ep, server.url().c_str(), &peer), TC_OK) << tc_last_error_detail();
  char out[16];
  EXPECT_EQ(tc_remote_tensor_fetch(c.ep, peer, "w", out, sizeof out), TC_ERR_INVALID_ARG);
  std::string d = tc_last_error_detail();
  EXPECT_NE(d.find("no such tensor\\x0a\\x1b[31mFORGED"), std::string::npos) << d;
  EXPECT_EQ(d.find('\x1b'), std::string::npos) << d;
}

TEST(RemoteWire, UnprovenIdentityBytesAreEscaped) {
  // An authenticated "server" that answers the client's proof with a proof
  // of an identity full of control bytes and a MAC it cannot have.
  const std::string evil = "weights\n\x1b[2Jserver'";
  FakeServer server([&](int fd) {
    std::string hello, proof;
    if (!recv_frame_raw(fd, &hello) || hello.size() != 50) return;
    if (!send_frame_raw(fd, "C" + std::string(32, 'n')) || !recv_frame_raw(fd, &proof)) return;
    std::string m(1, 'A');
    m.push_back(char(evil.size()));
    m += evil;
    put_u64(&m, 9);
    m += std::string(32, 'm');
    send_frame_raw(fd, m);
  });
  ShortTimeout t;
  tc_context ctx = nullptr;
  ASSERT_EQ(tc_init_device("cpu", &ctx), TC_OK);
  const std::string secret(32, 'k');
  tc_auth_key key{"client", 1, secret.data(), secret.size()};
  tc_auth_config cfg{nullptr, 0, &key, 1};
  tc_remote ep = nullptr;
  ASSERT_EQ(tc_remote_init_authenticated(ctx, TC_REMOTE_ROLE_COMPUTE_CLIENT, nullptr, &cfg, &ep), TC_OK)
      << tc_last_error_detail();
  int32_t peer = -1;
  EXPECT_EQ(tc_remote_connect_authenticated(ep, server.url().c_str(), "weights", &peer), TC_ERR_AUTH);
  std::string d = tc_last_error_detail();
  EXPECT_NE(d.find("'weights\\x0a\\x1b[2Jserver\\x27'"), std::string::npos) << d;
  EXPECT_EQ(d.find('\n'), std::string::npos) << d;
  EXPECT_EQ(d.find('\x1b'), std::string::npos) << d;
  EXPECT_EQ(tc_remote_shutdown(ep), TC_OK);
  tc_shutdown(ctx);
}

TEST(RemoteWire, PeerIdentityStringsStayPutAsPeersArrive) {
  tc_context ctx = nullptr;
  ASSERT_EQ(tc_init_device("cpu", &ctx), TC_OK);
  const std::string s_secret(32, 's'), c_secret(32, 'c');
  tc_auth_key keys[2] = {{"srv", 1, s_secret.data(), s_secret.size()}, {"cli", 2, c_secret.data(), c_secret.size()}};
  tc_auth_config server_cfg{"srv", 0, keys, 2}, client_cfg{"cli", 0, keys, 2};
  tc_remote server = nullptr, client = nullptr;
  ASSERT_EQ(tc_remote_init_authenticated(ctx, TC_REMOTE_ROLE_WEIGHT_SERVER, "tcp://127.0.0.1:0", &server_cfg, &server),
            TC_OK)
      << tc_last_error_detail();
  ASSERT_EQ(tc_remote_init_authenticated(ctx, TC_REMOTE_ROLE_COMPUTE_CLIENT, nullptr, &client_cfg, &client), TC_OK);
  int32_t port = 0;
  ASSERT_EQ(tc_remote_bound_port(server, &port), TC_OK);
  const std::string url = "tcp://127.0.0.1:" + std::to_string(port);
  int32_t first = -1;
  ASSERT_EQ(tc_remote_connect_authenticated(client, url.c_str(), "srv", &first), TC_OK) << tc_last_error_detail();
  const char* mine = nullptr;
  ASSERT_EQ(tc_remote_peer_identity(client, first, &mine), TC_OK);
  ASSERT_STREQ(mine, "srv");
  const char* theirs = nullptr;
  for (int i = 0; i < 500 && tc_remote_peer_identity(server, 0, &theirs) != TC_OK; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_NE(theirs, nullptr);
  ASSERT_STREQ(theirs, "cli");
  const char* theirs_first = theirs;
  // Many more peers on both sides: the first strings neither move nor change.
  for (int i = 0; i < 40; ++i) {
    int32_t id = -1;
    ASSERT_EQ(tc_remote_connect_authenticated(client, url.c_str(), "srv", &id), TC_OK) << tc_last_error_detail();
  }
  for (int i = 0; i < 500 && tc_remote_peer_identity(server, 40, &theirs) != TC_OK; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const char* again = nullptr;
  ASSERT_EQ(tc_remote_peer_identity(client, first, &again), TC_OK);
  EXPECT_EQ(again, mine);
  EXPECT_STREQ(mine, "srv");
  const char* theirs_again = nullptr;
  ASSERT_EQ(tc_remote_peer_identity(server, 0, &theirs_again), TC_OK);
  EXPECT_EQ(theirs_again, theirs_first);
  EXPECT_STREQ(theirs_first, "cli");
  EXPECT_EQ(tc_remote_shutdown(client), TC_OK);
  EXPECT_EQ(tc_remote_shutdown(server), TC_OK);
  tc_shutdown(ctx);
}

TEST(RemoteWire, TensorsLargerThanAFrameAreRefusedAtTheSender) {
  tc_context ctx = nullptr;
  ASSERT_EQ(tc_init_device("cpu", &ctx), TC_OK);
  tc_remote server = nullptr, client = nullptr;
  ASSERT_EQ(tc_remote_init(ctx, TC_REMOTE_ROLE_WEIGHT_SERVER, "tcp://127.0.0.1:0", &server), TC_OK);
  ASSERT_EQ(tc_remote_init(ctx, TC_REMOTE_ROLE_COMPUTE_CLIENT, nullptr, &client), TC_OK);
  static char byte;
  // Registration records the range only; nothing is read here.
  const size_t largest = size_t(0xFFFFFFFFu) - 1;  // one 'D' tag + the bytes fill a u32-length frame
  EXPECT_EQ(tc_remote_register_tensor(server, "edge", &byte, largest), TC_OK) << tc_last_error_detail();
  for (size_t n : {largest + 1, size_t(1) << 32, size_t(1) << 40}) {
    EXPECT_EQ(tc_remote_register_tensor(server, "big", &byte, n), TC_ERR_INVALID_ARG) << n;
    EXPECT_NE(std::string(tc_last_error_detail()).find("4 GiB"), std::string::npos) << tc_last_error_detail();
  }
  // (Never served: the range behind it is one byte.)
  EXPECT_EQ(tc_remote_unregister_tensor(server, "edge"), TC_OK);
  int32_t port = 0;
  ASSERT_EQ(tc_remote_bound_port(server, &port), TC_OK);
  int32_t peer = -1;
  ASSERT_EQ(tc_remote_connect(client, ("tcp://127.0.0.1:" + std::to_string(port)).c_str(), &peer), TC_OK);
  EXPECT_EQ(tc_remote_tensor_fetch(client, peer, "edge", &byte, largest + 1), TC_ERR_INVALID_ARG);
  EXPECT_NE(std::string(tc_last_error_detail()).find("4 GiB"), std::string::npos) << tc_last_error_detail();
  char small[3] = {1, 2, 3}, back[3] = {};
  ASSERT_EQ(tc_remote_register_tensor(server, "small", small, 3), TC_OK);
  // A size the server does not have is its refusal, and the connection lives on.
  EXPECT_EQ(tc_remote_tensor_fetch(client, peer, "small", back, 1), TC_ERR_INVALID_ARG);
  EXPECT_NE(std::string(tc_last_error_detail()).find("not 1"), std::string::npos) << tc_last_error_detail();
  EXPECT_EQ(tc_remote_tensor_fetch(client, peer, "small", back, 3), TC_OK) << tc_last_error_detail();
  EXPECT_EQ(std::memcmp(back, small, 3), 0);
  EXPECT_EQ(tc_remote_shutdown(client), TC_OK);
  EXPECT_EQ(tc_remote_shutdown(server), TC_OK);
  tc_shutdown(ctx);
}

// ---- authenticated channels ---------------------------------------------------

namespace {

const char kChannelSecret[] = "0123456789abcdef0123456789abcdef-channel";

tc_auth_config channel_auth(tc_auth_key* key) {
  *key = tc_auth_key{"peer", 1, kChannelSecret, sizeof kChannelSecret - 1};
  return tc_auth_config{nullptr, 0, key, 1};
}

// client <-> relay <-> server: the test moves every frame between the two
// socket pairs itself, so it can alter, replay, reorder or drop any of them.
struct Relayed {
  int client_side[2] = {-1, -1}, server_side[2] = {-1, -1};
  tc_channel client = nullptr, server = nullptr;
  Relayed() {
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, client_side), 0);
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, server_side), 0);
    tc_auth_key kc, ks;
    tc_auth_config ac = channel_auth(&kc), as = channel_auth(&ks);
    tc_status sc = TC_ERR_INTERNAL;
    std::thread server_open([&] { sc = tc_channel_open(server_side[0], 1, &as, nullptr, 5000, &server); });
    std::thread client_open([&] {
      EXPECT_EQ(tc_channel_open(client_side[0], 0, &ac, "peer", 5000, &client), TC_OK) << tc_last_error_detail();
    });
    // The handshake: hello, challenge, proof, accept.
    for (int i = 0; i < 4; ++i) {
      std::string f;
      if (i % 2 == 0) {
        EXPECT_TRUE(recv_frame_raw(client_side[1], &f));
        EXPECT_TRUE(send_frame_raw(server_side[1], f));
      } else {
        EXPECT_TRUE(recv_frame_raw(server_side[1], &f));
        EXPECT_TRUE(send_frame_raw(client_side[1], f));
      }
    }
    client_open.join();
    server_open.join();
    EXPECT_EQ(sc, TC_OK);
  }
  ~Relayed() {
    if (client) tc_channel_close(client);
    if (server) tc_channel_close(server);
    for (int fd : {client_side[0], client_side[1], server_side[0], server_side[1]}) ::close(fd);
  }
  // The next frame the client sent, as it travels (payload and tag).
  std::string take_from_client() {
    std::string f;
    EXPECT_TRUE(recv_frame_raw(client_side[1], &f));
    return f;
  }
  void deliver_to_server(const std::string& f) { EXPECT_TRUE(send_frame_raw(server_side[1], f)); }
  tc_status server_recv(std::string* out) {
    const void* data = nullptr;
    size_t n = 0;
    tc_status st = tc_channel_recv(server, 1 << 20, 2000, &data, &n);
    if (st == TC_OK) out->assign(static_cast<const char*>(data), n);
    return st;
  }
};

}  // namespace

TEST(Channel, GatheredPartsArriveAsOneFrameAndEachFrameCarriesASixteenByteTag) {
  Relayed r;
  const std::string a = "SL4F-header;", b(70000, 'x'), c = "tail";
  const tc_channel_part parts[3] = {{a.data(), a.size()}, {b.data(), b.size()}, {c.data(), c.size()}};
  ASSERT_EQ(tc_channel_sendv(r.client, parts, 3, 2000), TC_OK) << tc_last_error_detail();
  std::string f = r.take_from_client();
  EXPECT_EQ(f.size(), a.size() + b.size() + c.size() + 16);
  EXPECT_EQ(f.substr(0, a.size() + b.size() + c.size()), a + b + c);  // authenticated, not encrypted
  r.deliver_to_server(f);
  std::string got;
  ASSERT_EQ(r.server_recv(&got), TC_OK) << tc_last_error_detail();
  EXPECT_EQ(got, a + b + c);
  // Bad parts are refused before anything is sent.
  EXPECT_EQ(tc_channel_sendv(r.client, parts, 0, 2000), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_channel_sendv(r.client, nullptr, 1, 2000), TC_ERR_INVALID_ARG);
  const tc_channel_part null_part = {nullptr, 3};
  EXPECT_EQ(tc_channel_sendv(r.client, &null_part, 1, 2000), TC_ERR_INVALID_ARG);
  // And the channel still works.
  ASSERT_EQ(tc_channel_send(r.client, "ok", 2, 2000), TC_OK);
  r.deliver_to_server(r.take_from_client());
  ASSERT_EQ(r.server_recv(&got), TC_OK);
  EXPECT_EQ(got, "ok");
}

TEST(Channel, AFlippedBitAnywhereInAFrameIsRefused) {
  // Payload (its first byte, as a simpler frame's header; a middle one), tag.
  for (size_t at : {size_t(0), size_t(500), size_t(1000 + 3)}) {
    Relayed r;
    const std::string payload(1000, 'p');
    ASSERT_EQ(tc_channel_send(r.client, payload.data(), payload.size(), 2000), TC_OK);
    std::string f = r.take_from_client();
    f[at] ^= 0x10;
    r.deliver_to_server(f);
    std::string got;
    EXPECT_EQ(r.server_recv(&got), TC_ERR_AUTH) << "byte " << at;
    EXPECT_NE(std::string(tc_last_error_detail()).find("failed its MAC"), std::string::npos) << tc_last_error_detail();
    // The channel is out of step for good.
    EXPECT_EQ(r.server_recv(&got), TC_ERR_IO);
  }
}

TEST(Channel, AnAlteredLengthIsRefused) {
  Relayed r;
  const std::string payload(64, 'p');
  ASSERT_EQ(tc_channel_send(r.client, payload.data(), payload.size(), 2000), TC_OK);
  std::string f = r.take_from_client();
  f.pop_back();  // one byte shorter, announced as such: the tag no longer matches
  r.deliver_to_server(f);
  std::string got;
  EXPECT_EQ(r.server_recv(&got), TC_ERR_AUTH);
}

TEST(Channel, AReplayedFrameIsRefused) {
  Relayed r;
  ASSERT_EQ(tc_channel_send(r.client, "first", 5, 2000), TC_OK);
  const std::string f = r.take_from_client();
  r.deliver_to_server(f);
  std::string got;
  ASSERT_EQ(r.server_recv(&got), TC_OK);
  r.deliver_to_server(f);  // the same bytes again
  EXPECT_EQ(r.server_recv(&got), TC_ERR_AUTH);
}

TEST(Channel, ReorderedOrDroppedFramesAreRefused) {
  {
    Relayed r;
    ASSERT_EQ(tc_channel_send(r.client, "one", 3, 2000), TC_OK);
    ASSERT_EQ(tc_channel_send(r.client, "two", 3, 2000), TC_OK);
    const std::string one = r.take_from_client(), two = r.take_from_client();
    r.deliver_to_server(two);
    r.deliver_to_server(one);
    std::string got;
    EXPECT_EQ(r.server_recv(&got), TC_ERR_AUTH);
  }
  {
    Relayed r;
    ASSERT_EQ(tc_channel_send(r.client, "one", 3, 2000), TC_OK);
    ASSERT_EQ(tc_channel_send(r.client, "two", 3, 2000), TC_OK);
    r.take_from_client();  // dropped
    r.deliver_to_server(r.take_from_client());
    std::string got;
    EXPECT_EQ(r.server_recv(&got), TC_ERR_AUTH);
  }
}

TEST(Channel, AFrameReflectedToItsSenderIsRefused) {
  Relayed r;
  ASSERT_EQ(tc_channel_send(r.client, "mine", 4, 2000), TC_OK);
  const std::string f = r.take_from_client();
  ASSERT_TRUE(send_frame_raw(r.client_side[1], f));  // back where it came from
  const void* data = nullptr;
  size_t n = 0;
  EXPECT_EQ(tc_channel_recv(r.client, 1 << 20, 2000, &data, &n), TC_ERR_AUTH);
}

TEST(Channel, LargeFramesAreCheckedSliceBySliceStraightIntoTheCallersMemory) {
  // 2.3 MiB in parts of uneven sizes, so slices (512 KiB) begin and end
  // inside parts; a frame this long passes the relay while it is written.
  std::vector<std::string> pieces;
  std::mt19937 rng(7);
  size_t total = 0;
  for (size_t n : {size_t(5), size_t(700000), size_t(1), size_t(300000), size_t(1300001), size_t(12)}) {
    std::string p(n, '\0');
    for (char& c : p) c = char(rng());
    pieces.push_back(p);
    total += n;
  }
  std::vector<tc_channel_part> parts;
  for (const std::string& p : pieces) parts.push_back({p.data(), p.size()});
  std::string whole;
  for (const std::string& p : pieces) whole += p;
  // Each side hashing inline or on its helper thread (TC_CHANNEL_HASH_THREAD,
  // decided at a session's first long frame): the same bytes on the wire.
  const char* modes[][2] = {{"0", "0"}, {"1", "1"}, {"1", "0"}, {"0", "1"}};
  for (size_t flip : {size_t(0), size_t(3), size_t(1200000), total + 15})  // 0: none; a byte of slice 1, 3, the tag
  for (const auto& mode : modes) {
    SCOPED_TRACE(std::string("hash thread: sender ") + mode[0] + ", receiver " + mode[1]);
    Relayed r;
    setenv("TC_CHANNEL_HASH_THREAD", mode[0], 1);
    std::thread send([&] { EXPECT_EQ(tc_channel_sendv(r.client, parts.data(), parts.size(), 5000), TC_OK); });
    std::string f = r.take_from_client();
    send.join();
    setenv("TC_CHANNEL_HASH_THREAD", mode[1], 1);
    ASSERT_EQ(f.size(), total + 16);
    if (flip) f[flip] ^= 0x01;
    std::thread deliver([&] { r.deliver_to_server(f); });
    std::vector<char> dst(total + 100, '\x5a');
    size_t n = 0;
    const tc_status st = tc_channel_recv_into(r.server, dst.data(), dst.size(), 5000, &n);
    deliver.join();
    if (!flip) {
      ASSERT_EQ(st, TC_OK) << tc_last_error_detail();
      EXPECT_EQ(n, total);
      EXPECT_EQ(std::string(dst.data(), total), whole);
      EXPECT_EQ(dst[total], '\x5a');  // nothing past the frame
    } else {
      EXPECT_EQ(st, TC_ERR_AUTH) << "byte " << flip;
      EXPECT_EQ(tc_channel_recv_into(r.server, dst.data(), dst.size(), 500, &n), TC_ERR_IO);
    }
  }
  unsetenv("TC_CHANNEL_HASH_THREAD");
}

TEST(Channel, LongFramesBackToBackWithTheHashThreadKeepTheirBytesAndOrder) {
  // Lengths about a helper's 128 KiB slice and the 512 KiB one, one session
  // (its helpers sleep and wake between frames), both ends on the helper.
  setenv("TC_CHANNEL_HASH_THREAD", "1", 1);
  Relayed r;
  std::mt19937 rng(11);
  for (size_t n : {size_t(131072), size_t(131073), size_t(262149), size_t(524288), size_t(524289), size_t(1048576 + 7),
                   size_t(200000)}) {
    std::string payload(n, '\0');
    for (char& c : payload) c = char(rng());
    std::thread send([&] { EXPECT_EQ(tc_channel_send(r.client, payload.data(), payload.size(), 5000), TC_OK); });
    std::string f = r.take_from_client();
    send.join();
    ASSERT_EQ(f.size(), n + 16);
    std::thread deliver([&] { r.deliver_to_server(f); });
    std::vector<char> dst(n);
    size_t got = 0;
    EXPECT_EQ(tc_channel_recv_into(r.server, dst.data(), dst.size(), 5000, &got), TC_OK) << n << ": "
                                                                                        << tc_last_error_detail();
    deliver.join();
    EXPECT_EQ(got, n);
    EXPECT_TRUE(std::memcmp(dst.data(), payload.data(), n) == 0) << n;
  }
  unsetenv("TC_CHANNEL_HASH_THREAD");
}

TEST(Channel, ReceivingIntoMemoryTooShortForTheFrameWritesNothing) {
  Relayed r;
  const std::string payload(4096, 'p');
  ASSERT_EQ(tc_channel_send(r.client, payload.data(), payload.size(), 2000), TC_OK);
  r.deliver_to_server(r.take_from_client());
  std::vector<char> dst(4095, '\x5a');
  size_t n = 0;
  EXPECT_EQ(tc_channel_recv_into(r.server, nullptr, dst.size(), 2000, &n), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_channel_recv_into(r.server, dst.data(), dst.size(), 2000, nullptr), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_channel_recv_into(r.server, dst.data(), dst.size(), 0, &n), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_channel_recv_into(r.server, dst.data(), dst.size(), 2000, &n), TC_ERR_CORRUPT);
  EXPECT_NE(std::string(tc_last_error_detail()).find("4096-byte frame"), std::string::npos) << tc_last_error_detail();
  EXPECT_EQ(std::count(dst.begin(), dst.end(), '\x5a'), ptrdiff_t(dst.size()));
}

TEST(Channel, AnIdleTimeoutLeavesTheChannelUsable) {
  Relayed r;
  std::string got;
  const void* data = nullptr;
  size_t n = 0;
  EXPECT_EQ(tc_channel_recv(r.server, 1 << 20, 30, &data, &n), TC_ERR_TIMEOUT);
  ASSERT_EQ(tc_channel_send(r.client, "late", 4, 2000), TC_OK);
  r.deliver_to_server(r.take_from_client());
  ASSERT_EQ(r.server_recv(&got), TC_OK) << tc_last_error_detail();
  EXPECT_EQ(got, "late");
}

TEST(Channel, ASpinningChannelStillTimesOutAndReceives) {
  Relayed r;
  EXPECT_EQ(tc_channel_set_spin(r.server, -1), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_channel_set_spin(r.server, 1000001), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_channel_set_spin(nullptr, 10), TC_ERR_INVALID_ARG);
  ASSERT_EQ(tc_channel_set_spin(r.server, 1000000), TC_OK);  // longer than the deadline below
  const void* data = nullptr;
  size_t n = 0;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(tc_channel_recv(r.server, 1 << 20, 30, &data, &n), TC_ERR_TIMEOUT);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(waited, 0.025);
  EXPECT_LT(waited, 0.5);  // the deadline bounds the spin
  ASSERT_EQ(tc_channel_send(r.client, "spun", 4, 2000), TC_OK);
  r.deliver_to_server(r.take_from_client());
  std::string got;
  ASSERT_EQ(r.server_recv(&got), TC_OK) << tc_last_error_detail();
  EXPECT_EQ(got, "spun");
}

TEST(Channel, APeerOfTheOldHandshakeVersionIsRefusedByName) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  tc_auth_key k;
  tc_auth_config a = channel_auth(&k);
  tc_channel server = nullptr;
  tc_status st = TC_OK;
  std::string detail;
  std::thread open([&] {
    st = tc_channel_open(sv[0], 1, &a, nullptr, 5000, &server);
    detail = tc_last_error_detail();
  });
  // A version-01 hello: magic, mode (auth), purpose (remote), rank, nonce.
  std::string hello = "TCAUTH01";
  hello.push_back(char(1));
  hello.push_back(char(2));
  put_u64(&hello, 0xFFFFFFFFu);
  hello.append(32, '\7');
  ASSERT_TRUE(send_frame_raw(sv[1], hello));
  std::string reply;
  ASSERT_TRUE(recv_frame_raw(sv[1], &reply));
  EXPECT_EQ(reply, "R");  // refused before any challenge
  open.join();
  EXPECT_EQ(st, TC_ERR_AUTH);
  EXPECT_EQ(server, nullptr);
  EXPECT_NE(detail.find("handshake version '01'"), std::string::npos) << detail;
  EXPECT_NE(detail.find("'02'"), std::string::npos) << detail;
  ::close(sv[0]);
  ::close(sv[1]);
}
