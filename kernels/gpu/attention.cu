// Attention (decode.hpp's rope_store, attend): RoPE and the cache's append, then each token's heads
// over its sequence's positions, split across blocks and joined for a long past (flash-decoding).
#include <algorithm>
#include <cmath>

#include "kernels/gpu/rows.cuh"

namespace hotcold::kernels::gpu {
namespace {

using namespace detail;


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


}  // namespace

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
