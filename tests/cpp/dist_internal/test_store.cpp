// The rendezvous store's internals, compiled from the sources (the library
// does not export them): the file store NCCL rendezvous uses never follows
// a planted link and leaves no temporary file behind; the TCP store bounds
// each message and everything it holds, and a refusal leaves it serving;
// identity bytes a peer sends reach error text escaped; keys are namespaced
// by the setter's rank; the server and the client count what they refuse;
// a closed listener refuses connections while the store serves on.
// Loopback only.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "dist/auth.h"
#include "dist/net.h"
#include "dist/store.h"

using namespace tc::dist;
namespace fs = std::filesystem;

namespace {

std::string read_text(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

class FileStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = (fs::temp_directory_path() / ("tc-filestore-test-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name()))
              .string();
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }
  std::string dir;
};

TEST_F(FileStoreTest, SetAndGetRoundTrip) {
  FileStore s(dir);
  std::string why, v;
  std::string value("id\0with\xff" "bytes", 13);
  ASSERT_EQ(s.set("tc/nccl_unique_id", value, &why), TC_OK) << why;
  ASSERT_EQ(s.get("tc/nccl_unique_id", deadline_after_ms(1000), &v, &why), TC_OK) << why;
  EXPECT_EQ(v, value);
  // Written 0600, and only the key's file is left (no temporary names).
  std::vector<std::string> names;
  for (auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  ASSERT_EQ(names.size(), 1u);
  struct stat st;
  ASSERT_EQ(::lstat((dir + "/" + names[0]).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // A missing key times out, naming the key.
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(s.get("absent", deadline_after_ms(100), &v, &why), TC_ERR_TIMEOUT);
  EXPECT_NE(why.find("absent"), std::string::npos) << why;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

TEST_F(FileStoreTest, PlantedLinksAreNeitherFollowedNorRead) {
  FileStore s(dir);
  std::string why, v;
  std::string victim = dir + "-victim";
  { std::ofstream(victim) << "victim"; }
  // Links at the key's name and at the old predictable temporary name.
  const std::string key_path = dir + "/tc_nccl_unique_id";
  ASSERT_EQ(::symlink(victim.c_str(), (key_path + ".tmp." + std::to_string(::getpid())).c_str()), 0);
  ASSERT_EQ(::symlink(victim.c_str(), key_path.c_str()), 0);
  // A link at the key's name is not read as its value.
  EXPECT_EQ(s.get("tc/nccl_unique_id", deadline_after_ms(100), &v, &why), TC_ERR_IO);
  EXPECT_NE(why.find(key_path), std::string::npos) << why;
  ASSERT_EQ(s.set("tc/nccl_unique_id", "fresh", &why), TC_OK) << why;
  EXPECT_EQ(read_text(victim), "victim");  // nothing written through either link
  EXPECT_FALSE(fs::is_symlink(key_path));  // the link at the key's name was replaced, not followed
  ASSERT_EQ(s.get("tc/nccl_unique_id", deadline_after_ms(1000), &v, &why), TC_OK) << why;
  EXPECT_EQ(v, "fresh");
  fs::remove(victim);
}

TEST_F(FileStoreTest, OversizedValuesAreRefused) {
  FileStore s(dir);
  std::string why, v;
  EXPECT_EQ(s.set("big", std::string(kMaxStoreMessage + 1, 'x'), &why), TC_ERR_INVALID_ARG);
  EXPECT_NE(why.find("larger than"), std::string::npos) << why;
  EXPECT_TRUE(fs::is_empty(dir));
  // A file too large to be a value is refused, not read.
  { std::ofstream f(dir + "/huge"); }
  fs::resize_file(dir + "/huge", kMaxStoreMessage + 1);
  EXPECT_EQ(s.get("huge", deadline_after_ms(100), &v, &why), TC_ERR_IO);
  EXPECT_NE(why.find("at most"), std::string::npos) << why;
}

// ---- the TCP store ----------------------------------------------------------

struct PlainStore {
  RefusalsRef server_refusals = std::make_shared<Refusals>(), client_refusals = std::make_shared<Refusals>();
  std::unique_ptr<StoreServer> server;
  std::unique_ptr<TcpStoreClient> client;
  explicit PlainStore(StoreLimits limits = StoreLimits(), int world = 2) {
    std::string why;
    EXPECT_EQ(StoreServer::start("127.0.0.1", 0, nullptr, world, {}, 5000, &server, &why, server_refusals, limits),
              TC_OK)
        << why;
    EXPECT_EQ(TcpStoreClient::connect("127.0.0.1", server->port(), nullptr, 1, deadline_after_ms(5000), &client, &why,
                                      client_refusals),
              TC_OK)
        << why;
  }
};

TEST(TcpStore, TotalBytesAreBoundedAndARefusalLeavesTheStoreServing) {
  StoreLimits limits;
  limits.max_message = 64 << 10;
  limits.max_bytes = 1 << 20;
  PlainStore p(limits);
  ASSERT_TRUE(p.client);
  std::string why, v;
  const std::string chunk(limits.max_message - 64, 'v');
  size_t stored = 0;
  tc_status st = TC_OK;
  for (int i = 0; i < 64 && st == TC_OK; ++i) {
    st = p.client->set("1/k" + std::to_string(i), chunk, &why);
    if (st == TC_OK) stored++;
  }
  EXPECT_EQ(st, TC_ERR_ALLOC) << why;
  EXPECT_NE(why.find("bound"), std::string::npos) << why;
  EXPECT_GE(stored, limits.max_bytes / chunk.size() - 1);
  EXPECT_LE(stored, limits.max_bytes / chunk.size());
  EXPECT_LE(p.server->held_bytes(), limits.max_bytes);
  // Counted on both sides, the detail on both.
  EXPECT_EQ(p.server->refusals().total(), 1u);
  EXPECT_EQ(p.client_refusals->total(), 1u);
  EXPECT_NE(p.client_refusals->last().find("bound"), std::string::npos) << p.client_refusals->last();
  // The connection and the store still work: reads, a small write, and
  // replacing a value by a smaller one, which frees room.
  ASSERT_EQ(p.client->get("1/k0", deadline_after_ms(5000), &v, &why), TC_OK) << why;
  EXPECT_EQ(v.size(), chunk.size());
  ASSERT_EQ(p.client->set("1/k0", "small", &why), TC_OK) << why;
  ASSERT_EQ(p.client->set("1/again", chunk, &why), TC_OK) << why;
  // Rank 0's own view is held to the same bound.
  LocalStore local(p.server.get());
  EXPECT_EQ(local.set("local", chunk, &why), TC_ERR_ALLOC);
  EXPECT_EQ(local.set("local", "x", &why), TC_OK) << why;
}

TEST(TcpStore, OversizedRequestsAreRefusedBeforeSending) {
  PlainStore p;
  ASSERT_TRUE(p.client);
  std::string why, v;
  EXPECT_EQ(p.client->set("1/big", std::string(kMaxStoreMessage, 'x'), &why), TC_ERR_INVALID_ARG);
  EXPECT_NE(why.find("larger than"), std::string::npos) << why;
  EXPECT_EQ(p.client->set(std::string(kMaxStoreKey + 1, '1'), "1", &why), TC_ERR_INVALID_ARG);
  EXPECT_NE(why.find("key has"), std::string::npos) << why;
  ASSERT_EQ(p.client->set("1/ok", "1", &why), TC_OK) << why;  // nothing was sent: the connection is in step
  ASSERT_EQ(p.client->get("1/ok", deadline_after_ms(5000), &v, &why), TC_OK) << why;
  EXPECT_EQ(v, "1");
}

// A raw peer speaking the plain hello, for frames a real client never sends.
Socket raw_plain_client(int port, int32_t rank) {
  Socket s;
  std::string why;
  EXPECT_EQ(connect_tcp("127.0.0.1", port, deadline_after_ms(5000), &s, &why), TC_OK) << why;
  PeerInfo server;
  EXPECT_EQ(client_handshake(s, nullptr, Purpose::Store, rank, "", deadline_after_ms(5000), &server, &why), TC_OK)
      << why;
  return s;
}

TEST(TcpStore, AnOversizedFrameIsRefusedWithoutReadingIt) {
  PlainStore p;
  Socket s = raw_plain_client(p.server->port(), 1);
  // A length of 4 GiB - 1 and no payload: the server drops the connection at
  // once instead of waiting for (or allocating) the announced bytes.
  const unsigned char len[4] = {0xff, 0xff, 0xff, 0xff};
  ASSERT_EQ(send_all(s, len, 4, deadline_after_ms(1000)), TC_OK);
  auto t0 = std::chrono::steady_clock::now();
  std::string reply;
  EXPECT_EQ(recv_frame(s, &reply, 64, deadline_after_ms(4000)), TC_ERR_IO);  // closed, not timed out
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
}

TEST(Auth, PeerIdentityBytesAreEscapedInErrors) {
  EXPECT_EQ(printable("plain/id-1"), "plain/id-1");
  EXPECT_EQ(printable(std::string("a\nb\x1b[2J\0'\\\x7f\xff", 12)), "a\\x0ab\\x1b[2J\\x00\\x27\\x5c\\x7f\\xff");
  // A client that claims a forged identity (terminal escapes, a newline)
  // and fails to prove it: the store's refusal names it escaped.
  Keyring ring;
  ring.local_identity = "rank0";
  ring.active_key_id = 1;
  ring.keys.push_back(Key{"rank0", 1, std::string(32, 's')});
  ring.keys.push_back(Key{"rank1", 1, std::string(32, 't')});
  KeyringRef ref = std::make_shared<const Keyring>(ring);
  std::unique_ptr<StoreServer> server;
  std::string why;
  ASSERT_EQ(StoreServer::start("127.0.0.1", 0, ref, 2, {}, 5000, &server, &why), TC_OK) << why;
  Keyring forged;
  const std::string evil = "evil\n\x1b[31mFAKE LOG LINE";
  forged.local_identity = evil;
  forged.active_key_id = 7;
  forged.keys.push_back(Key{evil, 7, std::string(32, 'x')});
  Socket s;
  ASSERT_EQ(connect_tcp("127.0.0.1", server->port(), deadline_after_ms(5000), &s, &why), TC_OK) << why;
  PeerInfo info;
  EXPECT_EQ(client_handshake(s, &forged, Purpose::Store, 1, "", deadline_after_ms(5000), &info, &why), TC_ERR_AUTH);
  for (int i = 0; i < 500 && server->auth_failures() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::string refusal = server->last_refusal();
  EXPECT_NE(refusal.find("evil\\x0a\\x1b[31mFAKE LOG LINE"), std::string::npos) << refusal;
  EXPECT_EQ(refusal.find('\n'), std::string::npos) << refusal;
  EXPECT_EQ(refusal.find('\x1b'), std::string::npos) << refusal;
}

// After an authenticated handshake every frame carries a MAC over its
// direction and sequence number: a frame altered on the way, replayed, or a
// server reply reflected back is refused, the connection ends and the
// refusal is counted; untouched frames work.
struct AuthedStore {
  KeyringRef ring0, ring1;
  std::unique_ptr<StoreServer> server;
  explicit AuthedStore(int64_t handshake_ms = 5000, StoreLimits limits = StoreLimits()) {
    Keyring r;
    r.local_identity = "rank0";
    r.active_key_id = 1;
    r.keys.push_back(Key{"rank0", 1, std::string(32, 's')});
    r.keys.push_back(Key{"rank1", 1, std::string(32, 't')});
    ring0 = std::make_shared<const Keyring>(r);
    r.local_identity = "rank1";
    ring1 = std::make_shared<const Keyring>(r);
    std::string why;
    EXPECT_EQ(StoreServer::start("127.0.0.1", 0, ring0, 2, {}, handshake_ms, &server, &why, nullptr, limits), TC_OK)
        << why;
  }
  // A raw client after its handshake, with the session it derived.
  Socket connect(Session* session) {
    Socket s;
    std::string why;
    EXPECT_EQ(connect_tcp("127.0.0.1", server->port(), deadline_after_ms(5000), &s, &why), TC_OK) << why;
    PeerInfo info;
    EXPECT_EQ(client_handshake(s, ring1.get(), Purpose::Store, 1, "", deadline_after_ms(5000), &info, &why, session),
              TC_OK)
        << why;
    EXPECT_EQ(session->key.size(), 32u);
    return s;
  }
  void wait_refusals(uint64_t n) {
    for (int i = 0; i < 500 && server->auth_failures() < n; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
};

// The bytes `session` would send for `payload` (payload and MAC), through a socket pair.
std::string sealed(Session session, const std::string& payload) {
  int sv[2];
  EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  Socket a(sv[0]), b(sv[1]);
  EXPECT_EQ(send_frame(a, session, payload, deadline_after_ms(1000)), TC_OK);
  std::string raw;
  EXPECT_EQ(recv_frame(b, &raw, 1 << 20, deadline_after_ms(1000)), TC_OK);
  return raw;
}

std::string set_request(const std::string& key, const std::string& value) {
  std::string m(1, 'S');
  const uint32_t n = uint32_t(key.size());
  m.append(reinterpret_cast<const char*>(&n), 4);
  return m + key + value;
}

TEST(Auth, FramesAfterTheHandshakeCarryAMac) {
  AuthedStore st;
  Session session;
  Socket s = st.connect(&session);
  std::string reply;
  // A well-formed request, then its reply, verify.
  ASSERT_EQ(send_frame(s, session, set_request("1/k", "v"), deadline_after_ms(5000)), TC_OK);
  ASSERT_EQ(recv_frame(s, session, &reply, 256, deadline_after_ms(5000)), TC_OK);
  EXPECT_EQ(reply, "K");
  std::string v, why;
  LocalStore local(st.server.get());
  ASSERT_EQ(local.get("1/k", deadline_after_ms(1000), &v, &why), TC_OK) << why;
  EXPECT_EQ(v, "v");
  EXPECT_EQ(st.server->auth_failures(), 0u);
  // The next request with one payload bit flipped: refused, the connection ends.
  std::string raw = sealed(session, set_request("1/k", "forged"));
  raw[6] ^= 1;  // a payload bit (the frame is the payload, then its 16-byte tag)
  ASSERT_EQ(send_frame(s, raw, deadline_after_ms(5000)), TC_OK);
  // The server says why (so a client can start afresh), then hangs up.
  ASSERT_EQ(recv_frame(s, session, &reply, 256, deadline_after_ms(5000)), TC_OK);
  EXPECT_EQ(reply.substr(0, 2), "EI");
  EXPECT_NE(recv_frame(s, &reply, 256, deadline_after_ms(5000)), TC_OK);
  st.wait_refusals(1);
  EXPECT_EQ(st.server->auth_failures(), 1u);
  ASSERT_EQ(local.get("1/k", deadline_after_ms(1000), &v, &why), TC_OK) << why;
  EXPECT_EQ(v, "v");
  EXPECT_NE(st.server->last_refusal().find("integrity"), std::string::npos) << st.server->last_refusal();
}

TEST(Auth, AReplayedOrReflectedFrameIsRefused) {
  AuthedStore st;
  Session session;
  Socket s = st.connect(&session);
  // Frame 0 as sent, then the very same bytes again (a replay).
  const std::string first = sealed(session, set_request("1/a", "1"));
  session.sent++;
  ASSERT_EQ(send_frame(s, first, deadline_after_ms(5000)), TC_OK);
  std::string reply;
  ASSERT_EQ(recv_frame(s, session, &reply, 256, deadline_after_ms(5000)), TC_OK);
  ASSERT_EQ(send_frame(s, first, deadline_after_ms(5000)), TC_OK);
  std::string said;  // the server's "altered" notice, then the end
  ASSERT_EQ(recv_frame(s, session, &said, 256, deadline_after_ms(5000)), TC_OK);
  EXPECT_EQ(said.substr(0, 2), "EI");
  EXPECT_NE(recv_frame(s, &reply, 256, deadline_after_ms(5000)), TC_OK);
  st.wait_refusals(1);
  EXPECT_EQ(st.server->auth_failures(), 1u);
  // On a new connection, a frame sealed as if from the server (a reflection).
  Session s2;
  Socket t = st.connect(&s2);
  Session as_server = s2;
  as_server.client = false;
  ASSERT_EQ(send_frame(t, sealed(as_server, set_request("1/b", "2")), deadline_after_ms(5000)), TC_OK);
  ASSERT_EQ(recv_frame(t, s2, &said, 256, deadline_after_ms(5000)), TC_OK);
  EXPECT_EQ(said.substr(0, 2), "EI");
  EXPECT_NE(recv_frame(t, &reply, 256, deadline_after_ms(5000)), TC_OK);
  st.wait_refusals(2);
  EXPECT_EQ(st.server->auth_failures(), 2u);
}

TEST(Auth, AnAuthenticatedClientWorksEndToEnd) {
  AuthedStore st;
  std::string why;
  std::unique_ptr<TcpStoreClient> c;
  ASSERT_EQ(TcpStoreClient::connect("127.0.0.1", st.server->port(), st.ring1, 1, deadline_after_ms(5000), &c, &why),
            TC_OK)
      << why;
  ASSERT_EQ(c->set("1", "1", &why), TC_OK) << why;
  std::string v;
  ASSERT_EQ(c->get("1", deadline_after_ms(5000), &v, &why), TC_OK) << why;
  EXPECT_EQ(v, "1");
}

size_t open_descriptors() {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) n += (void(e), 1);
  return n;
}

TEST(TcpStore, AFloodOfIdleConnectionsIsBoundedAndTheGroupStillForms) {
  // A group of 2 (at most 2 * 2 + 8 = 12 connections served at once) whose
  // handshakes must finish within 300 ms; 200 connections that never say a word.
  AuthedStore st(300);
  StoreServer* server = st.server.get();
  std::string why;
  const size_t before = open_descriptors();
  std::vector<Socket> idle;
  for (int i = 0; i < 200; ++i) {
    Socket s;
    ASSERT_EQ(connect_tcp("127.0.0.1", server->port(), deadline_after_ms(5000), &s, &why), TC_OK) << why;
    idle.push_back(std::move(s));
  }
  size_t most = 0;
  for (int i = 0; i < 20; ++i) {
    most = std::max(most, server->live_connections());
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_LE(most, 12u);
  // Handshakes past their deadline are refusals too, counted as such.
  for (int i = 0; i < 200 && server->refusals().total() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_GT(server->refusals().total(), 0u);
  EXPECT_EQ(server->auth_failures(), 0u);
  EXPECT_NE(server->last_refusal().find("handshake"), std::string::npos) << server->last_refusal();
  // The rightful rank gets through while the flood is still connected: the
  // silent connections time out of their slots.
  std::unique_ptr<TcpStoreClient> c;
  ASSERT_EQ(TcpStoreClient::connect("127.0.0.1", server->port(), st.ring1, 1, deadline_after_ms(20000), &c, &why),
            TC_OK)
      << why;
  ASSERT_EQ(c->set("1", "10.0.0.1:1234", &why), TC_OK) << why;
  std::string v;
  ASSERT_EQ(c->get("1", deadline_after_ms(5000), &v, &why), TC_OK) << why;
  EXPECT_EQ(v, "10.0.0.1:1234");
  // Once the flood is gone, its descriptors and threads are too.
  idle.clear();
  c.reset();
  for (int i = 0; i < 500 && server->live_connections() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(server->live_connections(), 0u);
  Socket poke;  // one more connection makes the acceptor reap the finished ones
  ASSERT_EQ(connect_tcp("127.0.0.1", server->port(), deadline_after_ms(5000), &poke, &why), TC_OK) << why;
  poke.close();
  for (int i = 0; i < 100 && open_descriptors() > before + 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_LE(open_descriptors(), before + 2);
}

TEST(Net, NameResolutionStopsAtTheDeadline) {
  // A deadline already past: the lookup is abandoned (its thread frees the
  // result when it ends) and the caller gets TC_ERR_TIMEOUT at once.
  Socket s;
  std::string why;
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(connect_tcp("unresolvable-name.invalid", 1, deadline_after_ms(0), &s, &why), TC_ERR_TIMEOUT);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  EXPECT_NE(why.find("before the deadline"), std::string::npos) << why;
  // With time to answer, a name that does not exist is refused as such.
  EXPECT_EQ(connect_tcp("unresolvable-name.invalid", 1, deadline_after_ms(20000), &s, &why), TC_ERR_INVALID_ARG);
  EXPECT_NE(why.find("cannot resolve"), std::string::npos) << why;
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let the abandoned lookup finish
}

TEST(TcpStore, KeysAreNamespacedByTheSettersRank) {
  EXPECT_EQ(key_owner("0", 4), 0);
  EXPECT_EQ(key_owner("1", 4), 1);
  EXPECT_EQ(key_owner("3/addr", 4), 3);
  EXPECT_EQ(key_owner("4", 4), 0);   // not a rank of the group
  EXPECT_EQ(key_owner("01", 4), 0);  // not how gloo writes rank 1
  EXPECT_EQ(key_owner("1x", 4), 0);
  EXPECT_EQ(key_owner("/1", 4), 0);
  EXPECT_EQ(key_owner("99999999999", 4), 0);
  EXPECT_EQ(key_owner("tc/nccl_unique_id", 4), 0);
  EXPECT_EQ(key_owner("rank_2", 4), 2);  // gloo's host-name key
  EXPECT_EQ(key_owner("rank_2/x", 4), 2);
  EXPECT_EQ(key_owner("rank_", 4), 0);
  EXPECT_EQ(key_owner("rank_02", 4), 0);
  EXPECT_EQ(key_owner("rank_x", 4), 0);
  PlainStore p(StoreLimits(), 3);
  ASSERT_TRUE(p.client);
  std::string why, v;
  LocalStore local(p.server.get());
  ASSERT_EQ(local.set("tc/nccl_unique_id", "rank 0's id", &why), TC_OK) << why;
  ASSERT_EQ(local.set("0", "rank 0's address", &why), TC_OK) << why;
  ASSERT_EQ(p.client->set("1", "rank 1's address", &why), TC_OK) << why;
  ASSERT_EQ(p.client->set("1/more", "x", &why), TC_OK) << why;
  ASSERT_EQ(p.client->set("rank_1", "rank 1's host", &why), TC_OK) << why;
  // Rank 1 cannot write rank 0's keys (the NCCL id among them) nor rank 2's:
  // refused with TC_ERR_AUTH and a detail naming the namespace, counted on
  // both sides, and nothing changes.
  uint64_t n = 0;
  for (const char* key : {"tc/nccl_unique_id", "0", "rank_0", "2", "2/x", "rank_2", "anything"}) {
    EXPECT_EQ(p.client->set(key, "forged", &why), TC_ERR_AUTH) << key;
    EXPECT_NE(why.find("namespace"), std::string::npos) << why;
    ++n;
    EXPECT_EQ(p.server->refusals().total(), n);
    EXPECT_EQ(p.client_refusals->total(), n);
  }
  EXPECT_EQ(p.server->auth_failures(), 0u);  // an authorization refusal, not a failed proof
  ASSERT_TRUE(p.server->lookup("tc/nccl_unique_id", &v));
  EXPECT_EQ(v, "rank 0's id");
  ASSERT_TRUE(p.server->lookup("0", &v));
  EXPECT_EQ(v, "rank 0's address");
  EXPECT_FALSE(p.server->lookup("2", &v));
  // Nor can rank 0 write rank 1's; and the refusals left the connection in step.
  EXPECT_EQ(local.set("1", "forged", &why), TC_ERR_AUTH);
  ASSERT_EQ(p.client->get("1", deadline_after_ms(5000), &v, &why), TC_OK) << why;
  EXPECT_EQ(v, "rank 1's address");
}

std::string frame_length(size_t n) {
  const unsigned char len[4] = {uint8_t(n), uint8_t(n >> 8), uint8_t(n >> 16), uint8_t(n >> 24)};
  return std::string(reinterpret_cast<const char*>(len), 4);
}

TEST(TcpStore, ASetPastTheBoundIsRefusedOnItsLengthUnread) {
  StoreLimits limits;
  limits.max_message = 16 << 20;
  limits.max_bytes = 1 << 20;
  PlainStore p(limits);
  Socket s = raw_plain_client(p.server->port(), 1);
  // Only the frame's length and the request's head: the refusal comes
  // before the 8 MiB value is sent, so the server neither read nor
  // allocated it.
  const std::string head = set_request("1/big", "");
  const size_t value_bytes = 8 << 20;
  const std::string start = frame_length(head.size() + value_bytes) + head;
  ASSERT_EQ(send_all(s, start.data(), start.size(), deadline_after_ms(1000)), TC_OK);
  std::string reply;
  ASSERT_EQ(recv_frame(s, &reply, 1024, deadline_after_ms(3000)), TC_OK);
  EXPECT_EQ(reply.substr(0, 2), "EB");
  EXPECT_NE(reply.find("unread"), std::string::npos) << reply;
  EXPECT_EQ(p.server->held_bytes(), 0u);
  EXPECT_EQ(p.server->refusals().total(), 1u);
  // The rest of the frame is read through and dropped: the connection is
  // still in step.
  const std::string rest(value_bytes, 'v');
  ASSERT_EQ(send_all(s, rest.data(), rest.size(), deadline_after_ms(5000)), TC_OK);
  ASSERT_EQ(send_frame(s, set_request("1/small", "ok"), deadline_after_ms(1000)), TC_OK);
  ASSERT_EQ(recv_frame(s, &reply, 1024, deadline_after_ms(3000)), TC_OK);
  EXPECT_EQ(reply, "K");
  EXPECT_EQ(p.server->held_bytes(), std::string("1/smallok").size());
}

TEST(Auth, ASetPastTheBoundIsDroppedAndItsMacStillChecked) {
  StoreLimits limits;
  limits.max_bytes = 1 << 20;
  AuthedStore st(5000, limits);
  auto refusals = std::make_shared<Refusals>();
  std::unique_ptr<TcpStoreClient> c;
  std::string why, v;
  ASSERT_EQ(TcpStoreClient::connect("127.0.0.1", st.server->port(), st.ring1, 1, deadline_after_ms(5000), &c, &why,
                                    refusals),
            TC_OK)
      << why;
  EXPECT_EQ(c->set("1/big", std::string(2 << 20, 'v'), &why), TC_ERR_ALLOC);
  EXPECT_NE(why.find("bound"), std::string::npos) << why;
  EXPECT_EQ(refusals->total(), 1u);
  EXPECT_EQ(st.server->refusals().total(), 1u);
  EXPECT_EQ(st.server->auth_failures(), 0u);  // the dropped bytes' MAC held
  ASSERT_EQ(c->set("1", "addr", &why), TC_OK) << why;
  ASSERT_EQ(c->get("1", deadline_after_ms(5000), &v, &why), TC_OK) << why;
  EXPECT_EQ(v, "addr");
}

TEST(TcpStore, AClientCountsItsOwnTimeouts) {
  // A server that finishes the plain handshake, then never answers.
  Socket listener;
  int port = 0;
  std::string why, v;
  ASSERT_EQ(listen_tcp("127.0.0.1", 0, &listener, &port, &why), TC_OK) << why;
  std::thread silent([&listener] {
    Socket c;
    if (accept_tcp(listener, 5000, &c) != TC_OK) return;
    PeerInfo info;
    std::string w;
    server_handshake(c, nullptr, Purpose::Store, nullptr, deadline_after_ms(5000), &info, &w);
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  });
  auto refusals = std::make_shared<Refusals>();
  std::unique_ptr<TcpStoreClient> c;
  ASSERT_EQ(TcpStoreClient::connect("127.0.0.1", port, nullptr, 1, deadline_after_ms(5000), &c, &why, refusals), TC_OK)
      << why;
  EXPECT_EQ(c->get("0", deadline_after_ms(300), &v, &why), TC_ERR_TIMEOUT);
  EXPECT_EQ(refusals->total(), 1u);
  EXPECT_EQ(refusals->auth(), 0u);
  EXPECT_NE(refusals->last().find("deadline"), std::string::npos) << refusals->last();
  silent.join();
}

TEST(TcpStore, AClosedListenerRefusesNewConnectionsAndServesOldOnes) {
  PlainStore p;
  ASSERT_TRUE(p.client);
  p.server->close_listener();
  Socket s;
  std::string why, v;
  EXPECT_EQ(connect_tcp("127.0.0.1", p.server->port(), deadline_after_ms(300), &s, &why), TC_ERR_TIMEOUT);
  EXPECT_NE(why.find("refused"), std::string::npos) << why;
  ASSERT_EQ(p.client->set("1", "addr", &why), TC_OK) << why;
  ASSERT_EQ(p.client->get("1", deadline_after_ms(5000), &v, &why), TC_OK) << why;
  EXPECT_EQ(v, "addr");
}

}  // namespace
