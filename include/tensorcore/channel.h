/* tensorcore: authenticated message channels over a connected TCP socket.
 *
 * The mutual HMAC-SHA256 handshake of the authenticated control connections
 * (dist.h), and after it length-prefixed frames that each end with a 16-byte
 * AES-256-GCM tag (GMAC: the frame is authenticated, not encrypted) under a
 * key of the connection and direction, with the frame's sequence number as
 * nonce: a frame altered, replayed, reordered, dropped from the middle or
 * reflected back fails with TC_ERR_AUTH and the channel must be closed. A
 * peer of another protocol version is refused at the handshake. Callers that speak their own protocol (simpler's
 * remote level-3 sessions) use it instead of rebuilding the handshake.
 * Nothing is encrypted.
 *
 * One thread may send while another receives; two senders (or two
 * receivers) at once are serialised. A blocked send or receive returns
 * (TC_ERR_IO) once tc_channel_shutdown is called from another thread. */
#ifndef TENSORCORE_CHANNEL_H
#define TENSORCORE_CHANNEL_H

#include "tensorcore/dist.h"
#include "tensorcore/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tc_channel_s* tc_channel;

/* Largest frame payload a channel sends or receives (1 GiB). */
#define TC_CHANNEL_MAX_FRAME_BYTES 0x40000000

/* Runs the handshake on `fd` (a connected stream socket; the channel works
 * on its own duplicate, the caller still owns and closes fd) as the server
 * (is_server 1) or the client (0), within timeout_ms (> 0). A client with
 * expected_peer_identity non-empty also requires the server to prove it.
 * TC_ERR_AUTH when either side fails to prove a key of `auth`. */
TC_API tc_status tc_channel_open(int32_t fd, int32_t is_server, const struct tc_auth_config* auth,
                                 const char* expected_peer_identity, int64_t timeout_ms, tc_channel* out);
/* Sends one frame of nbytes (0..TC_CHANNEL_MAX_FRAME_BYTES). */
TC_API tc_status tc_channel_send(tc_channel ch, const void* data, size_t nbytes, int64_t timeout_ms);

/* One piece of a frame for tc_channel_sendv. */
typedef struct tc_channel_part {
  const void* data;
  size_t nbytes;
} tc_channel_part;
#define TC_CHANNEL_MAX_PARTS 32
/* Sends one frame whose payload is the `count` parts in turn (1..
 * TC_CHANNEL_MAX_PARTS, together at most TC_CHANNEL_MAX_FRAME_BYTES): the
 * parts go to the socket as they are (gathered), without being joined. */
TC_API tc_status tc_channel_sendv(tc_channel ch, const tc_channel_part* parts, size_t count, int64_t timeout_ms);
/* Receives one frame of at most max_bytes (<= TC_CHANNEL_MAX_FRAME_BYTES):
 * *data points to the channel's copy, valid until the next receive or
 * close, and handed out only once its MAC verified. A longer frame is
 * refused at its length (TC_ERR_CORRUPT), a MAC that does not verify is
 * TC_ERR_AUTH, a closed peer TC_ERR_IO. TC_ERR_TIMEOUT when no frame began
 * to arrive before the deadline leaves the channel usable (call again);
 * after any other failure, a frame cut short by the deadline included, the
 * channel is out of step and later calls fail at once. */
TC_API tc_status tc_channel_recv(tc_channel ch, size_t max_bytes, int64_t timeout_ms, const void** data,
                                 size_t* nbytes);
/* Receives one frame straight into the caller's memory: its payload (at
 * most `capacity` bytes) is written to dst as it arrives and its MAC
 * checked over those bytes; *nbytes is the payload's length. Failures as
 * tc_channel_recv's (a frame longer than capacity is TC_ERR_CORRUPT at its
 * length, before any byte is written). On TC_ERR_AUTH, or a frame cut
 * short, dst holds bytes that were not verified: the caller treats its
 * destination as lost, and the channel is out of step. */
TC_API tc_status tc_channel_recv_into(tc_channel ch, void* dst, size_t capacity, int64_t timeout_ms,
                                      size_t* nbytes);
/* Before a send or receive blocks, watch the connection for up to spin_us
 * microseconds (0..1000000; 0, the default, blocks at once). A peer that
 * answers within it costs no wake-up (tens of microseconds); a process
 * should spin only where it has a core to itself. */
TC_API tc_status tc_channel_set_spin(tc_channel ch, int64_t spin_us);
/* The identity the peer proved; lives until the channel is closed. */
TC_API tc_status tc_channel_peer_identity(tc_channel ch, const char** out);
/* Shuts the connection down (both directions), waking blocked calls. */
TC_API tc_status tc_channel_shutdown(tc_channel ch);
/* Frees the channel; no call may be in progress on it. */
TC_API tc_status tc_channel_close(tc_channel ch);

#ifdef __cplusplus
}
#endif

#endif /* TENSORCORE_CHANNEL_H */
