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

__device__ inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// Eight F16 weights (one 16-byte load) against eight floats of x (two 16-byte loads).
__device__ inline float dot8(const uint4& w, const float4& xa, const float4& xb) {
  const __half2* h = reinterpret_cast<const __half2*>(&w);
  const float2 w0 = __half22float2(h[0]), w1 = __half22float2(h[1]), w2 = __half22float2(h[2]), w3 = __half22float2(h[3]);
  return w0.x * xa.x + w0.y * xa.y + w1.x * xa.z + w1.y * xa.w + w2.x * xb.x + w2.y * xb.y + w3.x * xb.z + w3.y * xb.w;
}

// Row r of an F16 matrix (cols, even or odd) times x, by one warp: eight halves per 16-byte load where
// the row and x are aligned to them and cols is a multiple of 8 (every real shape), else two halves
// per load where the row is aligned to them, then the odd tail.
__device__ inline float warp_dot_f16(const __half* row, int64_t cols, const float* x) {
  float s = 0.0f;
  const int lane = threadIdx.x % warp;
  const int64_t pairs = cols / 2;
  const __half2* r2 = reinterpret_cast<const __half2*>(row);
  if (aligned16(row) && aligned16(x) && cols % 8 == 0) {
    const uint4* r8 = reinterpret_cast<const uint4*>(row);
    const float4* x4 = reinterpret_cast<const float4*>(x);
    for (int64_t i = lane; i < cols / 8; i += warp) s += dot8(r8[i], x4[2 * i], x4[2 * i + 1]);
  } else if ((reinterpret_cast<uintptr_t>(row) & 3) == 0) {
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
// Q6_K (ggml): 256 values; value i of each half of 128 (l < 32, four quarters) has its low 4 bits in
// ql (quarters 0 and 2: low and high nibble of ql[l]; 1 and 3: of ql[l + 32]), its high 2 bits in
// qh[l] (bits 0-1, 2-3, 4-5, 6-7 for the quarters), minus 32, times scales[l / 16 + 2 quarter] and d.
struct block_q6k {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  __half d;
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

// x rounded to 8 bits for the quantized rows' integer products, as the CPU's kernels (and llama.cpp's)
// do: blocks of 32, d = max |x| / 127 (kept as F16, as a Q8_0 block stores it), q = x / d rounded to
// the nearest, ties to even — the bytes kernels/cpu's quantize_row_q8_0 makes. In shared memory:
// the scales (floats) of nv vectors, then their values.
struct x_q8 {
  const float* d;   // nv x cols / 32
  const int8_t* q;  // nv x cols
};

// The block quantizes nv vectors of x (cols a multiple of 32) into shared memory (x_q8_bytes), a warp a
// block of 32.
__device__ inline x_q8 quantize_x(const float* x, int64_t cols, int nv, char* smem) {
  float* ds = reinterpret_cast<float*>(smem);
  int8_t* qs = reinterpret_cast<int8_t*>(smem + nv * (cols / 32) * 4);
  const int warps = blockDim.x / warp, lane = threadIdx.x % warp;
  const int64_t blocks = nv * (cols / 32);
  for (int64_t b = threadIdx.x / warp; b < blocks; b += warps) {
    const float v = x[b * 32 + lane];  // (vector j's block k is block j cols / 32 + k)
    float amax = fabsf(v);
    for (int o = warp / 2; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float d = __fdiv_rn(amax, 127.0f), id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
    qs[b * 32 + lane] = static_cast<int8_t>(__float2int_rn(__fmul_rn(v, id)));
    if (lane == 0) ds[b] = __half2float(__float2half_rn(d));
  }
  __syncthreads();
  return {ds, qs};
}

// c + the products of four signed bytes of a and b (dp4a where the GPU has it).
__device__ inline int dot4(int a, int b, int c) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 610
  return __dp4a(a, b, c);
#else
  const auto* x = reinterpret_cast<const int8_t*>(&a);
  const auto* y = reinterpret_cast<const int8_t*>(&b);
  return c + x[0] * y[0] + x[1] * y[1] + x[2] * y[2] + x[3] * y[3];
#endif
}

// Four bytes of a block's values (which sit 2 bytes into an 18- or 34-byte block: two 16-bit loads).
__device__ inline int four_bytes(const uint8_t* p) {
  const auto* h = reinterpret_cast<const uint16_t*>(p);
  return static_cast<int>(h[0] | (static_cast<uint32_t>(h[1]) << 16));
}

// Block b of a Q8_0 or Q4_0 row against block b of a quantized x: the integer sum (Q4_0's values
// offset by 8 through the sum of x's), times both scales.
template <row_type T>
__device__ inline float block_dot_q8(const uint8_t* row, int64_t b, const float* xd, const int8_t* xq) {
  const int* xi = reinterpret_cast<const int*>(xq + b * 32);
  int sum = 0;
  if constexpr (T == row_type::q8_0) {
    const block_q8& blk = reinterpret_cast<const block_q8*>(row)[b];
    for (int k = 0; k < 8; ++k) sum = dot4(four_bytes(reinterpret_cast<const uint8_t*>(blk.qs) + 4 * k), xi[k], sum);
    return __half2float(blk.d) * xd[b] * static_cast<float>(sum);
  } else {
    const block_q4& blk = reinterpret_cast<const block_q4*>(row)[b];
    int xsum = 0;
    for (int k = 0; k < 4; ++k) {
      const int v = four_bytes(blk.qs + 4 * k);
      sum = dot4(v & 0x0F0F0F0F, xi[k], sum);
      sum = dot4((v >> 4) & 0x0F0F0F0F, xi[k + 4], sum);
    }
    for (int k = 0; k < 8; ++k) xsum = dot4(0x01010101, xi[k], xsum);
    return __half2float(blk.d) * xd[b] * static_cast<float>(sum - 8 * xsum);
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

// Two rows (a neuron's gate and up) against the same x, interleaved: both rows' loads in flight in one
// loop, x read once; g and u on every lane.
template <row_type T>
__device__ inline void warp_dot_pair(const uint8_t* ra, const uint8_t* rb, int64_t d, const float* x, float& g, float& u) {
  const int lane = threadIdx.x % warp;
  float sa = 0.0f, sb = 0.0f;
  if constexpr (T == row_type::f16) {
    if (!(aligned16(ra) && aligned16(rb) && aligned16(x) && d % 8 == 0)) {
      g = warp_dot_f16(reinterpret_cast<const __half*>(ra), d, x);
      u = warp_dot_f16(reinterpret_cast<const __half*>(rb), d, x);
      return;
    }
    const uint4 *a8 = reinterpret_cast<const uint4*>(ra), *b8 = reinterpret_cast<const uint4*>(rb);
    const float4* x4 = reinterpret_cast<const float4*>(x);
    for (int64_t i = lane; i < d / 8; i += warp) {
      const uint4 wa = a8[i], wb = b8[i];
      const float4 xa = x4[2 * i], xb = x4[2 * i + 1];
      sa += dot8(wa, xa, xb), sb += dot8(wb, xa, xb);
    }
  } else {
    for (int64_t b = lane; b < d / 32; b += warp) {
      const float* xb = x + b * 32;
      float a0 = 0.0f, a1 = 0.0f;
      if constexpr (T == row_type::q8_0) {
        const block_q8 &ka = reinterpret_cast<const block_q8*>(ra)[b], &kb = reinterpret_cast<const block_q8*>(rb)[b];
        for (int j = 0; j < 32; ++j) a0 += static_cast<float>(ka.qs[j]) * xb[j], a1 += static_cast<float>(kb.qs[j]) * xb[j];
        sa += __half2float(ka.d) * a0, sb += __half2float(kb.d) * a1;
      } else {
        const block_q4 &ka = reinterpret_cast<const block_q4*>(ra)[b], &kb = reinterpret_cast<const block_q4*>(rb)[b];
        for (int j = 0; j < 16; ++j) {
          a0 += static_cast<float>((ka.qs[j] & 0x0F) - 8) * xb[j] + static_cast<float>((ka.qs[j] >> 4) - 8) * xb[j + 16];
          a1 += static_cast<float>((kb.qs[j] & 0x0F) - 8) * xb[j] + static_cast<float>((kb.qs[j] >> 4) - 8) * xb[j + 16];
        }
        sa += __half2float(ka.d) * a0, sb += __half2float(kb.d) * a1;
      }
    }
  }
  g = warp_sum(sa), u = warp_sum(sb);
}

// A hot neuron's value from its dots: act(up) without a gate, relu(gate) relu(up) for dReLU, else
// act(gate) up; 0 where |act(..)| < threshold.
__device__ inline float neuron_value(bool gated, ffn_act act, float threshold, float g, float u) {
  if (!gated) {
    const float h = activate(act, u);
    return fabsf(h) < threshold ? 0.0f : h;
  }
  const float a = activate(act, g);
  return act == ffn_act::drelu ? fmaxf(g, 0.0f) * fmaxf(u, 0.0f) : fabsf(a) < threshold ? 0.0f : a * u;
}

// One group of 32 lanes per hot neuron: its gate and up rows against x (interleaved), the activation.
template <row_type T>
__global__ void hot_hidden_kernel(const uint8_t* gate, const uint8_t* up, int64_t row_bytes, const int32_t* slots, int64_t count, int64_t d,
                                  const float* x, bool gated, ffn_act act, float threshold, float* hidden) {
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
                                     const float* x, bool gated, ffn_act act, float threshold, float* hidden) {
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

__global__ void down_sum_kernel(const float* partial, int64_t chunks, int64_t d, float* out) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= d) return;
  float s = 0.0f;
  for (int64_t k = 0; k < chunks; ++k) s += partial[k * d + c];
  out[c] = s;
}

__global__ void activate_kernel(const float* gate, float* up, int64_t count, bool gated, ffn_act act, float threshold) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= count) return;
  const float u = up[i];
  if (act == ffn_act::drelu) {
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

__global__ void relu_kernel(float* v, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) v[i] = fmaxf(v[i], 0.0f);
}

__global__ void threshold_kernel(const float* scores, int64_t n, float threshold, bool on_act, ffn_act act, uint8_t* chosen) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) chosen[i] = (on_act ? fabsf(activate(act, scores[i])) : scores[i]) >= threshold ? 1 : 0;
}

// A row of cols values against nt <= 4 vectors (x + j cols), by one 32-lane group: each weight is
// decoded once for all of them; s[j] gets vector j's sum (on every lane).
template <row_type T>
__device__ inline void warp_dot_rows4(const uint8_t* row, int64_t cols, const float* x, int nt, float s[4]) {
  const int lane = threadIdx.x % warp;
  float a[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if constexpr (T == row_type::f16) {
    const __half* r = reinterpret_cast<const __half*>(row);
    if (aligned16(row) && aligned16(x) && cols % 8 == 0) {  // eight halves a load (x + j cols stays aligned)
      const uint4* r8 = reinterpret_cast<const uint4*>(row);
      for (int64_t i = lane; i < cols / 8; i += warp) {
        const uint4 w = r8[i];
        for (int j = 0; j < 4; ++j)
          if (j < nt) {
            const float4* x4 = reinterpret_cast<const float4*>(x + j * cols);
            a[j] += dot8(w, x4[2 * i], x4[2 * i + 1]);
          }
      }
    } else if ((reinterpret_cast<uintptr_t>(row) & 3) == 0 && cols % 2 == 0) {
      const __half2* r2 = reinterpret_cast<const __half2*>(row);
      for (int64_t i = lane; i < cols / 2; i += warp) {
        const float2 w = __half22float2(r2[i]);
        for (int j = 0; j < 4; ++j)
          if (j < nt) a[j] += w.x * x[j * cols + 2 * i] + w.y * x[j * cols + 2 * i + 1];
      }
    } else {
      for (int64_t i = lane; i < cols; i += warp) {
        const float w = __half2float(r[i]);
        for (int j = 0; j < 4; ++j)
          if (j < nt) a[j] += w * x[j * cols + i];
      }
    }
  } else if constexpr (T == row_type::q6_k) {
    // The 32 lanes share a block: lane l takes the values l, l + 32, l + 64, l + 96 of each half.
    for (int64_t b = 0; b < cols / 256; ++b) {
      const block_q6k& blk = reinterpret_cast<const block_q6k*>(row)[b];
      const float d = __half2float(blk.d);
      for (int half = 0; half < 2; ++half) {
        const uint8_t *ql = blk.ql + 64 * half, *qh = blk.qh + 32 * half;
        const int8_t* sc = blk.scales + 8 * half + lane / 16;
        const int h = qh[lane];
        const float w0 = d * sc[0] * static_cast<float>(((ql[lane] & 0x0F) | ((h & 3) << 4)) - 32);
        const float w1 = d * sc[2] * static_cast<float>(((ql[lane + 32] & 0x0F) | (((h >> 2) & 3) << 4)) - 32);
        const float w2 = d * sc[4] * static_cast<float>(((ql[lane] >> 4) | (((h >> 4) & 3) << 4)) - 32);
        const float w3 = d * sc[6] * static_cast<float>(((ql[lane + 32] >> 4) | (((h >> 6) & 3) << 4)) - 32);
        for (int j = 0; j < 4; ++j)
          if (j < nt) {
            const float* xb = x + j * cols + b * 256 + 128 * half + lane;
            a[j] += w0 * xb[0] + w1 * xb[32] + w2 * xb[64] + w3 * xb[96];
          }
      }
    }
  } else {
    for (int64_t b = lane; b < cols / 32; b += warp) {
      float w[32];
      float scale;
      if constexpr (T == row_type::q8_0) {
        const block_q8& blk = reinterpret_cast<const block_q8*>(row)[b];
        scale = __half2float(blk.d);
        for (int k = 0; k < 32; ++k) w[k] = static_cast<float>(blk.qs[k]);
      } else {
        const block_q4& blk = reinterpret_cast<const block_q4*>(row)[b];
        scale = __half2float(blk.d);
        for (int k = 0; k < 16; ++k) w[k] = static_cast<float>((blk.qs[k] & 0x0F) - 8), w[k + 16] = static_cast<float>((blk.qs[k] >> 4) - 8);
      }
      for (int j = 0; j < 4; ++j)
        if (j < nt) {
          const float* xb = x + j * cols + b * 32;
          float acc = 0.0f;
          for (int k = 0; k < 32; ++k) acc += w[k] * xb[k];
          a[j] += scale * acc;
        }
    }
  }
  for (int j = 0; j < 4; ++j) s[j] = warp_sum(a[j]);
}

// One group of 32 lanes per row, the vectors four at a time.
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
          if (j < nt) a[j] += block_dot_q8<T>(row, b, xq.d + j * (cols / 32), xq.q + j * cols);
      for (int j = 0; j < 4; ++j)
        if (j < nt) {
          const float sum = warp_sum(a[j]);
          if (lane == 0) y[(t0 + j) * ldy + r] = sum;
        }
    }
  }
}

// One block per token: its q and k heads rotated pair by pair, then its k and v rows stored.
__global__ void rope_store_kernel(attention_shape sh, float* qkv, int64_t n, const float* angles, const int32_t* seqpos, void* k_cache, void* v_cache,
                                  bool f16, qkv_adjust adj) {
  const int64_t t = blockIdx.x, kv = sh.n_head_kv * sh.head_dim, half = sh.n_rot / 2;
  float* q = qkv + t * (sh.d + 2 * kv);
  const float *c = angles + t * sh.n_rot, *s = c + half;
  if (adj.bq) {  // biases on q, k and v
    for (int64_t i = threadIdx.x; i < sh.d + 2 * kv; i += blockDim.x)
      q[i] += i < sh.d ? adj.bq[i] : i < sh.d + kv ? adj.bk[i - sh.d] : adj.bv[i - sh.d - kv];
    __syncthreads();
  }
  if (adj.q_norm) {  // each head of q and k through RMSNorm (a thread a head: heads are short)
    for (int64_t h = threadIdx.x; h < sh.n_head + sh.n_head_kv; h += blockDim.x) {
      float* x = q + h * sh.head_dim;
      const float* w = h < sh.n_head ? adj.q_norm : adj.k_norm;
      float ss = 0;
      for (int64_t i = 0; i < sh.head_dim; ++i) ss += x[i] * x[i];
      const float scale = rsqrtf(ss / static_cast<float>(sh.head_dim) + adj.eps);
      for (int64_t i = 0; i < sh.head_dim; ++i) x[i] = x[i] * scale * w[i];
    }
    __syncthreads();
  }
  for (int64_t p = threadIdx.x; p < (sh.n_head + sh.n_head_kv) * half; p += blockDim.x) {
    const int64_t h = p / half, i = p % half;
    float* x = q + h * sh.head_dim;  // the key heads follow the query heads
    const int64_t a = sh.adjacent_pairs ? 2 * i : i, b = sh.adjacent_pairs ? 2 * i + 1 : i + half;
    const float x0 = x[a], x1 = x[b];
    x[a] = x0 * c[i] - x1 * s[i];
    x[b] = x0 * s[i] + x1 * c[i];
  }
  __syncthreads();
  const int64_t at = (static_cast<int64_t>(seqpos[t]) * sh.ctx + seqpos[n + t]) * kv;
  const float *k = q + sh.d, *v = k + kv;
  for (int64_t i = threadIdx.x; i < kv; i += blockDim.x) {
    if (f16) {
      static_cast<__half*>(k_cache)[at + i] = __float2half(k[i]);
      static_cast<__half*>(v_cache)[at + i] = __float2half(v[i]);
    } else {
      static_cast<float*>(k_cache)[at + i] = k[i];
      static_cast<float*>(v_cache)[at + i] = v[i];
    }
  }
}

__device__ inline float cached(const __half* c, int64_t i) { return __half2float(c[i]); }
__device__ inline float cached(const float* c, int64_t i) { return c[i]; }

constexpr int attend_threads = 128, attend_tile = 32;

// Token t's head h over positions [p_begin, p_end) of its sequence (p_end <= pos + 1), a tile of 32
// positions at a time: the warps score the tile's keys into shared memory, then every thread (its
// output values tid and tid + 128) rescales its running sum by the new maximum and adds the tile's
// values — an online softmax, nothing stored per position. m: the largest score (-inf when the range
// is empty), l: the sum of exp(score - m), acc0/acc1: the unnormalized outputs.
template <typename KV>
__device__ inline void attend_range(const attention_shape& sh, const float* qkv, int64_t t, int64_t h, int64_t seq, int64_t p_begin, int64_t p_end,
                                    const KV* k_cache, const KV* v_cache, float& m, float& l, float& acc0, float& acc1) {
  const int64_t hd = sh.head_dim, kv = sh.n_head_kv * hd;
  const int64_t base = seq * sh.ctx * kv + h / (sh.n_head / sh.n_head_kv) * hd;
  __shared__ float q[attend_max_head_dim];
  __shared__ float score[attend_tile];
  for (int64_t i = threadIdx.x; i < hd; i += blockDim.x) q[i] = qkv[t * (sh.d + 2 * kv) + h * hd + i];
  __syncthreads();
  const float scale = rsqrtf(static_cast<float>(hd));
  const int warps = blockDim.x / warp, w = threadIdx.x / warp, lane = threadIdx.x % warp;
  m = -INFINITY, l = 0.0f, acc0 = 0.0f, acc1 = 0.0f;
  const int64_t i0 = threadIdx.x, i1 = threadIdx.x + attend_threads;
  for (int64_t p0 = p_begin; p0 < p_end; p0 += attend_tile) {
    const int nt = p_end - p0 < attend_tile ? static_cast<int>(p_end - p0) : attend_tile;
    for (int j = w; j < nt; j += warps) {
      const KV* kr = k_cache + base + (p0 + j) * kv;
      float a = 0.0f;
      for (int64_t i = lane; i < hd; i += warp) a += q[i] * cached(kr, i);
      a = warp_sum(a);
      if (lane == 0) score[j] = a * scale;
    }
    __syncthreads();
    float tm = score[0];
    for (int j = 1; j < nt; ++j) tm = fmaxf(tm, score[j]);
    const float mn = fmaxf(m, tm), f = expf(m - mn);
    l *= f, acc0 *= f, acc1 *= f;
    for (int j = 0; j < nt; ++j) {
      const float p = expf(score[j] - mn);
      l += p;
      const KV* vr = v_cache + base + (p0 + j) * kv;
      if (i0 < hd) acc0 += p * cached(vr, i0);
      if (i1 < hd) acc1 += p * cached(vr, i1);
    }
    m = mn;
    __syncthreads();
  }
}

// Block (t, h): token t's head h over its sequence's positions 0..pos.
template <typename KV>
__global__ void attend_kernel(attention_shape sh, const float* qkv, int64_t n, const int32_t* seqpos, const KV* k_cache, const KV* v_cache, float* out) {
  const int64_t t = blockIdx.x, h = blockIdx.y, hd = sh.head_dim;
  float m, l, acc0, acc1;
  attend_range(sh, qkv, t, h, seqpos[t], 0, static_cast<int64_t>(seqpos[n + t]) + 1, k_cache, v_cache, m, l, acc0, acc1);
  float* o = out + t * sh.d + h * hd;
  const int64_t i0 = threadIdx.x, i1 = threadIdx.x + attend_threads;
  if (i0 < hd) o[i0] = acc0 / l;
  if (i1 < hd) o[i1] = acc1 / l;
}

// Flash-decoding: block (t, h, s) takes split s of token t's positions 0..pos (splits of equal length,
// the last ones empty when pos is short) and leaves its maximum, sum and unnormalized outputs in
// partial[((t n_head + h) splits + s) (head_dim + 2)]: m, l, then head_dim values.
template <typename KV>
__global__ void attend_split_kernel(attention_shape sh, const float* qkv, int64_t n, const int32_t* seqpos, const KV* k_cache, const KV* v_cache,
                                    int64_t splits, float* partial) {
  const int64_t t = blockIdx.x, h = blockIdx.y, s = blockIdx.z, hd = sh.head_dim;
  const int64_t len = static_cast<int64_t>(seqpos[n + t]) + 1, span = (len + splits - 1) / splits;
  const int64_t p_begin = s * span < len ? s * span : len, p_end = p_begin + span < len ? p_begin + span : len;
  float m, l, acc0, acc1;
  attend_range(sh, qkv, t, h, seqpos[t], p_begin, p_end, k_cache, v_cache, m, l, acc0, acc1);
  float* part = partial + ((t * sh.n_head + h) * splits + s) * (hd + 2);
  if (threadIdx.x == 0) part[0] = m, part[1] = l;
  const int64_t i0 = threadIdx.x, i1 = threadIdx.x + attend_threads;
  if (i0 < hd) part[2 + i0] = acc0;
  if (i1 < hd) part[2 + i1] = acc1;
}

// Block (t, h): the splits' partial softmaxes joined — each rescaled by exp(m_s - M) to the largest
// maximum M — and normalized by their joint sum.
__global__ void attend_join_kernel(attention_shape sh, int64_t splits, const float* partial, float* out) {
  const int64_t t = blockIdx.x, h = blockIdx.y, hd = sh.head_dim;
  const float* part = partial + (t * sh.n_head + h) * splits * (hd + 2);
  __shared__ float weight[attend_max_splits];  // each split's exp(m_s - M) (0 for an empty split)
  float big = -INFINITY;
  for (int64_t s = 0; s < splits; ++s) big = fmaxf(big, part[s * (hd + 2)]);
  for (int64_t s = threadIdx.x; s < splits; s += blockDim.x) {
    const float ms = part[s * (hd + 2)];
    weight[s] = ms > -INFINITY ? expf(ms - big) : 0.0f;
  }
  __syncthreads();
  float l = 0.0f;
  for (int64_t s = 0; s < splits; ++s) l += part[s * (hd + 2) + 1] * weight[s];
  for (int64_t i = threadIdx.x; i < hd; i += blockDim.x) {
    float a = 0.0f;
    for (int64_t s = 0; s < splits; ++s) a += part[s * (hd + 2) + 2 + i] * weight[s];
    out[t * sh.d + h * hd + i] = a / l;
  }
}

thread_local uint64_t launches_here = 0;

// After each launch: counts it, and says its error.
std::string launched() {
  ++launches_here;
  const gpuError_t err = gpuGetLastError();
  return err == gpuSuccess ? std::string() : gpuGetErrorString(err);
}

gpuStream_t as_stream(void* s) { return static_cast<gpuStream_t>(s); }

}  // namespace

uint64_t launches_by_this_thread() { return launches_here; }

int64_t row_bytes(row_type t, int64_t d) {
  switch (t) {
    case row_type::f16: return d * 2;
    case row_type::q8_0: return d / 32 * 34;
    case row_type::q6_k: return d / 256 * 210;
    default: return d / 32 * 18;
  }
}

int64_t hot_ffn_scratch(int64_t d) { return hot_ffn_max_chunks * d; }

std::string hot_ffn(row_type t, const void* gate, const void* up, const void* down_t, const int32_t* slots, int64_t count, int64_t d, const float* x,
                    bool gated, ffn_act act, float threshold, float* hidden, float* out, float* scratch, void* stream) {
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
  return matmul(t, w, rows, cols, x, 1, y, rows, stream);
}

std::string predictor(row_type t, const void* fc1, const void* fc2, int64_t d, int64_t rank, int64_t n_ff, const float* x, float threshold, float* scratch,
                      float* scores, uint8_t* chosen, void* stream, bool on_act, ffn_act act) {
  if (auto e = matvec(t, fc1, rank, d, x, scratch, stream); !e.empty()) return e;
  constexpr int threads = 256;
  relu_kernel<<<static_cast<unsigned>((rank + threads - 1) / threads), threads, 0, as_stream(stream)>>>(scratch, rank);
  if (auto e = launched(); !e.empty()) return e;
  if (auto e = matvec(t, fc2, n_ff, rank, scratch, scores, stream); !e.empty()) return e;
  threshold_kernel<<<static_cast<unsigned>((n_ff + threads - 1) / threads), threads, 0, as_stream(stream)>>>(scores, n_ff, threshold, on_act, act, chosen);
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

std::string add(const float* a, const float* b, int64_t count, float* out, void* stream) {
  if (count <= 0) return {};
  constexpr int threads = 256;
  add_kernel<<<static_cast<unsigned>((count + threads - 1) / threads), threads, 0, as_stream(stream)>>>(a, b, count, out);
  return launched();
}

std::string activate(float* gate, float* up, int64_t count, bool gated, ffn_act act, float threshold, void* stream) {
  if (count <= 0) return {};
  constexpr int threads = 256;
  activate_kernel<<<static_cast<unsigned>((count + threads - 1) / threads), threads, 0, as_stream(stream)>>>(gate, up, count, gated, act, threshold);
  return launched();
}

namespace {
std::string check_shape(const attention_shape& s) {
  if (s.n_head <= 0 || s.n_head_kv <= 0 || s.n_head % s.n_head_kv != 0) return "attention: n_head must be a positive multiple of n_head_kv";
  if (s.head_dim <= 0 || s.head_dim > attend_max_head_dim) return "attention: heads of 1 to 256 values";
  if (s.n_rot % 2 != 0 || s.n_rot > s.head_dim) return "attention: an even number of rotated values, at most a head's";
  return {};
}
}  // namespace

std::string rope_store(const attention_shape& s, float* qkv, int64_t n, const float* angles, const int32_t* seqpos, void* k_cache, void* v_cache, bool f16,
                       void* stream, const qkv_adjust& adjust) {
  if (auto e = check_shape(s); !e.empty()) return e;
  if (n <= 0) return {};
  rope_store_kernel<<<static_cast<unsigned>(n), 128, 0, as_stream(stream)>>>(s, qkv, n, angles, seqpos, k_cache, v_cache, f16, adjust);
  return launched();
}

std::string attend(const attention_shape& s, const float* qkv, int64_t n, const int32_t* seqpos, const void* k_cache, const void* v_cache, bool f16,
                   float* out, void* stream, float* partial, int64_t partial_floats, int64_t max_pos) {
  if (auto e = check_shape(s); !e.empty()) return e;
  if (n <= 0) return {};
  const int64_t splits = partial ? attend_splits(n, s.n_head, s.head_dim, max_pos, partial_floats) : 1;
  if (splits > 1) {
    const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(s.n_head), static_cast<unsigned>(splits));
    if (f16)
      attend_split_kernel<__half><<<grid, attend_threads, 0, as_stream(stream)>>>(s, qkv, n, seqpos, static_cast<const __half*>(k_cache),
                                                                                 static_cast<const __half*>(v_cache), splits, partial);
    else
      attend_split_kernel<float><<<grid, attend_threads, 0, as_stream(stream)>>>(s, qkv, n, seqpos, static_cast<const float*>(k_cache),
                                                                                static_cast<const float*>(v_cache), splits, partial);
    if (auto e = launched(); !e.empty()) return e;
    attend_join_kernel<<<dim3(static_cast<unsigned>(n), static_cast<unsigned>(s.n_head)), attend_threads, 0, as_stream(stream)>>>(s, splits, partial, out);
    return launched();
  }
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(s.n_head));
  if (f16)
    attend_kernel<__half><<<grid, attend_threads, 0, as_stream(stream)>>>(s, qkv, n, seqpos, static_cast<const __half*>(k_cache),
                                                                         static_cast<const __half*>(v_cache), out);
  else
    attend_kernel<float><<<grid, attend_threads, 0, as_stream(stream)>>>(s, qkv, n, seqpos, static_cast<const float*>(k_cache),
                                                                        static_cast<const float*>(v_cache), out);
  return launched();
}

}  // namespace hotcold::kernels::gpu
