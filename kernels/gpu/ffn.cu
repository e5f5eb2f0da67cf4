// The hot FFN's kernels (decode.hpp's hot_ffn, activate, add, rms_norm, weighted_sum): a hot neuron's gate and up rows by a
// 32-lane group, the down projection split across blocks and summed in order.
#include <algorithm>
#include <cmath>

#include "kernels/gpu/rows.cuh"

namespace hotcold::kernels::gpu {
namespace {

using namespace detail;

// One group of 32 lanes per hot neuron: its gate and up rows against x (interleaved), the activation.
template <row_type T>
__global__ void hot_hidden_kernel(const uint8_t* gate, const uint8_t* up, int64_t row_bytes, const int32_t* slots, int64_t count, int64_t d,
                                  const float* x, bool gated, activation act, float threshold, float* hidden) {
  const int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x / warp) + threadIdx.x / warp;
  if (k >= count) return;
  const int64_t row = slots[k];
  float g = 0.0f, u;
  if (!gated) u = warp_dot_row<T>(up + row * row_bytes, d, x);
  else warp_dot_pair<T>(gate + row * row_bytes, up + row * row_bytes, d, x, g, u);
  const float h = neuron_value(gated, act, threshold, g, u);
  if (threadIdx.x % warp == 0) hidden[k] = h;
}

// Quantized rows (Q8_0, Q4_0) against x rounded to 8 bits: the block quantizes the token's x into
// shared memory once, then each of its warps takes hot_q_per_warp neurons, gate and up dots by
// integer products a block of 32 per lane.
constexpr int hot_q_per_warp = 4;
template <row_type T>
__global__ void hot_hidden_q8_kernel(const uint8_t* gate, const uint8_t* up, int64_t row_bytes, const int32_t* slots, int64_t count, int64_t d,
                                     const float* x, bool gated, activation act, float threshold, float* hidden) {
  extern __shared__ char smem[];
  const x_q8 xq = quantize_x(x, d, 1, smem);
  const int lane = threadIdx.x % warp;
  const int64_t first = (blockIdx.x * static_cast<int64_t>(blockDim.x / warp) + threadIdx.x / warp) * hot_q_per_warp;
  for (int64_t k = first; k < first + hot_q_per_warp && k < count; ++k) {
    const int64_t row = slots[k];
    const uint8_t *g = gate + row * row_bytes, *u = up + row * row_bytes;
    float sg = 0.0f, su = 0.0f;
    for (int64_t b = lane; b < d / 32; b += warp) {
      su += block_dot_q8<T>(u, b, xq.d, xq.q);
      if (gated) sg += block_dot_q8<T>(g, b, xq.d, xq.q);
    }
    const float h = neuron_value(gated, act, threshold, warp_sum(sg), warp_sum(su));
    if (lane == 0) hidden[k] = h;
  }
}

// The down projection, split across blocks: block (x, y) sums the neurons of chunk y for the columns
// of tile x — neighbouring threads read neighbouring columns of one row (coalesced), neurons that did
// not fire are skipped — into its row of partial sums; down_sum then adds the chunks in order (the
// same sums every run, no atomics).
template <row_type T>
__global__ void hot_down_kernel(const uint8_t* down_t, int64_t row_bytes, const int32_t* slots, int64_t count, int64_t chunk, int64_t d,
                                const float* hidden, float* partial) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= d) return;
  const int64_t k0 = blockIdx.y * chunk, k1 = k0 + chunk < count ? k0 + chunk : count;
  float s = 0.0f;
  for (int64_t k = k0; k < k1; ++k) {
    const float h = hidden[k];
    if (h != 0.0f) s += h * element<T>(down_t + static_cast<int64_t>(slots[k]) * row_bytes, c);
  }
  partial[blockIdx.y * d + c] = s;
}

// The same sums read wider: the chunk's slots and values staged in shared memory once for the block,
// the neurons that did not fire skipped, four rows in flight. F16: a thread owns 8 columns, one 16-byte
// load a row (rows and d multiples of 8 halves, 16-byte aligned). Q8_0 / Q4_0: a thread owns one block
// of 32 columns, its scale read once a row and its quants in 2-byte loads (the blocks of 34 and 18 bytes
// are 2-byte aligned). Each column sums its neurons in the order the one-column kernel does.
struct staged_chunk {
  const int32_t* slot;
  const float* h;
  int64_t m;
};
__device__ inline staged_chunk stage_chunk(const int32_t* slots, const float* hidden, int64_t count, int64_t chunk, char* smem) {
  auto* s_slot = reinterpret_cast<int32_t*>(smem);
  auto* s_h = reinterpret_cast<float*>(smem + chunk * static_cast<int64_t>(sizeof(int32_t)));
  const int64_t k0 = blockIdx.y * chunk, k1 = k0 + chunk < count ? k0 + chunk : count, m = k1 > k0 ? k1 - k0 : 0;
  for (int64_t i = threadIdx.x; i < m; i += blockDim.x) s_slot[i] = slots[k0 + i], s_h[i] = hidden[k0 + i];
  __syncthreads();
  return {s_slot, s_h, m};
}

__global__ void hot_down_f16x8_kernel(const uint8_t* down_t, int64_t row_bytes, const int32_t* slots, int64_t count, int64_t chunk, int64_t d,
                                      const float* hidden, float* partial) {
  extern __shared__ char smem[];
  const staged_chunk c = stage_chunk(slots, hidden, count, chunk, smem);
  const int64_t col = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) * 8;
  if (col >= d) return;
  float acc[8] = {};
  constexpr int in_flight = 4;
  for (int64_t i = 0; i < c.m; i += in_flight) {
    uint4 w[in_flight];
    float h[in_flight];
#pragma unroll
    for (int j = 0; j < in_flight; ++j) {
      h[j] = i + j < c.m ? c.h[i + j] : 0.0f;
      w[j] = h[j] != 0.0f ? *reinterpret_cast<const uint4*>(down_t + static_cast<int64_t>(c.slot[i + j]) * row_bytes + col * 2) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int j = 0; j < in_flight; ++j) {
      if (h[j] == 0.0f) continue;
      const __half2* p = reinterpret_cast<const __half2*>(&w[j]);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float2 f = __half22float2(p[q]);
        acc[2 * q] += h[j] * f.x, acc[2 * q + 1] += h[j] * f.y;
      }
    }
  }
  float4* out = reinterpret_cast<float4*>(partial + blockIdx.y * d + col);
  out[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
  out[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
}

template <row_type T>
__global__ void hot_down_blocks_kernel(const uint8_t* down_t, int64_t row_bytes, const int32_t* slots, int64_t count, int64_t chunk, int64_t d,
                                       const float* hidden, float* partial) {
  extern __shared__ char smem[];
  const staged_chunk c = stage_chunk(slots, hidden, count, chunk, smem);
  const int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (b >= d / 32) return;
  constexpr int64_t block_bytes = T == row_type::q8_0 ? 34 : 18;
  float acc[32] = {};
  for (int64_t i = 0; i < c.m; ++i) {
    const float h = c.h[i];
    if (h == 0.0f) continue;
    const uint8_t* blk = down_t + static_cast<int64_t>(c.slot[i]) * row_bytes + b * block_bytes;
    const float scale = __half2float(*reinterpret_cast<const __half*>(blk));
    const auto* q2 = reinterpret_cast<const uint16_t*>(blk + 2);
    if constexpr (T == row_type::q8_0) {
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        const uint16_t two = q2[j];
        acc[2 * j] += h * (scale * static_cast<float>(static_cast<int8_t>(two & 0xFF)));
        acc[2 * j + 1] += h * (scale * static_cast<float>(static_cast<int8_t>(two >> 8)));
      }
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const uint16_t two = q2[j];
        const int lo0 = two & 0x0F, hi0 = (two >> 4) & 0x0F, lo1 = (two >> 8) & 0x0F, hi1 = (two >> 12) & 0x0F;
        acc[2 * j] += h * (scale * static_cast<float>(lo0 - 8));
        acc[2 * j + 1] += h * (scale * static_cast<float>(lo1 - 8));
        acc[2 * j + 16] += h * (scale * static_cast<float>(hi0 - 8));
        acc[2 * j + 17] += h * (scale * static_cast<float>(hi1 - 8));
      }
    }
  }
  float* out = partial + blockIdx.y * d + b * 32;
#pragma unroll
  for (int j = 0; j < 32; ++j) out[j] = acc[j];
}

__global__ void down_sum_kernel(const float* partial, int64_t chunks, int64_t d, float* out) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= d) return;
  float s = 0.0f;
  for (int64_t k = 0; k < chunks; ++k) s += partial[k * d + c];
  out[c] = s;
}

__global__ void activate_kernel(const float* gate, float* up, int64_t count, bool gated, activation act, float threshold) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= count) return;
  const float u = up[i];
  if (act == activation::drelu) {
    up[i] = fmaxf(gate[i], 0.0f) * fmaxf(u, 0.0f);
    return;
  }
  const float a = activate(act, gated ? gate[i] : u);
  up[i] = fabsf(a) < threshold ? 0.0f : gated ? a * u : a;
}

__global__ void add_kernel(const float* a, const float* b, int64_t count, float* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < count) out[i] = b ? a[i] + b[i] : a[i];
}

// One block a row: the sum of squares by the block's threads (each warp's, then the first warp's sum of
// them), the scale, the row scaled by it and the weights.
constexpr int norm_threads = 256;
__global__ void rms_norm_kernel(const float* x, const float* w, int64_t cols, float eps, float* out) {
  __shared__ float warps[norm_threads / warp];
  const float* row = x + blockIdx.x * cols;
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) s += row[i] * row[i];
  s = warp_sum(s);
  if (threadIdx.x % warp == 0) warps[threadIdx.x / warp] = s;
  __syncthreads();
  if (threadIdx.x < warp) {
    s = threadIdx.x < blockDim.x / warp ? warps[threadIdx.x] : 0.0f;
    s = warp_sum(s);
    if (threadIdx.x == 0) warps[0] = s;
  }
  __syncthreads();
  const float scale = rsqrtf(warps[0] / static_cast<float>(cols) + eps);
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) out[blockIdx.x * cols + i] = row[i] * scale * w[i];
}

__global__ void weighted_sum_kernel(const float* y, const float* w, int64_t rows, int64_t d, bool accumulate, float* out) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= d) return;
  float s = accumulate ? out[c] : 0.0f;
  for (int64_t r = 0; r < rows; ++r) s += w[r] * y[r * d + c];
  out[c] = s;
}

}  // namespace

std::string weighted_sum(const float* y, const float* w, int64_t rows, int64_t d, bool accumulate, float* out, void* stream) {
  if (d <= 0) return {};
  constexpr int threads = 256;
  weighted_sum_kernel<<<static_cast<unsigned>((d + threads - 1) / threads), threads, 0, as_stream(stream)>>>(y, w, rows, d, accumulate, out);
  return launched();
}

std::string rms_norm(const float* x, const float* w, int64_t rows, int64_t cols, float eps, float* out, void* stream) {
  if (rows <= 0 || cols <= 0) return {};
  rms_norm_kernel<<<static_cast<unsigned>(rows), norm_threads, 0, as_stream(stream)>>>(x, w, cols, eps, out);
  return launched();
}

int64_t hot_ffn_scratch(int64_t d) { return hot_ffn_max_chunks * d; }

std::string hot_ffn(row_type t, const void* gate, const void* up, const void* down_t, const int32_t* slots, int64_t count, int64_t d, const float* x,
                    bool gated, activation act, float threshold, float* hidden, float* out, float* scratch, void* stream) {
  if (t == row_type::q6_k) return "hot_ffn: FFN rows of F16, Q8_0 or Q4_0";
  if (t != row_type::f16 && d % 32 != 0) return "hot_ffn: quantized rows need a multiple of 32 values";
  constexpr int threads = 256, per_block = threads / warp;
  const int64_t rb = row_bytes(t, d);
  const auto* g = static_cast<const uint8_t*>(gate);
  const auto* u = static_cast<const uint8_t*>(up);
  const auto* dn = static_cast<const uint8_t*>(down_t);
  if (count > 0 && reads_x_in_8_bits(t, d)) {  // x rounded to 8 bits, integer products
    constexpr int neurons = per_block * hot_q_per_warp;
    const auto blocks = static_cast<unsigned>((count + neurons - 1) / neurons);
    const auto smem = static_cast<size_t>(x_q8_bytes(1, d));
    if (t == row_type::q8_0)
      hot_hidden_q8_kernel<row_type::q8_0><<<blocks, threads, smem, as_stream(stream)>>>(g, u, rb, slots, count, d, x, gated, act, threshold, hidden);
    else
      hot_hidden_q8_kernel<row_type::q4_0><<<blocks, threads, smem, as_stream(stream)>>>(g, u, rb, slots, count, d, x, gated, act, threshold, hidden);
    if (auto e = launched(); !e.empty()) return e;
  } else if (count > 0) {
    const auto blocks = static_cast<unsigned>((count + per_block - 1) / per_block);
    switch (t) {
      case row_type::f16: hot_hidden_kernel<row_type::f16><<<blocks, threads, 0, as_stream(stream)>>>(g, u, rb, slots, count, d, x, gated, act, threshold, hidden); break;
      case row_type::q8_0: hot_hidden_kernel<row_type::q8_0><<<blocks, threads, 0, as_stream(stream)>>>(g, u, rb, slots, count, d, x, gated, act, threshold, hidden); break;
      default: hot_hidden_kernel<row_type::q4_0><<<blocks, threads, 0, as_stream(stream)>>>(g, u, rb, slots, count, d, x, gated, act, threshold, hidden); break;
    }
    if (auto e = launched(); !e.empty()) return e;
  }
  // Chunks of at least 32 neurons, at most hot_ffn_max_chunks of them.
  const int64_t chunks = count == 0 ? 1 : std::min<int64_t>(hot_ffn_max_chunks, (count + 31) / 32);
  const int64_t chunk = count == 0 ? 0 : (count + chunks - 1) / chunks;
  // Wide reads where the rows allow (hot_down_f16x8_kernel, hot_down_blocks_kernel), else a column a thread.
  const auto staged = static_cast<size_t>(chunk > 0 ? chunk : 1) * (sizeof(int32_t) + sizeof(float));
  const bool f16_wide = t == row_type::f16 && d % 8 == 0 && rb % 16 == 0 && aligned16(dn) && aligned16(scratch);
  if (f16_wide) {
    const dim3 grid(static_cast<unsigned>((d / 8 + threads - 1) / threads), static_cast<unsigned>(chunks));
    hot_down_f16x8_kernel<<<grid, threads, staged, as_stream(stream)>>>(dn, rb, slots, count, chunk, d, hidden, scratch);
  } else if (t != row_type::f16 && (reinterpret_cast<uintptr_t>(dn) & 1) == 0) {  // (d a multiple of 32: checked above)
    constexpr int block_threads = 64;
    const dim3 grid(static_cast<unsigned>((d / 32 + block_threads - 1) / block_threads), static_cast<unsigned>(chunks));
    if (t == row_type::q8_0)
      hot_down_blocks_kernel<row_type::q8_0><<<grid, block_threads, staged, as_stream(stream)>>>(dn, rb, slots, count, chunk, d, hidden, scratch);
    else
      hot_down_blocks_kernel<row_type::q4_0><<<grid, block_threads, staged, as_stream(stream)>>>(dn, rb, slots, count, chunk, d, hidden, scratch);
  } else {
    const dim3 grid(static_cast<unsigned>((d + threads - 1) / threads), static_cast<unsigned>(chunks));
    switch (t) {
      case row_type::f16: hot_down_kernel<row_type::f16><<<grid, threads, 0, as_stream(stream)>>>(dn, rb, slots, count, chunk, d, hidden, scratch); break;
      case row_type::q8_0: hot_down_kernel<row_type::q8_0><<<grid, threads, 0, as_stream(stream)>>>(dn, rb, slots, count, chunk, d, hidden, scratch); break;
      default: hot_down_kernel<row_type::q4_0><<<grid, threads, 0, as_stream(stream)>>>(dn, rb, slots, count, chunk, d, hidden, scratch); break;
    }
  }
  if (auto e = launched(); !e.empty()) return e;
  down_sum_kernel<<<static_cast<unsigned>((d + threads - 1) / threads), threads, 0, as_stream(stream)>>>(scratch, chunks, d, out);
  return launched();
}

std::string add(const float* a, const float* b, int64_t count, float* out, void* stream) {
  if (count <= 0) return {};
  constexpr int threads = 256;
  add_kernel<<<static_cast<unsigned>((count + threads - 1) / threads), threads, 0, as_stream(stream)>>>(a, b, count, out);
  return launched();
}

std::string activate(float* gate, float* up, int64_t count, bool gated, activation act, float threshold, void* stream) {
  if (count <= 0) return {};
  constexpr int threads = 256;
  activate_kernel<<<static_cast<unsigned>((count + threads - 1) / threads), threads, 0, as_stream(stream)>>>(gate, up, count, gated, act, threshold);
  return launched();
}

}  // namespace hotcold::kernels::gpu
