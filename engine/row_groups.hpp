#pragma once
// The products of matrices read as groups of sixteen interleaved rows — Q4_0, Q4_K, Q5_K, Q6_K and
// F16: model::load's layout (kernels::interleave_rows16), or plain rows interleaved a group at a time
// into a thread's buffer —, against one token or several. engine/matmul.cpp decides which product
// takes a matrix; these are its sixteen-row ones.
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cpu/quants.hpp"
#include "model/model.hpp"
#include "engine/thread_pool.hpp"

namespace hotcold {

// Tokens a prompt's products take at a time, so their inputs stay in cache while a thread walks its rows.
inline constexpr int64_t token_tile = 32;
// Prompt batches against float rows (F16, F32) from this many tokens: register tiles of 12 rows x 32
// tokens (gemm_tile) instead of four rows by four tokens with horizontal sums.
inline constexpr int64_t gemm_min_tokens = 16;

// Q4_0 matrices: whether the sixteen-row kernels take w with n tokens, and ys[m] = x times ws[m]'s rows
// for matrices of the same input (xq: scratch for the tokens quantized to Q8_0).
bool sixteen_row_groups(const tensor_view& w, int64_t n);
void interleaved_products(thread_pool& pool, std::span<const tensor_view* const> ws, const float* x, int64_t n, std::span<float* const> ys,
                          std::vector<kernels::block_q8_0>& xq);
// A sparse layer's down product over ffn_down (prepare --down-layout blocks) for up to four tokens:
// y = x times w's rows, each token's hidden values x rounded to Q8_0 a block of 32 neurons (as every
// Q4_0 product rounds its input), and the blocks where no token has a non-zero value left out — the
// same sums, bit for bit: such a block adds exactly zero. With no block to skip, the usual kernels over
// the input quantized once here (what matmul gives). Returns the blocks read, or -1 with nothing
// written where w is not an interleaved Q4_0 matrix of whole groups or n is over four (matmul then).
int64_t zero_block_skipping_products(thread_pool& pool, const tensor_view& w, const float* x, int64_t n, float* y, std::vector<kernels::block_q8_0>& xq);
// One token through several matrices of one type and shape, each with its own input (a token's
// experts' down products): ys[m] = ws[m]'s rows . xs[m], in one split across the threads. False,
// nothing written, where the matrices are neither interleaved Q4_0 of an even number of whole groups
// nor K-quant rows in plain order (the caller then runs one product each).
bool one_token_own_inputs(thread_pool& pool, std::span<const tensor_view> ws, std::span<const float* const> xs, std::span<float* const> ys);
// Q4_K, Q5_K, Q6_K matrices (all of one type): likewise.
bool k_quant_row_groups(const tensor_view& w, int64_t n);
void k_quant_group_products(thread_pool& pool, std::span<const tensor_view* const> ws, const float* x, int64_t n, std::span<float* const> ys);
// An interleaved F16 matrix: y = x times w's rows.
void interleaved_f16_products(thread_pool& pool, const tensor_view& w, const float* x, int64_t n, float* y);
// One K-quant row (Q4_K, Q5_K, Q6_K) against one token quantized to Q8_K.
float dot_k_quant_q8_k(tensor_type t, const void* row, const kernels::block_q8_k* x, int64_t d);

}  // namespace hotcold
