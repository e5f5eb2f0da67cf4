#include "kernels/gpu/decode.hpp"
#include "kernels/gpu/portability.hpp"

#include <algorithm>
#include <cmath>

namespace hotcold::kernels::gpu {
namespace {

constexpr int warp = 32;

__device__ inline float warp_sum(float v) {
  for (int o = warp / 2; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}

// Row r of an F16 matrix (cols, even or odd) times x, by one warp: two halves per load where the
// row is aligned to them, then the odd tail.
__device__ inline float warp_dot_f16(const __half* row, int64_t cols, const float* x) {
  float s = 0.0f;
  const int lane = threadIdx.x % warp;
  const int64_t pairs = cols / 2;
  const __half2* r2 = reinterpret_cast<const __half2*>(row);
  if ((reinterpret_cast<uintptr_t>(row) & 3) == 0) {
    for (int64_t i = lane; i < pairs; i += warp) {
      const float2 w = __half22float2(r2[i]);
      s += w.x * x[2 * i] + w.y * x[2 * i + 1];
    }
    if (cols % 2 && lane == 0) s += __half2float(row[cols - 1]) * x[cols - 1];
  } else {
    for (int64_t i = lane; i < cols; i += warp) s += __half2float(row[i]) * x[i];
  }
  return warp_sum(s);
}

__global__ void matvec_f16_kernel(const __half* w, int64_t rows, int64_t cols, const float* x, float* y) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x / warp) + threadIdx.x / warp;
  if (r >= rows) return;
  const float s = warp_dot_f16(w + r * cols, cols, x);
  if (threadIdx.x % warp == 0) y[r] = s;
}

__device__ inline float activate(ffn_act act, float v) {
  switch (act) {
    case ffn_act::silu: return v / (1.0f + expf(-v));
    case ffn_act::gelu: return 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
    default: return v > 0.0f ? v : 0.0f;
  }
}

// Rows in the file's own types: F16, Q8_0 (blocks of 32: an F16 scale, 32 int8) and Q4_0 (blocks of
// 32: an F16 scale, 16 bytes; element j < 16 is the low nibble of byte j, j >= 16 the high nibble of
// byte j - 16; value = (nibble - 8) x scale), as ggml defines them.
struct block_q8 {
  __half d;
  int8_t qs[32];
};
struct block_q4 {
  __half d;
  uint8_t qs[16];
};

template <row_type T>
__device__ inline float element(const uint8_t* row, int64_t c) {
  if constexpr (T == row_type::f16) {
    return __half2float(reinterpret_cast<const __half*>(row)[c]);
  } else if constexpr (T == row_type::q8_0) {
    const block_q8& b = reinterpret_cast<const block_q8*>(row)[c / 32];
    return __half2float(b.d) * static_cast<float>(b.qs[c % 32]);
  } else {
    const block_q4& b = reinterpret_cast<const block_q4*>(row)[c / 32];
    const int j = static_cast<int>(c % 32);
    const int q = j < 16 ? (b.qs[j] & 0x0F) : (b.qs[j - 16] >> 4);
    return __half2float(b.d) * static_cast<float>(q - 8);
  }
}

// A row of d values against x, by one 32-lane group: F16 through the paired loads above; a quantized
// row a block per lane (neighbouring lanes read neighbouring blocks), its scale applied once.
template <row_type T>
__device__ inline float warp_dot_row(const uint8_t* row, int64_t d, const float* x) {
  if constexpr (T == row_type::f16) {
    return warp_dot_f16(reinterpret_cast<const __half*>(row), d, x);
  } else {
    const int lane = threadIdx.x % warp;
    float s = 0.0f;
    for (int64_t b = lane; b < d / 32; b += warp) {
      const float* xb = x + b * 32;
      float a = 0.0f;
      if constexpr (T == row_type::q8_0) {
        const block_q8& blk = reinterpret_cast<const block_q8*>(row)[b];
        for (int j = 0; j < 32; ++j) a += static_cast<float>(blk.qs[j]) * xb[j];
        s += __half2float(blk.d) * a;
      } else {
        const block_q4& blk = reinterpret_cast<const block_q4*>(row)[b];
        for (int j = 0; j < 16; ++j) a += static_cast<float>((blk.qs[j] & 0x0F) - 8) * xb[j] + static_cast<float>((blk.qs[j] >> 4) - 8) * xb[j + 16];
        s += __half2float(blk.d) * a;
      }
    }
    return warp_sum(s);
  }
}

// One group of 32 lanes per hot neuron: its gate and up rows against x, the activation.
template <row_type T>
__global__ void hot_hidden_kernel(const uint8_t* gate, const uint8_t* up, int64_t row_bytes, const int32_t* slots, int64_t count, int64_t d,
                                  const float* x, bool gated, ffn_act act, float* hidden) {
  const int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x / warp) + threadIdx.x / warp;
  if (k >= count) return;
  const int64_t row = slots[k];
  const float u = warp_dot_row<T>(up + row * row_bytes, d, x);
  float h;
  if (!gated) {
    h = activate(act, u);
  } else {
    const float g = warp_dot_row<T>(gate + row * row_bytes, d, x);
    h = act == ffn_act::drelu ? fmaxf(g, 0.0f) * fmaxf(u, 0.0f) : activate(act, g) * u;
  }
  if (threadIdx.x % warp == 0) hidden[k] = h;
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

// One group of 32 lanes per row: y[r] = row r . x, rows in type T.
template <row_type T>
__global__ void matvec_kernel(const uint8_t* w, int64_t row_bytes, int64_t rows, int64_t cols, const float* x, float* y) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x / warp) + threadIdx.x / warp;
  if (r >= rows) return;
  const float s = warp_dot_row<T>(w + r * row_bytes, cols, x);
  if (threadIdx.x % warp == 0) y[r] = s;
}

__global__ void down_sum_kernel(const float* partial, int64_t chunks, int64_t d, float* out) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= d) return;
  float s = 0.0f;
  for (int64_t k = 0; k < chunks; ++k) s += partial[k * d + c];
  out[c] = s;
}

__global__ void relu_kernel(float* v, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) v[i] = fmaxf(v[i], 0.0f);
}

__global__ void threshold_kernel(const float* scores, int64_t n, float threshold, uint8_t* chosen) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) chosen[i] = scores[i] >= threshold ? 1 : 0;
}

// One block per head: scores over the positions (a warp per position, in turn), the softmax with a
// block reduction, then each thread one output dimension summed over the positions.
__global__ void attend_kernel(const float* q, const float* k_cache, const float* v_cache, int64_t pos, int64_t n_head, int64_t n_head_kv,
                              int64_t head_dim, float* scores_all, float* out) {
  const int64_t h = blockIdx.x;
  const int64_t kvh = h / (n_head / n_head_kv);
  const int64_t kv = n_head_kv * head_dim;
  const float* qh = q + h * head_dim;
  float* s = scores_all + h * (pos + 1);
  const float scale = rsqrtf(static_cast<float>(head_dim));
  const int warps = blockDim.x / warp, w = threadIdx.x / warp, lane = threadIdx.x % warp;
  for (int64_t t = w; t <= pos; t += warps) {
    const float* kr = k_cache + t * kv + kvh * head_dim;
    float a = 0.0f;
    for (int64_t i = lane; i < head_dim; i += warp) a += qh[i] * kr[i];
    a = warp_sum(a);
    if (lane == 0) s[t] = a * scale;
  }
  __syncthreads();
  __shared__ float red[32];
  float m = -INFINITY;
  for (int64_t t = threadIdx.x; t <= pos; t += blockDim.x) m = fmaxf(m, s[t]);
  for (int o = warp / 2; o > 0; o /= 2) m = fmaxf(m, __shfl_down_sync(0xffffffffu, m, o));
  if (lane == 0) red[w] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    float mm = red[0];
    for (int i = 1; i < warps; ++i) mm = fmaxf(mm, red[i]);
    red[0] = mm;
  }
  __syncthreads();
  m = red[0];
  __syncthreads();
  float sum = 0.0f;
  for (int64_t t = threadIdx.x; t <= pos; t += blockDim.x) sum += (s[t] = expf(s[t] - m));
  sum = warp_sum(sum);
  if (lane == 0) red[w] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    float ss = 0.0f;
    for (int i = 0; i < warps; ++i) ss += red[i];
    red[0] = ss;
  }
  __syncthreads();
  const float inv = 1.0f / red[0];
  for (int64_t i = threadIdx.x; i < head_dim; i += blockDim.x) {
    float a = 0.0f;
    for (int64_t t = 0; t <= pos; ++t) a += s[t] * v_cache[t * kv + kvh * head_dim + i];
    out[h * head_dim + i] = a * inv;
  }
}

std::string launched() {
  const gpuError_t err = gpuGetLastError();
  return err == gpuSuccess ? std::string() : gpuGetErrorString(err);
}

gpuStream_t as_stream(void* s) { return static_cast<gpuStream_t>(s); }

}  // namespace

std::string matvec_f16(const uint16_t* w, int64_t rows, int64_t cols, const float* x, float* y, void* stream) {
  if (rows <= 0) return {};
  constexpr int threads = 256, per_block = threads / warp;
  matvec_f16_kernel<<<static_cast<unsigned>((rows + per_block - 1) / per_block), threads, 0, as_stream(stream)>>>(reinterpret_cast<const __half*>(w), rows,
                                                                                                                 cols, x, y);
  return launched();
}

int64_t row_bytes(row_type t, int64_t d) {
  switch (t) {
    case row_type::f16: return d * 2;
    case row_type::q8_0: return d / 32 * 34;
    default: return d / 32 * 18;
  }
}

int64_t hot_ffn_scratch(int64_t d) { return hot_ffn_max_chunks * d; }

std::string hot_ffn(row_type t, const void* gate, const void* up, const void* down_t, const int32_t* slots, int64_t count, int64_t d, const float* x,
                    bool gated, ffn_act act, float* hidden, float* out, float* scratch, void* stream) {
  if (t != row_type::f16 && d % 32 != 0) return "hot_ffn: quantized rows need a multiple of 32 values";
  constexpr int threads = 256, per_block = threads / warp;
  const int64_t rb = row_bytes(t, d);
  const auto* g = static_cast<const uint8_t*>(gate);
  const auto* u = static_cast<const uint8_t*>(up);
  const auto* dn = static_cast<const uint8_t*>(down_t);
  if (count > 0) {
    const auto blocks = static_cast<unsigned>((count + per_block - 1) / per_block);
    switch (t) {
      case row_type::f16: hot_hidden_kernel<row_type::f16><<<blocks, threads, 0, as_stream(stream)>>>(g, u, rb, slots, count, d, x, gated, act, hidden); break;
      case row_type::q8_0: hot_hidden_kernel<row_type::q8_0><<<blocks, threads, 0, as_stream(stream)>>>(g, u, rb, slots, count, d, x, gated, act, hidden); break;
      default: hot_hidden_kernel<row_type::q4_0><<<blocks, threads, 0, as_stream(stream)>>>(g, u, rb, slots, count, d, x, gated, act, hidden); break;
    }
    if (auto e = launched(); !e.empty()) return e;
  }
  // Chunks of at least 32 neurons, at most hot_ffn_max_chunks of them.
  const int64_t chunks = count == 0 ? 1 : std::min<int64_t>(hot_ffn_max_chunks, (count + 31) / 32);
  const int64_t chunk = count == 0 ? 0 : (count + chunks - 1) / chunks;
  const dim3 grid(static_cast<unsigned>((d + threads - 1) / threads), static_cast<unsigned>(chunks));
  switch (t) {
    case row_type::f16: hot_down_kernel<row_type::f16><<<grid, threads, 0, as_stream(stream)>>>(dn, rb, slots, count, chunk, d, hidden, scratch); break;
    case row_type::q8_0: hot_down_kernel<row_type::q8_0><<<grid, threads, 0, as_stream(stream)>>>(dn, rb, slots, count, chunk, d, hidden, scratch); break;
    default: hot_down_kernel<row_type::q4_0><<<grid, threads, 0, as_stream(stream)>>>(dn, rb, slots, count, chunk, d, hidden, scratch); break;
  }
  if (auto e = launched(); !e.empty()) return e;
  down_sum_kernel<<<static_cast<unsigned>((d + threads - 1) / threads), threads, 0, as_stream(stream)>>>(scratch, chunks, d, out);
  return launched();
}

std::string matvec(row_type t, const void* w, int64_t rows, int64_t cols, const float* x, float* y, void* stream) {
  if (rows <= 0) return {};
  if (t != row_type::f16 && cols % 32 != 0) return "matvec: quantized rows need a multiple of 32 values";
  constexpr int threads = 256, per_block = threads / warp;
  const auto blocks = static_cast<unsigned>((rows + per_block - 1) / per_block);
  const auto* wb = static_cast<const uint8_t*>(w);
  const int64_t rb = row_bytes(t, cols);
  switch (t) {
    case row_type::f16: matvec_kernel<row_type::f16><<<blocks, threads, 0, as_stream(stream)>>>(wb, rb, rows, cols, x, y); break;
    case row_type::q8_0: matvec_kernel<row_type::q8_0><<<blocks, threads, 0, as_stream(stream)>>>(wb, rb, rows, cols, x, y); break;
    default: matvec_kernel<row_type::q4_0><<<blocks, threads, 0, as_stream(stream)>>>(wb, rb, rows, cols, x, y); break;
  }
  return launched();
}

std::string predictor(row_type t, const void* fc1, const void* fc2, int64_t d, int64_t rank, int64_t n_ff, const float* x, float threshold, float* scratch,
                      float* scores, uint8_t* chosen, void* stream) {
  if (auto e = matvec(t, fc1, rank, d, x, scratch, stream); !e.empty()) return e;
  constexpr int threads = 256;
  relu_kernel<<<static_cast<unsigned>((rank + threads - 1) / threads), threads, 0, as_stream(stream)>>>(scratch, rank);
  if (auto e = launched(); !e.empty()) return e;
  if (auto e = matvec(t, fc2, n_ff, rank, scratch, scores, stream); !e.empty()) return e;
  threshold_kernel<<<static_cast<unsigned>((n_ff + threads - 1) / threads), threads, 0, as_stream(stream)>>>(scores, n_ff, threshold, chosen);
  return launched();
}

std::string predictor_f16(const uint16_t* fc1, const uint16_t* fc2, int64_t d, int64_t rank, int64_t n_ff, const float* x, float threshold, float* scratch,
                          float* scores, uint8_t* chosen, void* stream) {
  if (auto e = matvec_f16(fc1, rank, d, x, scratch, stream); !e.empty()) return e;
  constexpr int threads = 256;
  relu_kernel<<<static_cast<unsigned>((rank + threads - 1) / threads), threads, 0, as_stream(stream)>>>(scratch, rank);
  if (auto e = launched(); !e.empty()) return e;
  if (auto e = matvec_f16(fc2, n_ff, rank, scratch, scores, stream); !e.empty()) return e;
  threshold_kernel<<<static_cast<unsigned>((n_ff + threads - 1) / threads), threads, 0, as_stream(stream)>>>(scores, n_ff, threshold, chosen);
  return launched();
}

std::string attend_f32(const float* q, const float* k_cache, const float* v_cache, int64_t pos, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                       float* out, void* stream) {
  if (n_head <= 0 || n_head_kv <= 0 || n_head % n_head_kv != 0) return "attend_f32: n_head must be a positive multiple of n_head_kv";
  float* scores = nullptr;  // n_head x (pos + 1), freed once the stream has run the kernel
  if (gpuMalloc(reinterpret_cast<void**>(&scores), static_cast<size_t>(n_head * (pos + 1)) * sizeof(float)) != gpuSuccess) return "attend_f32: out of memory";
  attend_kernel<<<static_cast<unsigned>(n_head), 256, 0, as_stream(stream)>>>(q, k_cache, v_cache, pos, n_head, n_head_kv, head_dim, scores, out);
  std::string e = launched();
  (void)gpuStreamSynchronize(as_stream(stream));
  (void)gpuFree(scores);
  return e;
}

}  // namespace hotcold::kernels::gpu
