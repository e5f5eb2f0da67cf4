#pragma once
// Products of a weight matrix with one or several activation vectors, split across a thread pool:
// each weight row is read once whatever the number of vectors.
#include <cstdint>
#include <vector>

#include "kernels/cpu/quants.hpp"
#include "model/model.hpp"
#include "model/thread_pool.hpp"

namespace hotcold {

// y (n x w.ne1) = x (n x w.ne0) times w's rows. xq: scratch for the inputs quantized to Q8_0 (once
// per product, as llama.cpp does) when w's rows want it; grown as needed.
void matmul(thread_pool& pool, const tensor_view& w, const float* x, int64_t n, float* y, std::vector<kernels::block_q8_0>& xq);

}  // namespace hotcold
