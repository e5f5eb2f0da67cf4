// Causal attention of one head. A block of up to 32 consecutive queries (a prompt): the queries are
// laid out transposed (element k of the 32 queries side by side, the scale folded in), so that
// twelve keys at a time meet all of them as broadcasts against two vectors: the scores come out as
// rows of 32 (one per key), and each query's softmax runs down a column, sixteen queries per vector
// op. The values are then added six queries by 64 elements at a time, each value row loaded once for
// the six. (One query, decode: attend_keys.cpp, every head at once.) The cache is float32 or F16 (uint16_t): every kernel is
// written once over the cache's element, F16 rows widened to float as they are loaded.
#include "kernels/cpu/attention.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/kernel_table.hpp"
#include "kernels/cpu/fp16.hpp"
#include "kernels/cpu/simd_helpers.hpp"

namespace hotcold::kernels {

namespace {
constexpr int64_t qn = attend_block_max;  // query lanes in the scratch rows
constexpr int kb = 12;                     // keys a block's score pass reads at a time

inline float elem(const float* p, int64_t i) { return p[i]; }
inline float elem(const uint16_t* p, int64_t i) { return fp16_to_fp32(p[i]); }
}  // namespace

int64_t attend_block_scratch(int64_t keys, int64_t hd) { return qn * (hd + keys) + kb * hd; }

bool attend_block_vectorized(int64_t hd) { return cpu_kernels().attend_block_f32 != nullptr && hd % 16 == 0; }

namespace scalar {

template <typename T>
static void attend_one_t(const float* q, const T* k, const T* v, int64_t stride, int64_t hd, int64_t keys, float scale, float* out, float* scores) {
  float max_s = -INFINITY;
  for (int64_t t = 0; t < keys; ++t) {
    float dot = 0.0f;
    for (int64_t e = 0; e < hd; ++e) dot += q[e] * elem(k, t * stride + e);
    scores[t] = dot * scale;
    max_s = std::max(max_s, scores[t]);
  }
  double sum = 0;
  for (int64_t t = 0; t < keys; ++t) sum += (scores[t] = std::exp(scores[t] - max_s));
  const float inv = static_cast<float>(1.0 / sum);
  std::fill(out, out + hd, 0.0f);
  for (int64_t t = 0; t < keys; ++t)
    for (int64_t e = 0; e < hd; ++e) out[e] += scores[t] * inv * elem(v, t * stride + e);
}

void attend_block(const float* const* q, int nq, const float* k, const float* v, int64_t stride, int64_t hd, int64_t pos0, float scale,
                  float* const* out, float* scratch) {
  for (int j = 0; j < nq; ++j) attend_one_t(q[j], k, v, stride, hd, pos0 + j + 1, scale, out[j], scratch);
}
void attend_block(const float* const* q, int nq, const uint16_t* k, const uint16_t* v, int64_t stride, int64_t hd, int64_t pos0, float scale,
                  float* const* out, float* scratch) {
  for (int j = 0; j < nq; ++j) attend_one_t(q[j], k, v, stride, hd, pos0 + j + 1, scale, out[j], scratch);
}

}  // namespace scalar

HOTCOLD_AVX512_BEGIN
namespace avx512 {

// Sixteen cache elements as floats.
HOTCOLD_AVX512 static inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
HOTCOLD_AVX512 static inline __m512 load16(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
// hd elements of a row as floats (hd a multiple of 16).
HOTCOLD_AVX512 static inline const float* widen(const float* p, int64_t, float*) { return p; }
HOTCOLD_AVX512 static inline const float* widen(const uint16_t* p, int64_t hd, float* to) {
  for (int64_t e = 0; e < hd; e += 16) _mm512_storeu_ps(to + e, load16(p + e));
  return to;
}

// Scores of keys t0 .. t0 + 11 (those below `keys`) against the 32 transposed queries; F16 keys are
// widened into kf (kb x hd floats) first.
template <typename T>
HOTCOLD_AVX512 static void scores(const float* qt, const T* k, int64_t stride, int64_t hd, int64_t t0, int64_t keys, float* st, float* kf) {
  const float* kr[kb];
  for (int i = 0; i < kb; ++i) kr[i] = widen(k + std::min(t0 + i, keys - 1) * stride, hd, kf + i * hd);
  __m512 acc[kb][2];
  for (int i = 0; i < kb; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int64_t e = 0; e < hd; ++e) {
    const __m512 q0 = _mm512_loadu_ps(qt + e * qn), q1 = _mm512_loadu_ps(qt + e * qn + 16);
#pragma GCC unroll 12
    for (int i = 0; i < kb; ++i) {
      const __m512 b = _mm512_set1_ps(kr[i][e]);
      acc[i][0] = _mm512_fmadd_ps(b, q0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(b, q1, acc[i][1]);
    }
  }
  for (int i = 0; i < kb && t0 + i < keys; ++i) {
    _mm512_storeu_ps(st + (t0 + i) * qn, acc[i][0]);
    _mm512_storeu_ps(st + (t0 + i) * qn + 16, acc[i][1]);
  }
}

// out[j0 + i][e0 .. e0 + 16 NV) for six queries (the last repeated past nq): the weighted values.
template <int NV, typename T>
HOTCOLD_AVX512 static void values(const float* st, const T* v, int64_t stride, int64_t e0, int j0, int nq, int64_t pos0, const float* inv,
                                  float* const* out) {
  int js[6];
  for (int i = 0; i < 6; ++i) js[i] = std::min(j0 + i, nq - 1);
  __m512 acc[6][NV];
  for (int i = 0; i < 6; ++i)
    for (int u = 0; u < NV; ++u) acc[i][u] = _mm512_setzero_ps();
  const int64_t last = pos0 + js[5];  // later keys have weight 0 for these queries
  for (int64_t t = 0; t <= last; ++t) {
    __m512 vr[NV];
    for (int u = 0; u < NV; ++u) vr[u] = load16(v + t * stride + e0 + 16 * u);
#pragma GCC unroll 6
    for (int i = 0; i < 6; ++i) {
      const __m512 p = _mm512_set1_ps(st[t * qn + js[i]]);
      for (int u = 0; u < NV; ++u) acc[i][u] = _mm512_fmadd_ps(p, vr[u], acc[i][u]);
    }
  }
  for (int i = 0; i < 6 && j0 + i < nq; ++i) {
    const __m512 s = _mm512_set1_ps(inv[j0 + i]);
    for (int u = 0; u < NV; ++u) _mm512_storeu_ps(out[j0 + i] + e0 + 16 * u, _mm512_mul_ps(acc[i][u], s));
  }
}

template <typename T>
HOTCOLD_AVX512 static void attend_block(const float* const* q, int nq, const T* k, const T* v, int64_t stride, int64_t hd, int64_t pos0,
                                        float scale, float* const* out, float* scratch) {
  const int64_t keys = pos0 + nq;
  float* qt = scratch;  // [hd][32]
  float* st = scratch + qn * hd;  // [keys][32]: scores, then weights
  float* kf = st + qn * keys;     // [12][hd]: widened keys
  for (int64_t e = 0; e < hd; ++e)
    for (int j = 0; j < qn; ++j) qt[e * qn + j] = j < nq ? q[j][e] * scale : 0.0f;
  for (int64_t t0 = 0; t0 < keys; t0 += kb) scores(qt, k, stride, hd, t0, keys, st, kf);

  // Column softmax: key t is seen by query j when t <= pos0 + j, i.e. by the lanes j >= t - pos0.
  auto visible = [&](int64_t t, int half) -> __mmask16 {
    const int64_t from = std::clamp<int64_t>(t - pos0 - 16 * half, 0, 16);
    return static_cast<__mmask16>(0xFFFFu << from);
  };
  __m512 m[2] = {_mm512_set1_ps(-INFINITY), _mm512_set1_ps(-INFINITY)};
  for (int64_t t = 0; t < keys; ++t)
    for (int h = 0; h < 2; ++h) m[h] = _mm512_mask_max_ps(m[h], visible(t, h), m[h], _mm512_loadu_ps(st + t * qn + 16 * h));
  __m512 sum[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  for (int64_t t = 0; t < keys; ++t)
    for (int h = 0; h < 2; ++h) {
      const __m512 e = _mm512_maskz_mov_ps(visible(t, h), exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(st + t * qn + 16 * h), m[h])));
      _mm512_storeu_ps(st + t * qn + 16 * h, e);
      sum[h] = _mm512_add_ps(sum[h], e);
    }
  alignas(64) float inv[qn];
  for (int h = 0; h < 2; ++h) _mm512_store_ps(inv + 16 * h, _mm512_div_ps(_mm512_set1_ps(1.0f), sum[h]));

  for (int j0 = 0; j0 < nq; j0 += 6)
    for (int64_t e0 = 0; e0 < hd; e0 += 64) {
      switch (std::min<int64_t>(4, (hd - e0) / 16)) {
        case 4: values<4>(st, v, stride, e0, j0, nq, pos0, inv, out); break;
        case 3: values<3>(st, v, stride, e0, j0, nq, pos0, inv, out); break;
        case 2: values<2>(st, v, stride, e0, j0, nq, pos0, inv, out); break;
        default: values<1>(st, v, stride, e0, j0, nq, pos0, inv, out); break;
      }
    }
}

}  // namespace avx512
HOTCOLD_AVX512_END

void choose_attention_kernels(kernel_table& k, const cpu_features& f) {
  if (!f.avx512) return;  // (null: the scalar reference)
  k.attend_block_f32 = avx512::attend_block, k.attend_block_f16 = avx512::attend_block;
}

void attend_block(const float* const* q, int nq, const float* k, const float* v, int64_t stride, int64_t hd, int64_t pos0, float scale,
                  float* const* out, float* scratch) {
  if (attend_block_vectorized(hd)) return cpu_kernels().attend_block_f32(q, nq, k, v, stride, hd, pos0, scale, out, scratch);
  scalar::attend_block(q, nq, k, v, stride, hd, pos0, scale, out, scratch);
}
void attend_block(const float* const* q, int nq, const uint16_t* k, const uint16_t* v, int64_t stride, int64_t hd, int64_t pos0, float scale,
                  float* const* out, float* scratch) {
  if (attend_block_vectorized(hd)) return cpu_kernels().attend_block_f16(q, nq, k, v, stride, hd, pos0, scale, out, scratch);
  scalar::attend_block(q, nq, k, v, stride, hd, pos0, scale, out, scratch);
}

}  // namespace hotcold::kernels
