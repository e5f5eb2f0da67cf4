#pragma once
// GGUF block formats hotcold computes with, bit-exact with the file layout, and their reference
// (scalar) quantize / dequantize. Shapes: n is a multiple of the block size.
#include <cstdint>

namespace hotcold::kernels {

constexpr int64_t qk8_0 = 32;
constexpr int64_t qk4_0 = 32;
constexpr int64_t qk_k = 256;

// Q8_0: x[i] = d * qs[i]
struct block_q8_0 {
  uint16_t d;  // f16 scale
  int8_t qs[qk8_0];
};
// Q4_0: x[j] = d * ((qs[j] & 15) - 8), x[j + 16] = d * ((qs[j] >> 4) - 8)
struct block_q4_0 {
  uint16_t d;
  uint8_t qs[qk4_0 / 2];
};
// Q6_K: 256 values in 16 groups of 16, 6-bit quants (low 4 bits in ql, high 2 in qh) minus 32,
// times an int8 group scale, times the f16 super-block scale d.
struct block_q6_k {
  uint8_t ql[qk_k / 2];
  uint8_t qh[qk_k / 4];
  int8_t scales[qk_k / 16];
  uint16_t d;
};
// Q4_K and Q5_K: 256 values in 8 groups of 32; value = d * sc[g] * q - dmin * m[g], q of 4 bits
// (Q5_K: a fifth, high bit in qh), the groups' 6-bit scales sc and mins m packed into 12 bytes
// (k_quant_scale_min). qs[32 c + l] holds group 2c's value l in its low nibble and group 2c + 1's in
// its high one; Q5_K's qh[l] bit g is group g's value l's high bit.
struct block_q4_k {
  uint16_t d;     // f16 scale of the group scales
  uint16_t dmin;  // f16 scale of the group mins
  uint8_t scales[12];
  uint8_t qs[qk_k / 2];
};
struct block_q5_k {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[qk_k / 8];
  uint8_t qs[qk_k / 2];
};
// Group g's (0..7) scale and min from the 12 packed bytes: groups 0..3 in the low 6 bits of bytes
// g and g + 4; groups 4..7 in byte g + 4's nibbles, their top two bits in the top bits of bytes g - 4
// and g.
inline void k_quant_scale_min(const uint8_t* s, int g, uint8_t& sc, uint8_t& m) {
  if (g < 4) {
    sc = s[g] & 63;
    m = s[g + 4] & 63;
  } else {
    sc = static_cast<uint8_t>((s[g + 4] & 0xF) | ((s[g - 4] >> 6) << 4));
    m = static_cast<uint8_t>((s[g + 4] >> 4) | ((s[g] >> 6) << 4));
  }
}
// Q8_K: activations for Q6_K rows (as llama.cpp quantizes them): 256 values x[i] = d * qs[i] and
// the sums of each 16 quants (what Q6_K's offset of 32 costs a dot product).
struct block_q8_k {
  float d;
  int8_t qs[qk_k];
  int16_t bsums[qk_k / 16];
};
// Sixteen Q4_0 rows interleaved, the layout the dense products of Q4_0 matrices read (decode reads
// each row's bytes once, and one 512-bit multiply-add serves all sixteen rows): block b of a group is
// the sixteen rows' scales, then four chunks of 64 bytes, chunk g holding each row's quant bytes
// qs[4 g .. 4 g + 3] side by side (row i at byte 4 i). The same bytes as the sixteen rows' blocks.
struct block_q4_0x16 {
  uint16_t d[16];
  uint8_t qs[16 * qk4_0 / 2];
};
// Sixteen Q4_K rows interleaved, the layout the dense products of Q4_K matrices read (a Q4_K_M
// file's attention and FFN): the same 2304 bytes as the rows' sixteen blocks. d and dmin: the rows'
// f16 scales; scales[w][i]: the 32-bit word w of row i's 12 packed scale bytes (so one 512-bit load
// holds word w of every row, and the 6-bit scales and mins are unpacked for all sixteen at once);
// qs[512 c + 64 s + 4 i + k] = row i's qs[32 c + 4 s + k] (c < 4, s < 8, k < 4): the low nibbles
// of a 64-byte step are four values of group 2c of every row, the high nibbles those of group 2c + 1.
struct block_q4_kx16 {
  uint16_t d[16];
  uint16_t dmin[16];
  uint32_t scales[3][16];
  uint8_t qs[16 * qk_k / 2];
};
// Sixteen Q5_K rows the same way, their high bits between the scales and the quants (the same 2816
// bytes as the rows' blocks): qh[64 t + 4 i + k] = row i's qh[4 t + k] (t < 8, k < 4), whose bit g is
// the high bit of group g's value 4 t + k.
struct block_q5_kx16 {
  uint16_t d[16];
  uint16_t dmin[16];
  uint32_t scales[3][16];
  uint8_t qh[16 * qk_k / 8];
  uint8_t qs[16 * qk_k / 2];
};
// Sixteen Q6_K rows interleaved (the head of most quantized files, a Q4_K_M file's attn_v and some
// ffn_down): the same 3360 bytes as the rows' sixteen blocks. scales[s][i]: row i's scale of its 16
// values s (16 s .. 16 s + 15); then per step (8 h + t: half h < 2, t < 8) 192 bytes, in the order the
// kernels read them (a block is one sequential stream): qs[192 (8 h + t) + 64 c + 4 i + k] = row i's
// ql[64 h + 32 c + 4 t + k] (c < 2, k < 4) and qs[192 (8 h + t) + 128 + 4 i + k] = row i's
// qh[32 h + 4 t + k]. The low nibbles of part c hold quarter c of half h (values 128 h + 32 c + 4 t +
// k), its high nibbles quarter c + 2, and qh's bit pairs 2q, 2q + 1 the high bits of quarter q.
struct block_q6_kx16 {
  uint16_t d[16];
  int8_t scales[16][16];
  uint8_t qs[16 * (qk_k / 2 + qk_k / 4)];
};
// A Q8_0 vector rearranged for single Q4_0 rows (dot4r_q4_0_x4): per four blocks, the 64 bytes that
// meet the rows' low nibbles (block j's values 0..15 at 16 j), the 64 that meet the high ones (values
// 16..31), and per 32-bit lane k of those (block k / 4) 8 x the sum of the eight values it meets and
// its block's scale.
struct alignas(64) q8_0_x4 {
  int8_t lo[64];
  int8_t hi[64];
  int32_t offset[16];
  float d[16];
};
static_assert(sizeof(block_q8_0) == 34);
static_assert(sizeof(block_q4_0x16) == 16 * 18);
static_assert(sizeof(block_q4_0) == 18);
static_assert(sizeof(block_q6_k) == 210);
static_assert(sizeof(block_q4_k) == 144);
static_assert(sizeof(block_q5_k) == 176);
static_assert(sizeof(block_q4_kx16) == 16 * sizeof(block_q4_k));
static_assert(sizeof(block_q6_kx16) == 16 * sizeof(block_q6_k));
static_assert(sizeof(block_q5_kx16) == 16 * sizeof(block_q5_k));

void quantize_row_q8_0(const float* x, block_q8_0* y, int64_t n);
void quantize_row_q4_0(const float* x, block_q4_0* y, int64_t n);
void quantize_row_q6_k(const float* x, block_q6_k* y, int64_t n);
void quantize_row_q4_k(const float* x, block_q4_k* y, int64_t n);
void quantize_row_q5_k(const float* x, block_q5_k* y, int64_t n);
void quantize_row_q8_k(const float* x, block_q8_k* y, int64_t n);
// x (n values, a multiple of 256) as Q8_K leaves it: quantized and back, in place. A K-quant row's
// float dot product with the result is its integer one with the Q8_K blocks, up to summation order.
void round_to_q8_k(float* x, int64_t n);

// rows: sixteen rows of row_blocks blocks each, row i at rows + i * row_blocks; out: row_blocks
// interleaved blocks. And back.
void interleave_q4_0x16(const block_q4_0* rows, int64_t row_blocks, block_q4_0x16* out);
void deinterleave_q4_0x16(const block_q4_0x16* in, int64_t row_blocks, block_q4_0* rows);
// The same for sixteen Q4_K rows (row i at rows + i * row_blocks).
void interleave_q4_kx16(const block_q4_k* rows, int64_t row_blocks, block_q4_kx16* out);
void deinterleave_q4_kx16(const block_q4_kx16* in, int64_t row_blocks, block_q4_k* rows);
void interleave_q5_kx16(const block_q5_k* rows, int64_t row_blocks, block_q5_kx16* out);
void deinterleave_q5_kx16(const block_q5_kx16* in, int64_t row_blocks, block_q5_k* rows);
void interleave_q6_kx16(const block_q6_k* rows, int64_t row_blocks, block_q6_kx16* out);
void deinterleave_q6_kx16(const block_q6_kx16* in, int64_t row_blocks, block_q6_k* rows);
// Per block of a Q8_K vector, what the interleaved Q4_K kernels take besides its quants: the sums of
// its eight groups of 32 quants in pairs, pair[p] = group 2p's sum in the low 16 bits and group
// 2p + 1's in the high 16 (each at most 32 x 128 in magnitude), to meet the rows' mins.
struct q8_k_group_sums {
  uint32_t pair[4];
};
void q8_k_block_group_sums(const block_q8_k* x, int64_t nb, q8_k_group_sums* out);
// nb: a multiple of 4.
void q8_0_to_x4(const block_q8_0* x, int64_t nb, q8_0_x4* out);
// Per block of a Q8_0 vector, what the interleaved Q4_0 kernels take besides its quants, worked out
// once per vector instead of once per group of rows: the block's scale as a float, and -8 x the sum of
// its 32 quants (what Q4_0's offset of 8 costs a dot product).
struct q8_0_terms {
  float d;
  int32_t offset;
};
void q8_0_block_terms(const block_q8_0* x, int64_t nb, q8_0_terms* out);

namespace scalar {
void quantize_row_q8_0(const float* x, block_q8_0* y, int64_t n);  // the reference the vector code matches byte for byte
void quantize_row_q8_k(const float* x, block_q8_k* y, int64_t n);  // likewise
}

void dequantize_row_q8_0(const block_q8_0* x, float* y, int64_t n);
void dequantize_row_q4_0(const block_q4_0* x, float* y, int64_t n);
void dequantize_row_q6_k(const block_q6_k* x, float* y, int64_t n);
void dequantize_row_q4_k(const block_q4_k* x, float* y, int64_t n);
void dequantize_row_q5_k(const block_q5_k* x, float* y, int64_t n);

}  // namespace hotcold::kernels
