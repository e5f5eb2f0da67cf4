#pragma once
// Dot products and AXPYs of weight rows with activation vectors, per weight type. Each has a scalar
// reference and, where the CPU has it, AVX2 and AVX-512 versions beside it in its kind's file, picked
// once per process into the one table (kernel_table.hpp); all give the same result up to float
// summation order.
#include <cstdint>

#include "kernels/cpu/kernel_table.hpp"
#include "kernels/cpu/quants.hpp"

namespace hotcold::kernels {




inline float dot_f32(const float* w, const float* x, int64_t n) { return cpu_kernels().dot_f32(w, x, n); }
inline float dot_f16(const uint16_t* w, const float* x, int64_t n) { return cpu_kernels().dot_f16(w, x, n); }
inline float dot_bf16(const uint16_t* w, const float* x, int64_t n) { return cpu_kernels().dot_bf16(w, x, n); }
// Quantized rows against activations already quantized to Q8_0 (as llama.cpp does).
inline float dot_q8_0(const block_q8_0* w, const block_q8_0* x, int64_t n) { return cpu_kernels().dot_q8_0(w, x, n); }
inline float dot_q4_0(const block_q4_0* w, const block_q8_0* x, int64_t n) { return cpu_kernels().dot_q4_0(w, x, n); }
// Q6_K rows against float activations, and against activations quantized to Q8_K (integer
// multiply-adds: the head's matrix-vector product).
inline float dot_q6_k(const block_q6_k* w, const float* x, int64_t n) { return cpu_kernels().dot_q6_k(w, x, n); }
inline float dot_q6_k_q8_k(const block_q6_k* w, const block_q8_k* x, int64_t n) { return cpu_kernels().dot_q6_k_q8_k(w, x, n); }
// One Q6_K row against four tokens' Q8_K (out[t]: token x[t]'s product, as dot_q6_k_q8_k gives it):
// the row unpacked once for the four (AVX-512 VNNI; elsewhere four one-token products).
inline void dot4t_q6_k_q8_k(const block_q6_k* w, const block_q8_k* const* x, int64_t n, float* out) { cpu_kernels().dot4t_q6_k_q8_k(w, x, n, out); }
// Q4_K and Q5_K rows (k_quants.cpp): against float activations (the sparse FFN's rows), y += a * row,
// and against activations quantized to Q8_K (integer multiply-adds: products of a few tokens, as
// llama.cpp computes them).
inline float dot_q4_k(const block_q4_k* w, const float* x, int64_t n) { return cpu_kernels().dot_q4_k(w, x, n); }
inline float dot_q5_k(const block_q5_k* w, const float* x, int64_t n) { return cpu_kernels().dot_q5_k(w, x, n); }
inline void axpy_q4_k(float a, const block_q4_k* x, float* y, int64_t n) { cpu_kernels().axpy_q4_k(a, x, y, n); }
inline void axpy_q5_k(float a, const block_q5_k* x, float* y, int64_t n) { cpu_kernels().axpy_q5_k(a, x, y, n); }
inline float dot_q4_k_q8_k(const block_q4_k* w, const block_q8_k* x, int64_t n) { return cpu_kernels().dot_q4_k_q8_k(w, x, n); }
inline float dot_q5_k_q8_k(const block_q5_k* w, const block_q8_k* x, int64_t n) { return cpu_kernels().dot_q5_k_q8_k(w, x, n); }
// Rows to floats, the values dequantize_row_q4_k / _q5_k give (vectorized where the CPU allows).
inline void to_float_q4_k(const block_q4_k* x, float* y, int64_t n) { cpu_kernels().to_float_q4_k(x, y, n); }
inline void to_float_q5_k(const block_q5_k* x, float* y, int64_t n) { cpu_kernels().to_float_q5_k(x, y, n); }

// y += a * row, for one weight row of each type (the sparse down projection over ffn_down_t rows).
inline void axpy_f32(float a, const float* x, float* y, int64_t n) { return cpu_kernels().axpy_f32(a, x, y, n); }
inline void axpy_f16(float a, const uint16_t* x, float* y, int64_t n) { return cpu_kernels().axpy_f16(a, x, y, n); }
inline void axpy_bf16(float a, const uint16_t* x, float* y, int64_t n) { return cpu_kernels().axpy_bf16(a, x, y, n); }
inline void axpy_q8_0(float a, const block_q8_0* x, float* y, int64_t n) { return cpu_kernels().axpy_q8_0(a, x, y, n); }
inline void axpy_q4_0(float a, const block_q4_0* x, float* y, int64_t n) { return cpu_kernels().axpy_q4_0(a, x, y, n); }
inline void axpy_q6_k(float a, const block_q6_k* x, float* y, int64_t n) { return cpu_kernels().axpy_q6_k(a, x, y, n); }
// y += a[0] x[0] + ... + a[3] x[3]: four rows at once, so y is loaded and stored once per four rows.
inline void axpy4_f32(const float* a, const float* const* x, float* y, int64_t n) { return cpu_kernels().axpy4_f32(a, x, y, n); }
inline void axpy4_f16(const float* a, const uint16_t* const* x, float* y, int64_t n) { return cpu_kernels().axpy4_f16(a, x, y, n); }
// axpy4_f16 (the same sums) while rows next[0..3] (n values each) are asked for at the offsets it reads.
inline void axpy4_f16_ahead(const float* a, const uint16_t* const* x, float* y, int64_t n, const uint16_t* const* next) { return cpu_kernels().axpy4_f16_ahead(a, x, y, n, next); }
inline void axpy4_bf16(const float* a, const uint16_t* const* x, float* y, int64_t n) { return cpu_kernels().axpy4_bf16(a, x, y, n); }
inline void axpy4_q8_0(const float* a, const block_q8_0* const* x, float* y, int64_t n) { return cpu_kernels().axpy4_q8_0(a, x, y, n); }
inline void axpy4_q4_0(const float* a, const block_q4_0* const* x, float* y, int64_t n) { return cpu_kernels().axpy4_q4_0(a, x, y, n); }
// The same sums while rows next[0..3] (rows of n values too; they may be x's) are asked for at the
// offsets read, each line once (AVX-512; elsewhere the next rows whole first).
inline void axpy4_q4_0_ahead(const float* a, const block_q4_0* const* x, float* y, int64_t n, const block_q4_0* const* next) { return cpu_kernels().axpy4_q4_0_ahead(a, x, y, n, next); }

// One row against up to four activation vectors at once (out[j] = w . x[j], 1 <= nx <= 4): the row is
// loaded and converted once for all of them (batches, several sequences).
inline void dotn_f32(const float* w, const float* const* x, int nx, int64_t n, float* out) { return cpu_kernels().dotn_f32(w, x, nx, n, out); }
inline void dotn_f16(const uint16_t* w, const float* const* x, int nx, int64_t n, float* out) { return cpu_kernels().dotn_f16(w, x, nx, n, out); }
inline void dotn_bf16(const uint16_t* w, const float* const* x, int nx, int64_t n, float* out) { return cpu_kernels().dotn_bf16(w, x, nx, n, out); }
// Two rows against up to four vectors (out0[j] = w0 . x[j], out1[j] = w1 . x[j]): twice the
// independent sums of dotn, and each vector load serves both rows (AVX-512 where the CPU has it).
inline void dot2n_f32(const float* w0, const float* w1, const float* const* x, int nx, int64_t n, float* out0, float* out1) { return cpu_kernels().dot2n_f32(w0, w1, x, nx, n, out0, out1); }
inline void dot2n_f16(const uint16_t* w0, const uint16_t* w1, const float* const* x, int nx, int64_t n, float* out0, float* out1) { return cpu_kernels().dot2n_f16(w0, w1, x, nx, n, out0, out1); }
inline void dot2n_bf16(const uint16_t* w0, const uint16_t* w1, const float* const* x, int nx, int64_t n, float* out0, float* out1) { return cpu_kernels().dot2n_bf16(w0, w1, x, nx, n, out0, out1); }
// dot2n_f16 against one vector (the same sums) while rows next0 and next1 are asked for into L1 at
// the offsets it reads: a sparse FFN's scattered rows (4 KiB each at n_embd 2048) then arrive one
// neuron ahead, spread through the reading of this one, rather than as a burst the miss buffers cannot
// hold. next0 and next1 must be rows of n values too (they may be w0 and w1).
inline void dot2_f16_ahead(const uint16_t* w0, const uint16_t* w1, const float* x, int64_t n, float* out0, float* out1, const uint16_t* next0, const uint16_t* next1) { return cpu_kernels().dot2_f16_ahead(w0, w1, x, n, out0, out1, next0, next1); }
// Four rows at once (two neurons' gate and up rows) against one vector, each row's sum exactly as
// dot2_f16_ahead makes it (so a neuron's value does not depend on which kernel read it), while rows
// next[0..3] are asked for at the offsets read: four streams from memory where dot2_f16_ahead has
// two. next[r] must be rows of n values too (they may be w[r]).
inline void dot4_f16_ahead(const uint16_t* const* w, const float* x, int64_t n, float* out, const uint16_t* const* next) { return cpu_kernels().dot4_f16_ahead(w, x, n, out, next); }
// Four rows w[0..3] against up to four vectors: out[4 r + j] = w[r] . x[j]. Per load, the most
// products of these kernels: what a batch's matrix products use.
inline void dot4n_f32(const float* const* w, const float* const* x, int nx, int64_t n, float* out) { return cpu_kernels().dot4n_f32(w, x, nx, n, out); }
inline void dot4n_f16(const uint16_t* const* w, const float* const* x, int nx, int64_t n, float* out) { return cpu_kernels().dot4n_f16(w, x, nx, n, out); }
inline void dot4n_bf16(const uint16_t* const* w, const float* const* x, int nx, int64_t n, float* out) { return cpu_kernels().dot4n_bf16(w, x, nx, n, out); }

// One quantized row against up to four vectors already quantized to Q8_0 (out[j] = w . x[j]): the row
// is unpacked once for all of them (AVX-512 VNNI; elsewhere one dot product per vector).
inline void dotn_q4_0(const block_q4_0* w, const block_q8_0* const* x, int nx, int64_t n, float* out) { return cpu_kernels().dotn_q4_0(w, x, nx, n, out); }
inline void dotn_q8_0(const block_q8_0* w, const block_q8_0* const* x, int nx, int64_t n, float* out) { return cpu_kernels().dotn_q8_0(w, x, nx, n, out); }
// Four Q4_0 rows against one vector already quantized to Q8_0 (out[r] = w[r] . x): the vector's side of
// the work done once for the four (a matrix-vector product; AVX-512 VNNI, elsewhere four dot products).
inline void dot4r_q4_0(const block_q4_0* const* w, const block_q8_0* x, int64_t n, float* out) { return cpu_kernels().dot4r_q4_0(w, x, n, out); }

// Sixteen interleaved Q4_0 rows (one group of block_q4_0x16, n elements a row) against up to four
// vectors already quantized to Q8_0, with each vector's block terms (q8_0_block_terms):
// out[16 j + i] = row i . x[j]. Each row byte is unpacked once for every vector.
inline void dot16r_q4_0(const block_q4_0x16* w, const block_q8_0* const* x, const q8_0_terms* const* xt, int nx, int64_t n, float* out) { cpu_kernels().dot16r_q4_0(w, x, xt, nx, n, out); }
// Two groups against one vector at once (two streams from memory): oa, ob as dot16r_q4_0's out.
inline void dot16r2_q4_0(const block_q4_0x16* wa, const block_q4_0x16* wb, const block_q8_0* x, const q8_0_terms* xt, int64_t n, float* oa, float* ob) { cpu_kernels().dot16r2_q4_0(wa, wb, x, xt, n, oa, ob); }
// The same two over the blocks listed only (blocks[0..count), block numbers of the rows and of the
// vectors alike, in the order given): out[16 j + i] = the sum over those blocks of row i's block .
// x[j]'s block. A sparse layer's down product skips so the blocks of 32 neurons none of which fired.
inline void dot16r_q4_0_at(const block_q4_0x16* w, const block_q8_0* const* x, const q8_0_terms* const* xt, int nx, const int32_t* blocks, int64_t count, float* out) {
  cpu_kernels().dot16r_q4_0_at(w, x, xt, nx, blocks, count, out);
}
inline void dot16r2_q4_0_at(const block_q4_0x16* wa, const block_q4_0x16* wb, const block_q8_0* x, const q8_0_terms* xt, const int32_t* blocks, int64_t count, float* oa,
                            float* ob) {
  cpu_kernels().dot16r2_q4_0_at(wa, wb, x, xt, blocks, count, oa, ob);
}
// Sixteen interleaved Q4_K rows (one group of block_q4_kx16, n elements a row, a multiple of 256)
// against up to four vectors already quantized to Q8_K, with each vector's group sums
// (q8_k_block_group_sums): out[16 j + i] = row i . x[j], as dot_q4_k_q8_k gives it.
inline void dot16r_q4_k(const block_q4_kx16* w, const block_q8_k* const* x, const q8_k_group_sums* const* xg, int nx, int64_t n, float* out) { cpu_kernels().dot16r_q4_k(w, x, xg, nx, n, out); }
// Two groups against one vector at once (two streams from memory): oa, ob as dot16r_q4_k's out.
inline void dot16r2_q4_k(const block_q4_kx16* wa, const block_q4_kx16* wb, const block_q8_k* x, const q8_k_group_sums* xg, int64_t n, float* oa, float* ob) { cpu_kernels().dot16r2_q4_k(wa, wb, x, xg, n, oa, ob); }
// The same for sixteen interleaved Q5_K rows (block_q5_kx16).
inline void dot16r_q5_k(const block_q5_kx16* w, const block_q8_k* const* x, const q8_k_group_sums* const* xg, int nx, int64_t n, float* out) { cpu_kernels().dot16r_q5_k(w, x, xg, nx, n, out); }
inline void dot16r2_q5_k(const block_q5_kx16* wa, const block_q5_kx16* wb, const block_q8_k* x, const q8_k_group_sums* xg, int64_t n, float* oa, float* ob) { cpu_kernels().dot16r2_q5_k(wa, wb, x, xg, n, oa, ob); }
// Sixteen interleaved Q6_K rows (block_q6_kx16) against up to four vectors already quantized to Q8_K:
// out[16 j + i] = row i . x[j], as dot_q6_k_q8_k gives it; and two groups against one vector at once.
inline void dot16r_q6_k(const block_q6_kx16* w, const block_q8_k* const* x, int nx, int64_t n, float* out) { cpu_kernels().dot16r_q6_k(w, x, nx, n, out); }
inline void dot16r2_q6_k(const block_q6_kx16* wa, const block_q6_kx16* wb, const block_q8_k* x, int64_t n, float* oa, float* ob) { cpu_kernels().dot16r2_q6_k(wa, wb, x, n, oa, ob); }

// dot4r_q4_0 with the vector also given rearranged (q8_0_to_x4; n a multiple of 128): four blocks of
// a row in one register through a byte permute, two multiply-adds per 128 values (AVX-512 VBMI and
// VNNI; elsewhere dot4r_q4_0 on xq).
inline void dot4r_q4_0_x4(const block_q4_0* const* w, const block_q8_0* xq, const q8_0_x4* x4, int64_t n, float* out) { return cpu_kernels().dot4r_q4_0_x4(w, xq, x4, n, out); }
// The same sums while rows next[0..3] (rows of n values too; they may be w's) are asked for at the
// offsets read, each line once: a sparse FFN's next four rows arrive spread through these.
inline void dot4r_q4_0_x4_ahead(const block_q4_0* const* w, const block_q8_0* xq, const q8_0_x4* x4, int64_t n, float* out, const block_q4_0* const* next) { return cpu_kernels().dot4r_q4_0_x4_ahead(w, xq, x4, n, out, next); }

// dotn_q4_0 with the vectors also given rearranged (q8_0_to_x4; n a multiple of 128): the row's four
// blocks unpacked once per 128 values for all nx <= 4 vectors, each vector's product as
// dot4r_q4_0_x4 gives it (AVX-512 VBMI and VNNI; elsewhere dotn_q4_0 on xq).
inline void dotn_q4_0_x4(const block_q4_0* w, const block_q8_0* const* xq, const q8_0_x4* const* x4, int nx, int64_t n, float* out) { cpu_kernels().dotn_q4_0_x4(w, xq, x4, nx, n, out); }

// Sixteen F16 rows interleaved (element k of row i at 16 k + i; the same bytes as the rows): short
// rows (the predictors' 256-wide second layer) read as one stream, sixteen rows per multiply-add.
void interleave_f16x16(const uint16_t* rows, int64_t n, uint16_t* out);  // rows: 16 rows of n, row i at rows + i n
void deinterleave_f16x16(const uint16_t* in, int64_t n, uint16_t* rows);
// One interleaved group against up to four vectors: out[16 j + i] = row i . x[j].
inline void dot16r_f16(const uint16_t* w, const float* const* x, int nx, int64_t n, float* out) { cpu_kernels().dot16r_f16(w, x, nx, n, out); }
// Two groups against one vector at once (two streams from memory): oa, ob as dot16r_f16's out, the
// same sums.
inline void dot16r2_f16(const uint16_t* wa, const uint16_t* wb, const float* x, int64_t n, float* oa, float* ob) { cpu_kernels().dot16r2_f16(wa, wb, x, n, oa, ob); }

// Which implementation the dispatcher picked for the quantized dot products: "avx512vnni", "avx2" or
// "scalar" (HOTCOLD_NO_AVX512=1 in the environment keeps AVX2).
const char* dot_implementation();

namespace scalar {
void axpy_q6_k(float a, const block_q6_k* x, float* y, int64_t n);
float dot_f32(const float* w, const float* x, int64_t n);
float dot_f16(const uint16_t* w, const float* x, int64_t n);
float dot_bf16(const uint16_t* w, const float* x, int64_t n);
float dot_q8_0(const block_q8_0* w, const block_q8_0* x, int64_t n);
float dot_q4_0(const block_q4_0* w, const block_q8_0* x, int64_t n);
void axpy_f32(float a, const float* x, float* y, int64_t n);
void axpy_f16(float a, const uint16_t* x, float* y, int64_t n);
void axpy_bf16(float a, const uint16_t* x, float* y, int64_t n);
float dot_q6_k(const block_q6_k* w, const float* x, int64_t n);
void axpy_q8_0(float a, const block_q8_0* x, float* y, int64_t n);
void axpy_q4_0(float a, const block_q4_0* x, float* y, int64_t n);
void dot16r_q4_0(const block_q4_0x16* w, const block_q8_0* const* x, const q8_0_terms* const* xt, int nx, int64_t n, float* out);
void dot16r_q4_0_at(const block_q4_0x16* w, const block_q8_0* const* x, const q8_0_terms* const* xt, int nx, const int32_t* blocks, int64_t count, float* out);
void dot16r_q4_k(const block_q4_kx16* w, const block_q8_k* const* x, const q8_k_group_sums* const* xg, int nx, int64_t n, float* out);
void dot16r_q5_k(const block_q5_kx16* w, const block_q8_k* const* x, const q8_k_group_sums* const* xg, int nx, int64_t n, float* out);
void dot16r_q6_k(const block_q6_kx16* w, const block_q8_k* const* x, int nx, int64_t n, float* out);
float dot_q6_k_q8_k(const block_q6_k* w, const block_q8_k* x, int64_t n);
float dot_q4_k(const block_q4_k* w, const float* x, int64_t n);
float dot_q5_k(const block_q5_k* w, const float* x, int64_t n);
void axpy_q4_k(float a, const block_q4_k* x, float* y, int64_t n);
void axpy_q5_k(float a, const block_q5_k* x, float* y, int64_t n);
float dot_q4_k_q8_k(const block_q4_k* w, const block_q8_k* x, int64_t n);
float dot_q5_k_q8_k(const block_q5_k* w, const block_q8_k* x, int64_t n);
void dot16r_f16(const uint16_t* w, const float* const* x, int nx, int64_t n, float* out);
}  // namespace scalar

}  // namespace hotcold::kernels
