// Fixed-width values in byte buffers the runtime shares with other processes
// (the level-3 mailbox's frames, level-4 copy frames): unaligned, in host
// order, which both sides of those buffers share (little-endian hosts).
#pragma once

#include <cstdint>
#include <cstring>

namespace simpler::wire {

template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Writes v at p; returns the byte after it.
template <class T>
uint8_t* store(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof v);
  return p + sizeof v;
}

}  // namespace simpler::wire
