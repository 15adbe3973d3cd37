// DiLoCo state blobs.
//
//   v2: "TCDLSTA2" | u32 version=2 | u32 header_size=64 | u64 payload_bytes
//       | u8 sha256(payload)[32] | u32 world_size | u32 rank | payload
//   v1: "TCDLSTA1" | u32 version=1 | u32 header_size=32 | u64 payload_bytes
//       | u32 world_size | u32 rank | payload
// payload (little-endian): counts and config, counters, epochs, the
// parameter table (name, count, dtype), then the f32 arrays anchor, m1 (not
// for SGD), m2 (Adam), residual (compressed modes), each `total` long.
// Reading checks the whole blob (sizes, digest, every length) before
// anything changes, so a refused blob leaves the context as it was. The
// arrays of device parameters live in device memory (diloco_device.cpp):
// they are read and written through the stager.
#include <cstring>

#include "core/error.h"
#include "core/crypto.h"
#include "dist/diloco.h"

namespace tc {
namespace dist {

namespace {

constexpr char kMagic1[8] = {'T', 'C', 'D', 'L', 'S', 'T', 'A', '1'};
constexpr char kMagic2[8] = {'T', 'C', 'D', 'L', 'S', 'T', 'A', '2'};

struct Writer {
  std::vector<uint8_t> out;
  template <class T>
  void put(T v) {
    const uint8_t* p = reinterpret_cast<const uint8_t*>(&v);
    out.insert(out.end(), p, p + sizeof v);
  }
  void bytes(const void* p, size_t n) {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  }
  void floats(const std::vector<float>& v) { bytes(v.data(), v.size() * 4); }
};

struct Reader {
  const uint8_t* p;
  size_t left;
  bool ok = true;
  template <class T>
  T get() {
    T v{};
    if (left < sizeof v) {
      ok = false;
      return v;
    }
    std::memcpy(&v, p, sizeof v);
    p += sizeof v;
    left -= sizeof v;
    return v;
  }
  bool bytes(void* dst, size_t n) {
    if (left < n) return ok = false;
    if (n == 0) return true;  // an empty vector's data() may be null, which memcpy may not be given
    std::memcpy(dst, p, n);
    p += n;
    left -= n;
    return true;
  }
};

// The payload up to the state arrays.
std::vector<uint8_t> fixed_part(tc_diloco d) {
  Writer w;
  const tc_diloco_config& c = d->cfg;
  w.put<uint32_t>(uint32_t(d->params.size()));
  w.put<uint64_t>(d->total);
  w.put<int32_t>(c.inner_steps);
  w.put<float>(c.outer_lr);
  w.put<float>(c.outer_momentum);
  w.put<float>(c.outer_beta2);
  w.put<float>(c.outer_eps);
  w.put<int32_t>(c.outer_optimizer);
  w.put<int32_t>(c.compress);
  w.put<int32_t>(c.async_overlap);
  w.put<uint64_t>(d->inner_total);
  w.put<uint64_t>(d->outer_completed);
  w.put<uint64_t>(d->since_outer);
  w.put<uint64_t>(d->round_id);
  w.put<uint64_t>(d->state.adam_t);
  w.put<uint64_t>(d->topology_epoch);
  w.put<uint64_t>(d->membership_epoch);
  w.put<double>(d->last_seconds);
  w.put<double>(d->last_bytes);
  for (auto& p : d->params) {
    w.put<uint32_t>(uint32_t(p.name.size()));
    w.bytes(p.name.data(), p.name.size());
    w.put<uint64_t>(p.n);
    w.put<int32_t>(p.dtype);
  }
  return w.out;
}

// How many `total`-long arrays the state has: anchor, m1, m2, residual as
// the optimizer and the compression have them.
size_t array_count(const tc_diloco_config& c) {
  return 1 + (c.outer_optimizer != TC_DILOCO_OUTER_SGD) + (c.outer_optimizer == TC_DILOCO_OUTER_ADAM) +
         (c.compress != TC_DILOCO_COMPRESS_NONE);
}

size_t payload_size(tc_diloco d) { return fixed_part(d).size() + array_count(d->cfg) * d->total * 4; }

// The whole payload; device state is read through the stager.
tc_status payload(tc_diloco d, std::vector<uint8_t>* out) {
  Writer w;
  w.out = fixed_part(d);
  if (d->params_on_device) {
    *out = std::move(w.out);
    return device_state_read(d, out);
  }
  w.floats(d->state.anchor);
  w.floats(d->state.m1);
  w.floats(d->state.m2);
  w.floats(d->state.residual);
  *out = std::move(w.out);
  return TC_OK;
}

size_t header_size(uint32_t version) {
  return version == 1 ? TC_DILOCO_STATE_V1_HEADER_SIZE : TC_DILOCO_STATE_V2_HEADER_SIZE;
}

}  // namespace

size_t diloco_state_size(tc_diloco d, uint32_t version) { return header_size(version) + payload_size(d); }

tc_status diloco_state_write(tc_diloco d, uint32_t version, uint8_t* out) {
  std::vector<uint8_t> body;
  if (tc_status st = payload(d, &body)) return st;
  Writer h;
  h.bytes(version == 1 ? kMagic1 : kMagic2, 8);
  h.put<uint32_t>(version);
  h.put<uint32_t>(uint32_t(header_size(version)));
  h.put<uint64_t>(body.size());
  if (version != 1) {
    uint8_t digest[kDigestBytes];
    sha256(body.data(), body.size(), digest);
    h.bytes(digest, kDigestBytes);
  }
  h.put<uint32_t>(uint32_t(d->comm->size()));
  h.put<uint32_t>(uint32_t(d->comm->rank()));
  std::memcpy(out, h.out.data(), h.out.size());
  std::memcpy(out + h.out.size(), body.data(), body.size());
  return TC_OK;
}

tc_status diloco_state_read(tc_diloco d, uint32_t version, const uint8_t* blob, size_t n) {
  const char* fn = "tc_diloco_state_deserialize";
  const size_t hs = header_size(version);
  if (n >= 8 && std::memcmp(blob, version == 1 ? kMagic2 : kMagic1, 8) == 0)
    return fail(TC_ERR_INVALID_ARG, "%s: the blob is state format v%u but v%u was asked for", fn, version == 1 ? 2 : 1,
                version);
  if (n < hs) return fail(TC_ERR_CORRUPT, "%s: %zu bytes is shorter than the %zu-byte v%u header", fn, n, hs, version);
  if (std::memcmp(blob, version == 1 ? kMagic1 : kMagic2, 8) != 0)
    return fail(TC_ERR_CORRUPT, "%s: not a DiLoCo state blob (bad magic)", fn);
  Reader h{blob + 8, hs - 8};
  uint32_t ver = h.get<uint32_t>(), hsize = h.get<uint32_t>();
  uint64_t body_n = h.get<uint64_t>();
  uint8_t digest[kDigestBytes] = {0};
  if (version != 1) h.bytes(digest, kDigestBytes);
  uint32_t world = h.get<uint32_t>(), rank = h.get<uint32_t>();
  (void)rank;
  if (ver != version || hsize != hs)
    return fail(TC_ERR_CORRUPT, "%s: header says version %u, header size %u (expected %u, %zu)", fn, ver, hsize,
                version, hs);
  if (body_n != n - hs)
    return fail(TC_ERR_CORRUPT, "%s: header announces %llu payload bytes but %zu follow (truncated or padded)", fn,
                (unsigned long long)body_n, n - hs);
  if (version != 1) {
    uint8_t actual[kDigestBytes];
    sha256(blob + hs, body_n, actual);
    if (!equal_ct(actual, digest, kDigestBytes))
      return fail(TC_ERR_CORRUPT, "%s: the payload's SHA-256 does not match the header (corrupt blob)", fn);
  }
  if (int(world) != d->comm->size())
    return fail(TC_ERR_INVALID_ARG, "%s: the blob was written by a group of %u, this one has %d", fn, world,
                d->comm->size());

  Reader r{blob + hs, size_t(body_n)};
  uint32_t nparams = r.get<uint32_t>();
  uint64_t total = r.get<uint64_t>();
  tc_diloco_config c{};
  c.inner_steps = r.get<int32_t>();
  c.outer_lr = r.get<float>();
  c.outer_momentum = r.get<float>();
  c.outer_beta2 = r.get<float>();
  c.outer_eps = r.get<float>();
  c.outer_optimizer = r.get<int32_t>();
  c.compress = r.get<int32_t>();
  c.async_overlap = r.get<int32_t>();
  uint64_t inner_total = r.get<uint64_t>(), outer_completed = r.get<uint64_t>(), since = r.get<uint64_t>(),
           round_id = r.get<uint64_t>(), adam_t = r.get<uint64_t>(), topo = r.get<uint64_t>(),
           member = r.get<uint64_t>();
  double last_s = r.get<double>(), last_b = r.get<double>();
  if (!r.ok) return fail(TC_ERR_CORRUPT, "%s: payload ends inside its fixed fields", fn);
  if (nparams != d->params.size() || total != d->total)
    return fail(TC_ERR_INVALID_ARG, "%s: the blob holds %u parameters (%llu elements); this context has %zu (%zu)", fn,
                nparams, (unsigned long long)total, d->params.size(), d->total);
  for (uint32_t i = 0; i < nparams; ++i) {
    uint32_t len = r.get<uint32_t>();
    if (!r.ok || len > r.left) return fail(TC_ERR_CORRUPT, "%s: parameter %u's name overruns the payload", fn, i);
    std::string name(reinterpret_cast<const char*>(r.p), len);
    r.p += len;
    r.left -= len;
    uint64_t pn = r.get<uint64_t>();
    int32_t dt = r.get<int32_t>();
    if (!r.ok) return fail(TC_ERR_CORRUPT, "%s: parameter table truncated", fn);
    const DilocoParam& p = d->params[i];
    if (name != p.name || pn != p.n || dt != p.dtype)
      return fail(TC_ERR_INVALID_ARG, "%s: parameter %u is '%s' (%llu elements, dtype %d) in the blob but '%s' (%zu, %d) "
                  "here", fn, i, name.c_str(), (unsigned long long)pn, dt, p.name.c_str(), p.n, p.dtype);
  }
  if (c.outer_optimizer != d->cfg.outer_optimizer || c.compress != d->cfg.compress)
    return fail(TC_ERR_INVALID_ARG, "%s: the blob's outer optimizer %d / compression %d differ from this context's "
                "%d / %d", fn, c.outer_optimizer, c.compress, d->cfg.outer_optimizer, d->cfg.compress);
  if ((d->topology_epoch && d->topology_epoch != topo) || (d->membership_epoch && d->membership_epoch != member))
    return fail(TC_ERR_INVALID_ARG, "%s: epochs (%llu, %llu) in the blob differ from this context's (%llu, %llu)", fn,
                (unsigned long long)topo, (unsigned long long)member, (unsigned long long)d->topology_epoch,
                (unsigned long long)d->membership_epoch);
  OuterState s;
  const size_t array_bytes = array_count(d->cfg) * d->total * 4;
  if (d->params_on_device) {
    // The arrays go to device memory once the blob has been checked.
    if (r.left < array_bytes) return fail(TC_ERR_CORRUPT, "%s: state arrays truncated", fn);
    if (r.left != array_bytes)
      return fail(TC_ERR_CORRUPT, "%s: %zu unexpected bytes after the state arrays", fn, r.left - array_bytes);
    if (tc_status st = device_state_write(d, r.p)) return st;  // installs only when every copy succeeded
  } else {
    s.anchor.resize(d->total);
    s.m1.resize(d->cfg.outer_optimizer == TC_DILOCO_OUTER_SGD ? 0 : d->total);
    s.m2.resize(d->cfg.outer_optimizer == TC_DILOCO_OUTER_ADAM ? d->total : 0);
    s.residual.resize(d->cfg.compress == TC_DILOCO_COMPRESS_NONE ? 0 : d->total);
    for (auto* v : {&s.anchor, &s.m1, &s.m2, &s.residual})
      if (!r.bytes(v->data(), v->size() * 4)) return fail(TC_ERR_CORRUPT, "%s: state arrays truncated", fn);
    if (r.left != 0) return fail(TC_ERR_CORRUPT, "%s: %zu unexpected bytes after the state arrays", fn, r.left);
  }
  s.adam_t = adam_t;
  // Everything checked (and device arrays written): install.
  d->state = std::move(s);
  d->inner_total = inner_total;
  d->outer_completed = outer_completed;
  d->since_outer = since;
  d->round_id = round_id;
  d->topology_epoch = topo;
  d->membership_epoch = member;
  d->last_seconds = last_s;
  d->last_bytes = last_b;
  return TC_OK;
}

}  // namespace dist
}  // namespace tc
