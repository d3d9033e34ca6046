// hash.cpp — XXH64, written from the algorithm's published description.
#include "container/hash.h"

#include <cstring>

#include "kernels/common.h"

namespace knot {

static const uint64_t P1 = 0x9E3779B185EBCA87ull;
static const uint64_t P2 = 0xC2B2AE3D27D4EB4Full;
static const uint64_t P3 = 0x165667B19E3779F9ull;
static const uint64_t P4 = 0x85EBCA77C2B2AE63ull;
static const uint64_t P5 = 0x27D4EB2F165667C5ull;

static inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static inline uint64_t rd64(const uint8_t* p) {  // little-endian load (all targets are LE)
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
static inline uint32_t rd32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
static inline uint64_t lane_round(uint64_t acc, uint64_t in) {
  acc += in * P2;
  acc = rotl(acc, 31);
  return acc * P1;
}
static inline uint64_t merge_lane(uint64_t h, uint64_t v) {
  h ^= lane_round(0, v);
  return h * P1 + P4;
}

// Tail (< 32 bytes) and avalanche.
static uint64_t finish(uint64_t h, const uint8_t* p, size_t n) {
  while (n >= 8) {
    h ^= lane_round(0, rd64(p));
    h = rotl(h, 27) * P1 + P4;
    p += 8, n -= 8;
  }
  if (n >= 4) {
    h ^= (uint64_t)rd32(p) * P1;
    h = rotl(h, 23) * P2 + P3;
    p += 4, n -= 4;
  }
  while (n > 0) {
    h ^= (uint64_t)(*p) * P5;
    h = rotl(h, 11) * P1;
    p++, n--;
  }
  h ^= h >> 33;
  h *= P2;
  h ^= h >> 29;
  h *= P3;
  h ^= h >> 32;
  return h;
}

static uint64_t converge(const uint64_t v[4]) {
  uint64_t h = rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18);
  for (int i = 0; i < 4; i++) h = merge_lane(h, v[i]);
  return h;
}

uint64_t hash64(const void* data, size_t len, uint64_t seed) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  size_t n = len;
  uint64_t h;
  if (n >= 32) {
    uint64_t v[4] = {seed + P1 + P2, seed + P2, seed, seed - P1};
    // hot loop: 4 independent lanes per 32-byte stripe
    while (n >= 32) {
      v[0] = lane_round(v[0], rd64(p));
      v[1] = lane_round(v[1], rd64(p + 8));
      v[2] = lane_round(v[2], rd64(p + 16));
      v[3] = lane_round(v[3], rd64(p + 24));
      p += 32, n -= 32;
    }
    h = converge(v);
  } else {
    h = seed + P5;
  }
  h += (uint64_t)len;
  return finish(h, p, n);
}

void Hasher::reset(uint64_t seed) {
  seed_ = seed;
  v_[0] = seed + P1 + P2;
  v_[1] = seed + P2;
  v_[2] = seed;
  v_[3] = seed - P1;
  total_ = 0;
  nbuf_ = 0;
}

void Hasher::update(const void* data, size_t len) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  total_ += len;
  if (nbuf_ > 0) {
    size_t take = 32 - nbuf_ < len ? 32 - nbuf_ : len;
    std::memcpy(buf_ + nbuf_, p, take);
    nbuf_ += take, p += take, len -= take;
    if (nbuf_ < 32) return;
    for (int i = 0; i < 4; i++) v_[i] = lane_round(v_[i], rd64(buf_ + 8 * i));
    nbuf_ = 0;
  }
  while (len >= 32) {
    for (int i = 0; i < 4; i++) v_[i] = lane_round(v_[i], rd64(p + 8 * i));
    p += 32, len -= 32;
  }
  std::memcpy(buf_, p, len);
  nbuf_ = len;
}

uint64_t Hasher::digest() const {
  uint64_t h = total_ >= 32 ? converge(v_) : seed_ + P5;
  h += total_;
  return finish(h, buf_, nbuf_);
}

std::string hash_hex(uint64_t h) {
  static const char* hex = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; i--, h >>= 4) s[i] = hex[h & 15];
  return s;
}

uint64_t hash_from_hex(std::string_view s, std::string_view what) {
  if (s.empty() || s.size() > 16) fail(std::string(what) + ": bad hash '" + std::string(s) + "'");
  uint64_t h = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else fail(std::string(what) + ": bad hash '" + std::string(s) + "'");
    h = (h << 4) | (uint64_t)d;
  }
  return h;
}

}  // namespace knot
