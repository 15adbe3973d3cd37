// The rendezvous key-value store. Rank 0 of a "gloo+tcp://host:port" group
// hosts a StoreServer; every rank talks to it through a Store (rank 0 in
// process, the others over an authenticated or plain TCP connection). gloo
// and NCCL exchange their connection details through it; nothing else flows
// over it. A FileStore serves "file:///dir" where gloo's own is not built.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dist/acceptor.h"
#include "dist/auth.h"
#include "dist/net.h"

namespace tc {
namespace dist {

// Bounds of the store: one request or value, and everything one server
// holds (keys and values together; a set past it is refused with
// TC_ERR_ALLOC and the server keeps running).
constexpr size_t kMaxStoreMessage = size_t(64) << 20;
constexpr size_t kMaxStoreBytes = size_t(256) << 20;
// How long a connection to the store may take to finish its handshake, or a
// frame once it has started (the group's timeout, when that is shorter).
constexpr int64_t kStoreHandshakeMs = 10000;

class Store {
 public:
  virtual ~Store() = default;
  virtual tc_status set(const std::string& key, const std::string& value, std::string* why) = 0;
  // Waits until `key` exists or the deadline passes (TC_ERR_TIMEOUT).
  virtual tc_status get(const std::string& key, Deadline deadline, std::string* value, std::string* why) = 0;
};

class StoreServer {
 public:
  // Listens on host:port. `ring` null: plain connections. rank_identities,
  // when not empty, binds each rank to the identity it must prove.
  static tc_status start(const std::string& host, int port, KeyringRef ring, int world,
                         std::vector<std::string> rank_identities, int64_t handshake_ms,
                         std::unique_ptr<StoreServer>* out, std::string* why);
  ~StoreServer();

  int port() const { return port_; }
  size_t live_connections() const { return acceptor_.live(); }
  uint64_t auth_failures() const { return auth_failures_.load(); }
  std::string last_refusal() const;

  // false (with *why) when the value would take the store past kMaxStoreBytes.
  bool put(const std::string& key, const std::string& value, std::string* why);
  bool lookup(const std::string& key, std::string* value) const;
  size_t held_bytes() const;

 private:
  StoreServer() = default;
  void serve(Socket* s);

  Socket listener_;
  int port_ = 0;
  KeyringRef ring_;
  int world_ = 0;
  std::vector<std::string> rank_identities_;
  int64_t handshake_ms_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> auth_failures_{0};
  mutable std::mutex mu_;
  std::map<std::string, std::string> data_;
  size_t held_bytes_ = 0;  // keys + values in data_
  std::string last_refusal_;
  Acceptor acceptor_;  // last: stopped first, while the state above is alive
};

// Rank 0's view of its own server.
class LocalStore final : public Store {
 public:
  explicit LocalStore(StoreServer* server) : server_(server) {}
  tc_status set(const std::string& key, const std::string& value, std::string* why) override;
  tc_status get(const std::string& key, Deadline deadline, std::string* value, std::string* why) override;

 private:
  StoreServer* server_;
};

class TcpStoreClient final : public Store {
 public:
  // Connects and runs the handshake (claiming `rank`) before anything else.
  static tc_status connect(const std::string& host, int port, const Keyring* ring, int rank, Deadline deadline,
                           std::unique_ptr<TcpStoreClient>* out, std::string* why);
  tc_status set(const std::string& key, const std::string& value, std::string* why) override;
  tc_status get(const std::string& key, Deadline deadline, std::string* value, std::string* why) override;

 private:
  std::mutex mu_;
  Socket sock_;
  Session session_;  // the frames' MAC state, under mu_
};

// Keys are files in a directory every rank sees (written to a fresh
// temporary name, created exclusively with O_NOFOLLOW and mode 0600, then
// renamed, so a reader never sees half a value and a planted link is never
// followed; read back without following links).
class FileStore final : public Store {
 public:
  explicit FileStore(std::string dir) : dir_(std::move(dir)) {}
  tc_status set(const std::string& key, const std::string& value, std::string* why) override;
  tc_status get(const std::string& key, Deadline deadline, std::string* value, std::string* why) override;

 private:
  std::string path(const std::string& key) const;
  std::string dir_;
};

}  // namespace dist
}  // namespace tc
