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
#include "dist/refusals.h"

namespace tc {
namespace dist {

// Bounds of the store: one request or value, one key, and everything one
// server holds (keys and values together; a set past it is refused with
// TC_ERR_ALLOC and the server keeps running).
constexpr size_t kMaxStoreMessage = size_t(64) << 20;
constexpr size_t kMaxStoreBytes = size_t(256) << 20;
constexpr size_t kMaxStoreKey = 1024;
// How long a connection to the store may take to finish its handshake, or a
// frame once it has started (the group's timeout, when that is shorter).
constexpr int64_t kStoreHandshakeMs = 10000;

struct StoreLimits {
  size_t max_message = kMaxStoreMessage;
  size_t max_bytes = kMaxStoreBytes;
};

// Namespaces: rank r (r > 0) may set only the keys "r", "rank_r" and
// those below them ("r/...", "rank_r/..."; r in decimal, as gloo names its
// keys: "r" for a rank's addresses, "rank_r" for its host name); every
// other key, the NCCL unique id among them, is rank 0's. Any rank may read
// any key. The owner of `key` in a group of `world`:
int key_owner(const std::string& key, int world);

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
  // `refusals`: where the server counts what it refuses (null: its own).
  static tc_status start(const std::string& host, int port, KeyringRef ring, int world,
                         std::vector<std::string> rank_identities, int64_t handshake_ms,
                         std::unique_ptr<StoreServer>* out, std::string* why, RefusalsRef refusals = nullptr,
                         StoreLimits limits = StoreLimits());
  ~StoreServer();

  int port() const { return port_; }
  // Stops accepting and closes the listening socket, so that later
  // connections are refused by the system; connections already made are
  // served on until the server is destroyed. For a group that has formed.
  void close_listener();
  size_t live_connections() const { return acceptor_.live(); }
  const Refusals& refusals() const { return *refusals_; }
  uint64_t auth_failures() const { return refusals_->auth(); }
  std::string last_refusal() const { return refusals_->last(); }
  void count_refusal(Refusals::Kind kind, const std::string& why) { refusals_->count(kind, why); }

  // A set on behalf of `rank`: TC_ERR_AUTH (counted) outside its namespace,
  // TC_ERR_ALLOC (counted) past the store's bound; *why says which.
  tc_status put(const std::string& key, const std::string& value, int rank, std::string* why);
  bool lookup(const std::string& key, std::string* value) const;
  size_t held_bytes() const;

  // Serves one connection until it ends: the handshake, then requests. The
  // acceptor's threads call it; tests and fuzz targets may hand it one end
  // of a socket pair.
  void serve(Socket& s);

 private:
  StoreServer() = default;
  tc_status serve_requests(Socket& s, Session& session, int rank);
  // Room for a set of `bytes` by `rank` (what it holds may be replaced),
  // reserved while the frame is read; false when there is none.
  bool reserve(int rank, size_t bytes, std::string* why);
  void release(size_t bytes);
  void refuse(Refusals::Kind kind, const std::string& why) { refusals_->count(kind, why); }

  Socket listener_;
  int port_ = 0;
  KeyringRef ring_;
  int world_ = 0;
  std::vector<std::string> rank_identities_;
  int64_t handshake_ms_ = 0;
  StoreLimits limits_;
  RefusalsRef refusals_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::map<std::string, std::string> data_;
  size_t held_bytes_ = 0;            // keys + values in data_
  size_t reserved_ = 0;              // sets being read
  std::vector<size_t> rank_bytes_;   // held_bytes_ by namespace
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
  // `refusals`: where this rank counts what it refuses or is refused.
  static tc_status connect(const std::string& host, int port, KeyringRef ring, int rank, Deadline deadline,
                           std::unique_ptr<TcpStoreClient>* out, std::string* why, RefusalsRef refusals = nullptr);
  tc_status set(const std::string& key, const std::string& value, std::string* why) override;
  tc_status get(const std::string& key, Deadline deadline, std::string* value, std::string* why) override;

 private:
  TcpStoreClient() = default;
  tc_status open(Deadline deadline, std::string* why);
  // One request and its reply. A frame that fails its integrity check, on
  // either side, costs the connection: it is made again (a few times at
  // most) and the request repeated, so an altered frame delays the
  // rendezvous instead of failing it.
  tc_status exchange(const std::string& request, size_t max_reply, Deadline deadline, std::string* reply,
                     std::string* why);

  std::string host_;
  int port_ = 0;
  KeyringRef ring_;
  int rank_ = 0;
  RefusalsRef refusals_;
  int reconnects_left_ = 3;
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
