// Matrix products over the file's row types (decode.hpp's matvec, matmul, predictor): up to four
// tokens a row, x rounded to 8 bits where the rows read it so.
#include <algorithm>
#include <cmath>

#include "kernels/gpu/rows.cuh"

namespace hotcold::kernels::gpu {
namespace {

using namespace detail;

__global__ void relu_kernel(float* v, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) v[i] = fmaxf(v[i], 0.0f);
}

__global__ void threshold_kernel(const float* scores, int64_t n, float threshold, bool on_act, activation act, uint8_t* chosen) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) chosen[i] = (on_act ? fabsf(activate(act, scores[i])) : scores[i]) >= threshold ? 1 : 0;
}

template <row_type T>
__global__ void matmul_kernel(const uint8_t* w, int64_t row_bytes, int64_t rows, int64_t cols, const float* x, int64_t n, float* y, int64_t ldy) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x / warp) + threadIdx.x / warp;
  if (r >= rows) return;
  for (int64_t t0 = 0; t0 < n; t0 += 4) {
    const int nt = n - t0 < 4 ? static_cast<int>(n - t0) : 4;
    float s[4];
    warp_dot_rows4<T>(w + r * row_bytes, cols, x + t0 * cols, nt, s);
    if (threadIdx.x % warp == 0)
      for (int j = 0; j < nt; ++j) y[(t0 + j) * ldy + r] = s[j];
  }
}

// Quantized rows (Q8_0, Q4_0) against vectors rounded to 8 bits: nv vectors at a time quantized into
// the block's shared memory, then each warp takes matmul_q_per_warp rows, a block of 32 per lane by
// integer products, each row's weights read once for the nv vectors.
constexpr int matmul_q_per_warp = 4;
template <row_type T>
__global__ void matmul_q8_kernel(const uint8_t* w, int64_t row_bytes, int64_t rows, int64_t cols, const float* x, int64_t n, int nv, float* y, int64_t ldy) {
  extern __shared__ char smem[];
  const int lane = threadIdx.x % warp;
  const int64_t first = (blockIdx.x * static_cast<int64_t>(blockDim.x / warp) + threadIdx.x / warp) * matmul_q_per_warp;
  for (int64_t t0 = 0; t0 < n; t0 += nv) {
    const int nt = n - t0 < nv ? static_cast<int>(n - t0) : nv;
    if (t0 > 0) __syncthreads();  // (every warp is done with the previous vectors)
    const x_q8 xq = quantize_x(x + t0 * cols, cols, nt, smem);
    for (int64_t r = first; r < first + matmul_q_per_warp && r < rows; ++r) {
      const uint8_t* row = w + r * row_bytes;
      float a[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      for (int64_t b = lane; b < cols / 32; b += warp)
        for (int j = 0; j < 4; ++j)
          if (j < nt) a[j] += block_dot_q8<T>(row, b, xq.d + j * (cols / 32), xq.q + j * (cols / 32) * x_q8_block_stride);
      for (int j = 0; j < 4; ++j)
        if (j < nt) {
          const float sum = warp_sum(a[j]);
          if (lane == 0) y[(t0 + j) * ldy + r] = sum;
        }
    }
  }
}

}  // namespace

std::string matvec(row_type t, const void* w, int64_t rows, int64_t cols, const float* x, float* y, void* stream) {
  return matmul(t, w, rows, cols, x, 1, y, rows, stream);
}

std::string predictor(row_type t, const void* fc1, const void* fc2, int64_t d, int64_t rank, int64_t n_ff, const float* x, int64_t n, float threshold,
                      float* scratch, float* scores, uint8_t* chosen, void* stream, bool on_act, activation act) {
  if (n <= 0) return {};
  auto product = [&](const void* w, int64_t rows, int64_t cols, const float* in, float* out) {
    return n == 1 ? matvec(t, w, rows, cols, in, out, stream) : matmul(t, w, rows, cols, in, n, out, rows, stream);
  };
  if (auto e = product(fc1, rank, d, x, scratch); !e.empty()) return e;
  constexpr int threads = 256;
  relu_kernel<<<static_cast<unsigned>((n * rank + threads - 1) / threads), threads, 0, as_stream(stream)>>>(scratch, n * rank);
  if (auto e = launched(); !e.empty()) return e;
  if (auto e = product(fc2, n_ff, rank, scratch, scores); !e.empty()) return e;
  threshold_kernel<<<static_cast<unsigned>((n * n_ff + threads - 1) / threads), threads, 0, as_stream(stream)>>>(scores, n * n_ff, threshold, on_act, act, chosen);
  return launched();
}

std::string matmul(row_type t, const void* w, int64_t rows, int64_t cols, const float* x, int64_t n, float* y, int64_t ldy, void* stream) {
  if (rows <= 0 || n <= 0) return {};
  if (t != row_type::f16 && cols % 32 != 0) return "matmul: quantized rows need a multiple of 32 values";
  if (t == row_type::q6_k && cols % 256 != 0) return "matmul: Q6_K rows need a multiple of 256 values";
  constexpr int threads = 256, per_block = threads / warp;
  const auto* wb = static_cast<const uint8_t*>(w);
  const int64_t rb = row_bytes(t, cols);
  if (reads_x_in_8_bits(t, cols)) {  // x rounded to 8 bits, integer products
    const int nv = static_cast<int>(std::min<int64_t>({4, n, x_q8_max_bytes / x_q8_bytes(1, cols)}));
    constexpr int rows_per_block = per_block * matmul_q_per_warp;
    const auto qblocks = static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block);
    const auto smem = static_cast<size_t>(x_q8_bytes(nv, cols));
    if (t == row_type::q8_0) matmul_q8_kernel<row_type::q8_0><<<qblocks, threads, smem, as_stream(stream)>>>(wb, rb, rows, cols, x, n, nv, y, ldy);
    else matmul_q8_kernel<row_type::q4_0><<<qblocks, threads, smem, as_stream(stream)>>>(wb, rb, rows, cols, x, n, nv, y, ldy);
    return launched();
  }
  const auto blocks = static_cast<unsigned>((rows + per_block - 1) / per_block);
  switch (t) {
    case row_type::f16: matmul_kernel<row_type::f16><<<blocks, threads, 0, as_stream(stream)>>>(wb, rb, rows, cols, x, n, y, ldy); break;
    case row_type::q8_0: matmul_kernel<row_type::q8_0><<<blocks, threads, 0, as_stream(stream)>>>(wb, rb, rows, cols, x, n, y, ldy); break;
    case row_type::q6_k: matmul_kernel<row_type::q6_k><<<blocks, threads, 0, as_stream(stream)>>>(wb, rb, rows, cols, x, n, y, ldy); break;
    default: matmul_kernel<row_type::q4_0><<<blocks, threads, 0, as_stream(stream)>>>(wb, rb, rows, cols, x, n, y, ldy); break;
  }
  return launched();
}

}  // namespace hotcold::kernels::gpu
