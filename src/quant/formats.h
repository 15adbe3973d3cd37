// Quantized weight formats, defined once for every backend and test.
//
// The block structs are ggml's byte layouts exactly (ggml-common.h), so a
// GGUF tensor's bytes are used as they are. A row of K weights is K / QK
// consecutive blocks; a matrix W[N, K] is N such rows. Scales are IEEE
// binary16 stored as raw bits (uint16_t) except Q8_K's f32.
//
//   Q4_0  32 weights, 18 bytes   w = (q - 8) * d            q: 4 bits
//   Q4_1  32 weights, 20 bytes   w = q * d + m              q: 4 bits
//   Q8_0  32 weights, 34 bytes   w = q * d                  q: int8
//   Q5_0  32 weights, 22 bytes   w = (q - 16) * d           q: 5 bits
//   Q5_1  32 weights, 24 bytes   w = q * d + m              q: 5 bits
//   Q4_K 256 weights, 144 bytes  8 sub-blocks of 32 with 6-bit scale and min:
//                                w = (d * sc) * q - (dmin * m)
//   Q5_K 256 weights, 176 bytes  as Q4_K with a fifth bit from qh
//   Q6_K 256 weights, 210 bytes  16 sub-blocks of 16, int8 scale:
//                                w = (d * sc) * (q - 32)    q: 6 bits
//   Q8_K 256 weights, 292 bytes  w = q * d (f32 d), plus sums of 16 q's
//
// The tables below map between our format ids (TC_QUANT_*), ggml's type ids
// (the GGUF tensor type field) and the block geometry. The ggml table also
// lists types we cannot compute with, so a GGUF reader can size and skip them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__CUDACC__)
#define TC_QUANT_HD __host__ __device__
#else
#define TC_QUANT_HD
#endif

namespace tc {
namespace quant {

constexpr int QK4_0 = 32;
constexpr int QK4_1 = 32;
constexpr int QK8_0 = 32;
constexpr int QK5_0 = 32;
constexpr int QK5_1 = 32;
constexpr int QK_K = 256;
constexpr int K_SCALE_SIZE = 12;

struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[QK4_0 / 2];  // byte j: weight j (low nibble), weight j + 16 (high nibble)
};
struct BlockQ4_1 {
  uint16_t d, m;
  uint8_t qs[QK4_1 / 2];
};
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[QK8_0];
};
// The 5-bit formats keep Q4_0's nibble order and put the fifth bits apart:
// bit j of the little-endian word qh is the fifth bit of weight j, so q(j) =
// nibble | ((qh >> j) & 1) << 4.
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[QK5_0 / 2];  // as Q4_0
};
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[QK5_1 / 2];
};
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[K_SCALE_SIZE];  // 8 (scale, min) pairs of 6 bits, see scale_min_k4
  uint8_t qs[QK_K / 2];          // chunk c of 64 weights: byte 32c + l holds weight 64c + l
                                 // (low nibble) and 64c + 32 + l (high nibble)
};
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[K_SCALE_SIZE];
  uint8_t qh[QK_K / 8];  // byte l, bit 2c: fifth bit of weight 64c + l; bit 2c+1: of 64c + 32 + l
  uint8_t qs[QK_K / 2];  // as Q4_K
};
struct BlockQ6_K {
  uint8_t ql[QK_K / 2];  // half h (128 weights), l < 32: ql[64h + l] low/high nibble -> weights
  uint8_t qh[QK_K / 4];  //   128h + l / + 64, ql[64h + 32 + l] -> + 32 / + 96; qh[32h + l] bits
  int8_t scales[QK_K / 16];  // 0-1, 2-3, 4-5, 6-7 give the top two bits of those four
  uint16_t d;
};
struct BlockQ8_K {
  float d;
  int8_t qs[QK_K];
  int16_t bsums[QK_K / 16];  // sum of each 16 q's
};

static_assert(sizeof(BlockQ4_0) == 18, "ggml block_q4_0");
static_assert(sizeof(BlockQ4_1) == 20, "ggml block_q4_1");
static_assert(sizeof(BlockQ8_0) == 34, "ggml block_q8_0");
static_assert(sizeof(BlockQ5_0) == 22, "ggml block_q5_0");
static_assert(sizeof(BlockQ5_1) == 24, "ggml block_q5_1");
static_assert(sizeof(BlockQ4_K) == 144, "ggml block_q4_K");
static_assert(sizeof(BlockQ5_K) == 176, "ggml block_q5_K");
static_assert(sizeof(BlockQ6_K) == 210, "ggml block_q6_K");
static_assert(sizeof(BlockQ8_K) == 292, "ggml block_q8_K");

// Sub-block j (< 8) of a Q4_K / Q5_K block: its 6-bit scale and min
// (ggml's get_scale_min_k4). Bytes 0-3 hold scales 0-3, 4-7 mins 0-3, each in
// the low 6 bits; scales/mins 4-7 have their low 4 bits in bytes 8-11 and
// their top 2 bits in the top bits of bytes 0-3 / 4-7.
TC_QUANT_HD inline void scale_min_k4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = uint8_t((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// The 32 fifth bits of a Q5_0 / Q5_1 block as one word (bit j: weight j).
TC_QUANT_HD inline uint32_t q5_high_bits(const uint8_t* qh) {
  return uint32_t(qh[0]) | uint32_t(qh[1]) << 8 | uint32_t(qh[2]) << 16 | uint32_t(qh[3]) << 24;
}
// The unsigned code of weight j of a block of 32 from its 16 bytes of
// nibbles (Q4_0's order: weight j in the low half of byte j, j + 16 in the
// high half) and its fifth bits qh (q5_high_bits; 0 for the 4-bit formats).
TC_QUANT_HD inline int nibble_code(const uint8_t* qs, uint32_t qh, int j) {
  return (j < 16 ? qs[j] & 15 : qs[j - 16] >> 4) | int((qh >> j) & 1u) << 4;
}

// Our format ids; the values are the C ABI's TC_QUANT_* (new formats are
// appended: the values are part of the ABI).
enum Format : int32_t {
  Q4_0 = 0,
  Q8_0 = 1,
  Q4_1 = 2,
  Q4_K = 3,
  Q5_K = 4,
  Q6_K = 5,
  Q8_K = 6,
  F16 = 7,
  BF16 = 8,
  F32 = 9,
  Q5_0 = 10,
  Q5_1 = 11,
};
constexpr int kNumFormats = 12;

struct FormatInfo {
  int32_t format;      // TC_QUANT_*
  int32_t ggml_type;   // GGUF tensor type id
  const char* name;    // "q4_0", ...
  int32_t block_elems; // weights per block
  int32_t block_bytes; // bytes per block
};

constexpr FormatInfo kFormats[kNumFormats] = {
    {Q4_0, 2, "q4_0", 32, 18},   {Q8_0, 8, "q8_0", 32, 34},     {Q4_1, 3, "q4_1", 32, 20},
    {Q4_K, 12, "q4_k", 256, 144}, {Q5_K, 13, "q5_k", 256, 176}, {Q6_K, 14, "q6_k", 256, 210},
    {Q8_K, 15, "q8_k", 256, 292}, {F16, 1, "f16", 1, 2},        {BF16, 30, "bf16", 1, 2},
    {F32, 0, "f32", 1, 4},        {Q5_0, 6, "q5_0", 32, 22},     {Q5_1, 7, "q5_1", 32, 24},
};

// The decode step's 8-bit products (core/backend.h, GemvQ8Args): the
// formats they compute, and those with a split layout (RepackQ8Args: every
// block's quants 16-byte aligned, its f16 scale d apart). Q4_K and Q5_K
// blocks (144 and 176 bytes) are 16-byte multiples already and have none;
// Q6_K's 210-byte blocks do not align in GGUF's layout, so its products
// need the split one. Q4_1 and Q5_1 blocks (20 and 24 bytes, 4-byte
// multiples: d, m, [qh,] nibbles) are read in place. Q5_0's split copy is Q8_0's (its codes q - 16 are
// int8 values with the same d: exact), so Q5_0 matrices take the Q8_0
// products on it.
constexpr bool q8_product_format(int32_t format) {
  return format == Q4_0 || format == Q8_0 || format == Q4_1 || format == Q5_1 || format == Q4_K || format == Q5_K ||
         format == Q6_K;
}
constexpr bool q8_split_format(int32_t format) {
  return format == Q4_0 || format == Q8_0 || format == Q6_K || format == Q5_0;
}
// The formats whose 8-bit products also take f16 X (GemvQ8Args::xh: a GPU's
// tensor-core kernels dequantise them).
constexpr bool q8_f16x_format(int32_t format) {
  return format == Q4_0 || format == Q8_0 || format == Q4_K || format == Q5_K || format == Q6_K;
}
// The format of a split copy made from `format` (what its products compute).
constexpr int32_t q8_split_product(int32_t format) { return format == Q5_0 ? Q8_0 : format; }
// The formats whose 8-bit products read the split layout only.
constexpr bool q8_split_only(int32_t format) { return format == Q6_K || format == Q5_0; }
// Weights per block of a q8 product format (or one with a split copy).
constexpr int64_t q8_block_elems(int32_t format) {
  return format == Q4_0 || format == Q8_0 || format == Q5_0 || format == Q4_1 || format == Q5_1 ? 32 : QK_K;
}
// Bytes of one block's quants in the split layout: the block without d
// (Q6_K: ql, qh and the scales, in GGUF's order; Q5_0: Q8_0's 32 codes).
constexpr int64_t split_quant_bytes(int32_t format) {
  return format == Q8_0 || format == Q5_0 ? QK8_0 : format == Q6_K ? QK_K / 2 + QK_K / 4 + QK_K / 16 : QK4_0 / 2;
}

// Null for ids outside TC_QUANT_*. Host only: the tables live in host memory.
inline const FormatInfo* format_info(int32_t format) {
  return format >= 0 && format < kNumFormats ? &kFormats[format] : nullptr;
}

// Every ggml type id the GGUF format knows (gguf-py 0.19's table), with its
// block geometry, and our format id when we compute with it (-1 otherwise).
struct GgmlTypeInfo {
  int32_t id;
  const char* name;
  int32_t block_elems;
  int32_t block_bytes;
  int32_t format;
};

constexpr GgmlTypeInfo kGgmlTypes[] = {
    {0, "F32", 1, 4, F32},          {1, "F16", 1, 2, F16},          {2, "Q4_0", 32, 18, Q4_0},
    {3, "Q4_1", 32, 20, Q4_1},      {6, "Q5_0", 32, 22, Q5_0},      {7, "Q5_1", 32, 24, Q5_1},
    {8, "Q8_0", 32, 34, Q8_0},      {9, "Q8_1", 32, 40, -1},        {10, "Q2_K", 256, 84, -1},
    {11, "Q3_K", 256, 110, -1},     {12, "Q4_K", 256, 144, Q4_K},   {13, "Q5_K", 256, 176, Q5_K},
    {14, "Q6_K", 256, 210, Q6_K},   {15, "Q8_K", 256, 292, Q8_K},   {16, "IQ2_XXS", 256, 66, -1},
    {17, "IQ2_XS", 256, 74, -1},    {18, "IQ3_XXS", 256, 98, -1},   {19, "IQ1_S", 256, 50, -1},
    {20, "IQ4_NL", 32, 18, -1},     {21, "IQ3_S", 256, 110, -1},    {22, "IQ2_S", 256, 82, -1},
    {23, "IQ4_XS", 256, 136, -1},   {24, "I8", 1, 1, -1},           {25, "I16", 1, 2, -1},
    {26, "I32", 1, 4, -1},          {27, "I64", 1, 8, -1},          {28, "F64", 1, 8, -1},
    {29, "IQ1_M", 256, 56, -1},     {30, "BF16", 1, 2, BF16},       {34, "TQ1_0", 256, 54, -1},
    {35, "TQ2_0", 256, 66, -1},     {39, "MXFP4", 32, 17, -1},      {40, "NVFP4", 64, 36, -1},
    {41, "Q1_0", 128, 18, -1},
};

// Null for ids ggml does not define.
inline const GgmlTypeInfo* ggml_type_info(int32_t id) {
  for (const GgmlTypeInfo& t : kGgmlTypes)
    if (t.id == id) return &t;
  return nullptr;
}

// Our format for a ggml type id, -1 when we do not compute with it.
inline int32_t format_from_ggml(int32_t id) {
  const GgmlTypeInfo* t = ggml_type_info(id);
  return t ? t->format : -1;
}

// Bytes of `rows` rows of `k` weights; false when k is not a whole number of
// blocks, a count is negative or the size overflows 64 bits.
inline bool matrix_bytes(const FormatInfo& f, int64_t rows, int64_t k, uint64_t* out) {
  if (rows < 0 || k < 0 || k % f.block_elems) return false;
  if (uint64_t(k / f.block_elems) > UINT64_MAX / uint64_t(f.block_bytes)) return false;
  uint64_t row = uint64_t(k / f.block_elems) * uint64_t(f.block_bytes);
  if (rows && row > UINT64_MAX / uint64_t(rows)) return false;
  *out = row * uint64_t(rows);
  return true;
}

// Reference dequantisation of one row of k weights (k a multiple of the
// block size), computed in f32 with the same operations in the same order as
// ggml's dequantize_row_* (never fused), so the results are bit-identical.
void dequantize_row(int32_t format, const void* src, float* dst, int64_t k);

// A Q4_0, Q4_1, Q5_0, Q5_1 or Q8_0 matrix (N rows of K weights, N a multiple
// of 8) with its rows interleaved by eight, for kernels whose vector lanes are
// eight rows. Per group of 8 rows and block b of 32 weights, the 8 blocks'
// bytes moved (rows8_block_bytes: 144, 160, 176, 192, 272):
//   - the 8 rows' f16 scales d (16 bytes); Q4_1 / Q5_1 then the 8 mins m (16
//     bytes); Q5_0 / Q5_1 then their fifth bits (32 bytes from
//     rows8_plane_at: 16, 32): bit j of byte 4 r + t is the fifth bit of
//     weight 4 j + t of row r, bit 4 + j that of weight 16 + 4 j + t;
//   - from rows8_codes_at (16, 32, 48, 64, 16), Q4_0 / Q4_1 / Q5_0 / Q5_1:
//     4 x 32 bytes where byte 32 j + 4 r + t holds the low four bits of
//     weight 4 j + t of row r in its low nibble and those of weight
//     16 + 4 j + t in its high nibble (GGUF's qs[k] holds weight k low and
//     16 + k high, so the byte for (j, r, t) is qs[4 j + t] of row r);
//   - Q8_0: 8 x 32 bytes where byte 32 j + 4 r + t is weight 4 j + t of row r
//     plus 128 (its bits flipped to unsigned, the operand vpdpbusd wants).
// Groups follow each other, blocks within, except that for these five
// formats (rows8_paired) each pair of groups (2p, 2p + 1) is stored
// interleaved, block by block (2 x rows8_block_bytes a block): a field of
// the group layout at byte x of a block (the 16-byte scales and mins before
// rows8_head_bytes, the 32-byte planes and code chunks after) sits at 2 x
// for group 2p and at 2 x + its size for group 2p + 1, so that one 64-byte
// load brings a 32-byte chunk of sixteen rows and one 32-byte load their
// scales. A pair takes the place of its two groups; a last group without a
// partner (N / 8 odd) stays as above.
// Q4_K (K a multiple of 256) per group and superblock of 256 weights, 1184
// bytes (148 per 32 weights, against GGUF's 144: the sub-scales unpacked):
//   - the 8 rows' d, then their dmin (f16, 16 bytes each);
//   - byte 32 + 8 j + r: sub-block j's 6-bit scale of row r; byte 96 + 8 j + r
//     its min (scale_min_k4);
//   - from 160 (rows8_codes_at), for each pair p of sub-blocks (2p, 2p + 1)
//     8 x 32 bytes: byte 256 p + 32 c + 4 r + t is qs[32 p + 4 c + t] of row
//     r (low nibble: weight 4 c + t of sub-block 2p; high nibble: the same of
//     sub-block 2p + 1).
// Q5_K (K a multiple of 256) per group and superblock, 1440 bytes (180 per
// 32 weights, against GGUF's 176): Q4_K's with a plane of fifth bits per
// sub-block between the mins and the codes:
//   - bytes 0-159 as Q4_K's (d, dmin, the 6-bit scales and mins);
//   - from 160 (rows8_plane_at), 8 x 32 bytes: bit c of byte 32 j + 4 r + t
//     is the fifth bit of weight 4 c + t of sub-block j of row r (GGUF's bit
//     j of qh[4 c + t]);
//   - from 416 (rows8_codes_at) the low four bits as Q4_K's from 160.
// Q6_K (K a multiple of 256) per group and superblock, 1680 bytes (GGUF's):
//   - the 8 rows' d (f16, 16 bytes); byte 16 + 8 g + r: scale g (int8, of
//     weights 16 g .. 16 g + 15) of row r;
//   - from 144 (rows8_codes_at), per block b of 32 weights 192 bytes: 128 as
//     Q4_0's nibbles (the low four bits of the 6-bit codes: byte 32 j + 4 r +
//     t holds weight 32 b + 4 j + t low, 32 b + 16 + 4 j + t high), then 64
//     of top two bits: byte 32 (j / 2) + 4 r + t holds those of weight
//     32 b + 4 j + t at bit 4 (j % 2) and of 32 b + 16 + 4 j + t at bit
//     4 (j % 2) + 2.
constexpr bool has_rows8(int32_t format) {
  return format == Q4_0 || format == Q4_1 || format == Q5_0 || format == Q5_1 || format == Q8_0 || format == Q4_K ||
         format == Q5_K || format == Q6_K;
}
// The formats whose groups of eight rows are stored in interleaved pairs.
constexpr bool rows8_paired(int32_t format) {
  return format == Q4_0 || format == Q4_1 || format == Q5_0 || format == Q5_1 || format == Q8_0;
}
// The paired formats: bytes of a block's 16-byte fields (d; Q4_1 / Q5_1 m).
constexpr int rows8_head_bytes(int32_t format) { return format == Q4_1 || format == Q5_1 ? 32 : 16; }
// Bytes of a group of 8 rows per 32 weights.
constexpr int64_t rows8_block_bytes(int32_t format) {
  return format == Q4_0 ? 144 : format == Q4_1 ? 160 : format == Q5_0 ? 176 : format == Q5_1 ? 192
         : format == Q4_K ? 148 : format == Q5_K ? 180 : format == Q6_K ? 210 : 272;
}
// Q4_K / Q5_K / Q6_K: bytes of a group of 8 rows per superblock of 256 weights.
constexpr int64_t rows8_super_bytes(int32_t format) { return 8 * rows8_block_bytes(format); }
// Where a block's (K-quants: a superblock's) fifth-bit plane starts: Q5_0,
// Q5_1 after d and m, Q5_K after the mins (0 for the others: none).
constexpr int rows8_plane_at(int32_t format) {
  return format == Q5_0 ? 16 : format == Q5_1 ? 32 : format == Q5_K ? 160 : 0;
}
// Where a block's (K-quants: a superblock's) codes start: after d, Q4_1's and
// Q5_1's m and the fifth bits; Q4_K / Q5_K after d, dmin, the unpacked
// scales and mins (and Q5_K's planes); Q6_K after d and its scales.
constexpr int rows8_codes_at(int32_t format) {
  return format == Q4_1 ? 32 : format == Q5_0 ? 48 : format == Q5_1 ? 64 : format == Q4_K ? 160
         : format == Q5_K ? rows8_plane_at(Q5_K) + 256 : format == Q6_K ? 144 : 16;
}
// Bytes of an N x K matrix in the layout (Q4_K: 148 / 144 of GGUF's; Q5_K:
// 180 / 176).
inline uint64_t rows8_bytes(int32_t format, int64_t N, int64_t K) {
  return uint64_t(N / 8) * uint64_t(K / 32) * uint64_t(rows8_block_bytes(format));
}
// The 6-bit code (0..63) of weight k < 256 of a Q6_K superblock from its
// ql (128 bytes) and qh (64 bytes).
inline int q6_k_code(const uint8_t* ql, const uint8_t* qh, int k) {
  const int h = k / 128, e = k % 128, g = e / 32, l = e % 32;
  const int lo = (g & 1 ? ql[64 * h + 32 + l] : ql[64 * h + l]) >> (g & 2 ? 4 : 0) & 15;
  return lo | ((qh[32 * h + l] >> (2 * g)) & 3) << 4;
}
inline void repack_q6_k_rows8(const void* src, int64_t N, int64_t K, void* dst) {
  constexpr int kCodes = rows8_codes_at(Q6_K);
  const int64_t ns = K / 256;
  const auto* w = static_cast<const BlockQ6_K*>(src);
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t g = 0; g < N / 8; ++g)
    for (int64_t s = 0; s < ns; ++s) {
      uint8_t* o = out + (g * ns + s) * rows8_super_bytes(Q6_K);
      std::memset(o + kCodes, 0, size_t(rows8_super_bytes(Q6_K) - kCodes));
      for (int r = 0; r < 8; ++r) {
        const BlockQ6_K& blk = w[(g * 8 + r) * ns + s];
        std::memcpy(o + 2 * r, &blk.d, 2);
        for (int i = 0; i < 16; ++i) o[16 + 8 * i + r] = uint8_t(blk.scales[i]);
        for (int b = 0; b < 8; ++b) {
          uint8_t* ob = o + kCodes + 192 * b;
          for (int j = 0; j < 4; ++j)
            for (int t = 0; t < 4; ++t) {
              const int qa = q6_k_code(blk.ql, blk.qh, 32 * b + 4 * j + t);
              const int qb = q6_k_code(blk.ql, blk.qh, 32 * b + 16 + 4 * j + t);
              ob[32 * j + 4 * r + t] = uint8_t((qa & 15) | (qb & 15) << 4);
              ob[128 + 32 * (j / 2) + 4 * r + t] |= uint8_t((qa >> 4) << (4 * (j % 2)) | (qb >> 4) << (4 * (j % 2) + 2));
            }
        }
      }
    }
}
// An 8 x 8 bit matrix transposed: bit 8 i + j of x to bit 8 j + i (three
// exchanges of off-diagonal blocks, 1 x 1 bits, then 2 x 2, then 4 x 4).
inline uint64_t transpose_bits8(uint64_t x) {
  uint64_t t = (x ^ (x >> 7)) & 0x00AA00AA00AA00AAull;
  x ^= t ^ (t << 7);
  t = (x ^ (x >> 14)) & 0x0000CCCC0000CCCCull;
  x ^= t ^ (t << 14);
  t = (x ^ (x >> 28)) & 0x00000000F0F0F0F0ull;
  return x ^ t ^ (t << 28);
}
// Q4_K and Q5_K: the same bytes, Q5_K's fifth bits in planes per sub-block.
template <int32_t FMT>
inline void repack_q45_k_rows8(const void* src, int64_t N, int64_t K, void* dst) {
  using Block = std::conditional_t<FMT == Q5_K, BlockQ5_K, BlockQ4_K>;
  constexpr int kPlanes = rows8_plane_at(FMT), kCodes = rows8_codes_at(FMT);
  const int64_t ns = K / 256;
  const auto* w = static_cast<const Block*>(src);
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t g = 0; g < N / 8; ++g)
    for (int64_t s = 0; s < ns; ++s) {
      uint8_t* o = out + (g * ns + s) * rows8_super_bytes(FMT);
      for (int r = 0; r < 8; ++r) {
        const Block& blk = w[(g * 8 + r) * ns + s];
        std::memcpy(o + 2 * r, &blk.d, 2);
        std::memcpy(o + 16 + 2 * r, &blk.dmin, 2);
        for (int j = 0; j < 8; ++j) scale_min_k4(j, blk.scales, o + 32 + 8 * j + r, o + 96 + 8 * j + r);
        for (int p = 0; p < 4; ++p)
          for (int c = 0; c < 8; ++c) std::memcpy(o + kCodes + 256 * p + 32 * c + 4 * r, blk.qs + 32 * p + 4 * c, 4);
        if constexpr (FMT == Q5_K)
          for (int t = 0; t < 4; ++t) {  // weight 4 c + t of sub-block j: bit j of qh[4 c + t] to bit c
            uint64_t bits = 0;  // byte c: qh[4 c + t]
            for (int c = 0; c < 8; ++c) bits |= uint64_t(blk.qh[4 * c + t]) << (8 * c);
            bits = transpose_bits8(bits);  // byte j, bit c
            for (int j = 0; j < 8; ++j) o[kPlanes + 32 * j + 4 * r + t] = uint8_t(bits >> (8 * j));
          }
      }
    }
}
inline void repack_rows8(int32_t format, const void* src, int64_t N, int64_t K, void* dst) {
  if (format == Q4_K) return repack_q45_k_rows8<Q4_K>(src, N, K, dst);
  if (format == Q5_K) return repack_q45_k_rows8<Q5_K>(src, N, K, dst);
  if (format == Q6_K) return repack_q6_k_rows8(src, N, K, dst);
  const int64_t nb = K / 32, in_bytes = format_info(format)->block_bytes, gb = rows8_block_bytes(format);
  const int head = rows8_head_bytes(format);
  const auto* w = static_cast<const uint8_t*>(src);
  auto* out = static_cast<uint8_t*>(dst);
  // Block b of group g in the group layout, at o (gb bytes).
  auto group_block = [&](int64_t g, int64_t b, uint8_t* o) {
    for (int r = 0; r < 8; ++r) {
      const uint8_t* blk = w + ((g * 8 + r) * nb + b) * in_bytes;
      std::memcpy(o + 2 * r, blk, 2);  // d, the first field of every block
      if (format == Q8_0) {
        for (int j = 0; j < 8; ++j)
          for (int t = 0; t < 4; ++t) o[16 + 32 * j + 4 * r + t] = uint8_t(blk[2 + 4 * j + t] ^ 0x80);
        continue;
      }
      const int codes = rows8_codes_at(format);
      if (format == Q4_1 || format == Q5_1) std::memcpy(o + 16 + 2 * r, blk + 2, 2);  // m
      if (format == Q5_0 || format == Q5_1) {
        const uint32_t qh = q5_high_bits(blk + (format == Q5_1 ? offsetof(BlockQ5_1, qh) : offsetof(BlockQ5_0, qh)));
        for (int t = 0; t < 4; ++t) {
          uint8_t plane = 0;
          for (int j = 0; j < 4; ++j)
            plane = uint8_t(plane | ((qh >> (4 * j + t)) & 1u) << j | ((qh >> (16 + 4 * j + t)) & 1u) << (4 + j));
          o[rows8_plane_at(format) + 4 * r + t] = plane;
        }
      }
      const uint8_t* qs = blk + (format == Q4_1   ? offsetof(BlockQ4_1, qs)
                                 : format == Q5_0 ? offsetof(BlockQ5_0, qs)
                                 : format == Q5_1 ? offsetof(BlockQ5_1, qs)
                                                  : offsetof(BlockQ4_0, qs));
      for (int j = 0; j < 4; ++j) std::memcpy(o + codes + 32 * j + 4 * r, qs + 4 * j, 4);
    }
  };
  const int64_t groups = N / 8;
  uint8_t two[2][rows8_block_bytes(Q8_0)];  // the largest block
  for (int64_t g = 0; g < groups; g += 2) {
    if (g + 1 == groups) {  // the last group alone
      for (int64_t b = 0; b < nb; ++b) group_block(g, b, out + (g * nb + b) * gb);
      break;
    }
    for (int64_t b = 0; b < nb; ++b) {
      group_block(g, b, two[0]);
      group_block(g + 1, b, two[1]);
      uint8_t* o = out + g * nb * gb + 2 * b * gb;
      for (int x = 0; x < gb;) {
        const int size = x < head ? 16 : 32;
        std::memcpy(o + 2 * x, two[0] + x, size_t(size));
        std::memcpy(o + 2 * x + size, two[1] + x, size_t(size));
        x += size;
      }
    }
  }
}

// Reference quantisation of one row, bit-identical to ggml's
// quantize_row_*_ref. Supported formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_K,
// F16, BF16, F32 (f16/bf16 round to nearest even). False for the others.
bool quantize_row(int32_t format, const float* src, void* dst, int64_t k);
bool can_quantize(int32_t format);

}  // namespace quant
}  // namespace tc
