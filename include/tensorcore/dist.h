/* tensorcore: distributed collectives, authenticated control channels and
 * the remote tensor endpoint.
 *
 * A tc_dist is one member of a group of `world_size` processes. Backends:
 *   TC_DIST_SINGLE  world 1, every collective is a validated no-op;
 *   TC_DIST_GLOO    host buffers, the gloo library over TCP;
 *   TC_DIST_NCCL    CUDA buffers of a CUDA context, NCCL.
 * Rendezvous URLs: "single://<anything>", "gloo+tcp://host:port" (also
 * "tcp://host:port"; rank 0 hosts a key-value store there that the others
 * join), "file:///shared/dir" (gloo's FileStore in a directory every rank
 * sees). Query parameters after '?': timeout_ms=N (every blocking call,
 * rendezvous included; default $TC_DIST_TIMEOUT_MS, else 120000) and
 * iface_host=H (the address gloo binds its data connections to; default the
 * rendezvous host, or 127.0.0.1 for file://).
 *
 * Blocking calls never hang: a peer that dies or stops answering makes the
 * call fail with TC_ERR_TIMEOUT once the deadline passes (or at once when its
 * connection closes). After such a failure the group is broken: later
 * collectives fail with TC_ERR_TIMEOUT until it is finalized.
 *
 * Authenticated variants run a mutual HMAC-SHA256 challenge-response with
 * fresh nonces on every control connection (the rendezvous store, the remote
 * endpoint). They do not encrypt, and the data connections of gloo/NCCL are
 * not authenticated: see docs/distributed.md. */
#ifndef TENSORCORE_DIST_H
#define TENSORCORE_DIST_H

#include "tensorcore/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tc_dist_s* tc_dist;
typedef struct tc_remote_s* tc_remote;

/* Backends. 1 is reserved. */
#define TC_DIST_SINGLE 0
#define TC_DIST_RING 1
#define TC_DIST_GLOO 2
#define TC_DIST_NCCL 3

/* Reduction operators. AVG divides the sum by world_size. */
#define TC_REDUCE_SUM 0
#define TC_REDUCE_AVG 1
#define TC_REDUCE_MAX 2
#define TC_REDUCE_MIN 3

/* Keys: secrets are at least 32 bytes, identities at most 127 bytes. */
#define TC_AUTH_MIN_SECRET_BYTES 32
#define TC_AUTH_MAX_IDENTITY_BYTES 127

struct tc_auth_key {
  const char* identity; /* who holds this key */
  uint64_t key_id;      /* distinguishes the keys of one identity (rotation) */
  const void* secret;
  size_t secret_bytes;
};

/* A keyring. The local side proves itself with the key (local_identity,
 * active_key_id) and accepts a peer that proves any key of the ring.
 * local_identity NULL: the one identity of the ring (INVALID_ARG when the
 * ring holds several); active_key_id 0: the first key of local_identity.
 * Everything is deep-copied by the call that takes it. */
struct tc_auth_config {
  const char* local_identity;
  uint64_t active_key_id;
  const struct tc_auth_key* keys;
  size_t key_count;
};

TC_API tc_status tc_dist_init(tc_context ctx, int32_t backend, int32_t world_size, int32_t rank,
                              const char* rendezvous_url, tc_dist* out);

/* As tc_dist_init, with every rendezvous connection authenticated. When
 * rank_identities is given (rank_identity_count == world_size), rank r must
 * prove identity rank_identities[r]; otherwise any key of the ring admits a
 * peer. A refused peer learns nothing of the group and is counted
 * (tc_dist_auth_failure_count on rank 0); the refused process gets TC_ERR_AUTH.
 * Once the group has formed, rank 0 closes the rendezvous listener: later
 * connections to it are refused by the system. */
TC_API tc_status tc_dist_init_authenticated(tc_context ctx, int32_t backend, int32_t world_size, int32_t rank,
                                            const char* rendezvous_url, const char* const* rank_identities,
                                            size_t rank_identity_count, const struct tc_auth_config* auth,
                                            tc_dist* out);

/* A gloo group over an explicit peer list: peer_urls[r] is "tcp://host:port"
 * of rank r (rank 0's address hosts the rendezvous; each rank's host is the
 * address it binds), peer_identities[r] the identity rank r must prove, and
 * auth->local_identity (if set) must be peer_identities[my_rank]. */
TC_API tc_status tc_mesh_group_init_authenticated(tc_context ctx, int32_t n_peers, int32_t my_rank,
                                                  const char* const* peer_urls,
                                                  const char* const* peer_identities,
                                                  const struct tc_auth_config* auth, tc_dist* out);

/* Leaves the group and frees the handle. Refused while a DiLoCo context
 * built on it is alive. */
TC_API tc_status tc_dist_finalize(tc_dist dist);

TC_API tc_status tc_dist_world_size(tc_dist dist, int32_t* out);
TC_API tc_status tc_dist_rank(tc_dist dist, int32_t* out);
TC_API tc_status tc_dist_backend(tc_dist dist, int32_t* out);

/* Deadline of every later blocking call, in milliseconds (> 0). */
TC_API tc_status tc_dist_set_timeout(tc_dist dist, int64_t timeout_ms);
TC_API tc_status tc_dist_get_timeout(tc_dist dist, int64_t* out);

/* Bytes this rank has put on the wire for collectives so far, counted from
 * the algorithm's message sizes (a ring allreduce of S bytes sends
 * 2 (n-1)/n S). */
TC_API tc_status tc_dist_bytes_sent(tc_dist dist, uint64_t* out);

/* Refusals this rank counted on its control connections (the rendezvous
 * store it hosts as rank 0, its own connection to the store as any rank),
 * from the group's formation on: tc_dist_auth_failure_count those of
 * authentication (a handshake's proof or a frame's MAC failed, either
 * side); tc_dist_refusal_count every kind (those, plus handshakes and frames
 * past their deadline, frames and values past a bound, keys outside the
 * setter's namespace, malformed requests and replies, rendezvous reads that
 * timed out). tc_dist_last_refusal: why the last one was refused ("" when
 * none); the text stays valid until this thread's next call of it. */
TC_API tc_status tc_dist_auth_failure_count(tc_dist dist, uint64_t* out);
TC_API tc_status tc_dist_refusal_count(tc_dist dist, uint64_t* out);
TC_API tc_status tc_dist_last_refusal(tc_dist dist, const char** out);

/* Collectives. Buffers belong to the dist's context; dtypes F32, F16, BF16
 * (allreduce and reduce_scatter reduce 16-bit types in their own precision,
 * as NCCL does). In place: allreduce and broadcast work on `buf`.
 * allgather: dst holds world_size * n elements, rank r's src at r * n.
 * reduce_scatter: src holds world_size * n elements; dst receives this
 * rank's n-element block of the reduction. src and dst must not overlap. */
TC_API tc_status tc_allreduce(tc_dist dist, tc_buffer buf, size_t num_elements, tc_dtype dtype, int32_t op);
TC_API tc_status tc_broadcast(tc_dist dist, tc_buffer buf, size_t num_elements, tc_dtype dtype, int32_t root);
TC_API tc_status tc_allgather(tc_dist dist, tc_buffer src, tc_buffer dst, size_t num_elements_per_rank,
                              tc_dtype dtype);
TC_API tc_status tc_reduce_scatter(tc_dist dist, tc_buffer src, tc_buffer dst, size_t num_elements_per_rank,
                                   tc_dtype dtype, int32_t op);
TC_API tc_status tc_barrier(tc_dist dist);

/* ---- remote tensor endpoint ------------------------------------------------
 * A weight server publishes named host byte ranges; compute clients connect
 * and fetch them. Every connection of an authenticated endpoint runs the
 * mutual handshake; an unauthenticated endpoint refuses authenticated peers
 * and vice versa. */
#define TC_REMOTE_ROLE_WEIGHT_SERVER 0
#define TC_REMOTE_ROLE_COMPUTE_CLIENT 1

/* bind_url "tcp://host:port" for a server (port 0 picks a free port, see
 * tc_remote_bound_port); NULL for a client. */
TC_API tc_status tc_remote_init(tc_context ctx, int32_t role, const char* bind_url, tc_remote* out);
TC_API tc_status tc_remote_init_authenticated(tc_context ctx, int32_t role, const char* bind_url,
                                              const struct tc_auth_config* auth, tc_remote* out);
TC_API tc_status tc_remote_shutdown(tc_remote remote);
TC_API tc_status tc_remote_bound_port(tc_remote remote, int32_t* out);

/* Server: publishes `nbytes` at `ptr` under `name` (the memory must stay
 * valid until unregistered or shut down). A tensor travels in one frame:
 * nbytes is 1..4 GiB - 2 (0xFFFFFFFE), else TC_ERR_INVALID_ARG. */
TC_API tc_status tc_remote_register_tensor(tc_remote remote, const char* name, const void* ptr, size_t nbytes);
TC_API tc_status tc_remote_unregister_tensor(tc_remote remote, const char* name);
TC_API tc_status tc_remote_registered_count(tc_remote remote, size_t* out);

/* Client: connects to a server; *out_peer_id names the connection. The
 * authenticated form also requires the server to prove
 * expected_peer_identity. */
TC_API tc_status tc_remote_connect(tc_remote remote, const char* peer_url, int32_t* out_peer_id);
TC_API tc_status tc_remote_connect_authenticated(tc_remote remote, const char* peer_url,
                                                 const char* expected_peer_identity, int32_t* out_peer_id);
/* Client: copies the tensor `name` (exactly nbytes, 1..0xFFFFFFFE) from peer
 * into dst. The request names nbytes; a tensor of another size is the
 * server's refusal (TC_ERR_INVALID_ARG), and a reply longer than asked is
 * refused at its length without reading it (TC_ERR_CORRUPT, connection
 * closed). */
TC_API tc_status tc_remote_tensor_fetch(tc_remote remote, int32_t peer_id, const char* name, void* dst,
                                        size_t nbytes);

/* Replaces the keyring for future handshakes; live connections keep theirs. */
TC_API tc_status tc_remote_auth_rotate(tc_remote remote, const struct tc_auth_config* auth);
/* The identity / key id that peer `peer_id` proved (a server numbers its
 * accepted clients from 0; a client its connections). The string lives until
 * the endpoint shuts down. */
TC_API tc_status tc_remote_peer_identity(tc_remote remote, int32_t peer_id, const char** out);
TC_API tc_status tc_remote_peer_key_id(tc_remote remote, int32_t peer_id, uint64_t* out);
/* Authentication refusals (handshakes, frames' MACs) on this endpoint's
 * connections, and refusals of every kind (those, plus deadlines, replies
 * longer than asked, malformed requests or replies). */
TC_API tc_status tc_remote_auth_failure_count(tc_remote remote, uint64_t* out);
TC_API tc_status tc_remote_refusal_count(tc_remote remote, uint64_t* out);
TC_API tc_status tc_remote_total_bytes_served(tc_remote remote, uint64_t* out);
TC_API tc_status tc_remote_total_bytes_fetched(tc_remote remote, uint64_t* out);

#ifdef __cplusplus
}
#endif

#endif /* TENSORCORE_DIST_H */
