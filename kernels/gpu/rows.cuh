#pragma once
// What the GPU kernels share (kernels/gpu/*.cu): a 32-lane group's sums and row dot products over the
// file's own row types (F16, Q8_0, Q4_0, Q6_K as ggml defines them), x rounded to 8 bits for integer
// products, the FFN's activations, and the launch bookkeeping. Device code, included by the kernels'
// sources only.
#include <cstdint>
#include <string>

#include "kernels/gpu/decode.hpp"
#include "kernels/gpu/portability.hpp"

namespace hotcold::kernels::gpu::detail {

constexpr int warp = 32;

__device__ inline float warp_sum(float v) {
  for (int o = warp / 2; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}

__host__ __device__ inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

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

__device__ inline float activate(activation act, float v) {
  switch (act) {
    case activation::silu: return v / (1.0f + expf(-v));
    case activation::gelu: return 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
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
  const int8_t* q;  // nv x cols / 32 blocks of x_q8_block_stride bytes (32 values, then padding)
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
    qs[b * x_q8_block_stride + lane] = static_cast<int8_t>(__float2int_rn(__fmul_rn(v, id)));
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
  const int* xi = reinterpret_cast<const int*>(xq + b * x_q8_block_stride);
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
__device__ inline float neuron_value(bool gated, activation act, float threshold, float g, float u) {
  if (!gated) {
    const float h = activate(act, u);
    return fabsf(h) < threshold ? 0.0f : h;
  }
  const float a = activate(act, g);
  return act == activation::drelu ? fmaxf(g, 0.0f) * fmaxf(u, 0.0f) : fabsf(a) < threshold ? 0.0f : a * u;
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

// After each launch: counts it (launches_by_this_thread), and says its error.
std::string launched();
inline gpuStream_t as_stream(void* s) { return static_cast<gpuStream_t>(s); }

}  // namespace hotcold::kernels::gpu::detail
