#pragma once
// Products of a weight matrix with one or several activation vectors, split across a thread pool:
// each weight row is read once whatever the number of vectors.
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cpu/quants.hpp"
#include "model/model.hpp"
#include "engine/thread_pool.hpp"

namespace hotcold {

// y (n x w.ne1) = x (n x w.ne0) times w's rows. xq: scratch for the inputs quantized to Q8_0 (once
// per product, as llama.cpp does) when w's rows want it; grown as needed.
void matmul(thread_pool& pool, const tensor_view& w, const float* x, int64_t n, float* y, std::vector<kernels::block_q8_0>& xq);
// ys[m] = x times ws[m]'s rows, for matrices sharing their input (attention's q, k, v): where all are
// interleaved Q4_0, one pass over all of them with the input quantized once (one split across the
// threads instead of one per matrix).
void matmul_same_input(thread_pool& pool, std::span<const tensor_view* const> ws, const float* x, int64_t n, std::span<float* const> ys,
                       std::vector<kernels::block_q8_0>& xq);

// out (n x rows.ne0) = h (n x rows.ne1) times the matrix whose rows are rows' rows (down_t: each row a
// neuron's contribution), as register tiles of twelve tokens by 32 columns of rows, for batches whose
// neurons mostly fired (a thresholded SwiGLU layer keeps about half; ReLU layers fire few, and add
// their rows neuron by neuron). The rows' columns are converted 32 at a time into cache (F32, F16,
// BF16, Q8_0, Q4_0 rows; h as it is, as the row kernels' float sums take it). False, nothing
// written, where the rows or the CPU cannot (other types, a width not a multiple of 32, no AVX-512).
bool transposed_product(thread_pool& pool, const tensor_view& rows, const float* h, int64_t n, float* out);
bool transposed_product_reads(const tensor_view& rows);  // whether transposed_product can

}  // namespace hotcold
