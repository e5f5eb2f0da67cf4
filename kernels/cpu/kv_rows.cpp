#include "kernels/cpu/kv_rows.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/fp16.hpp"
#include "kernels/cpu/kernel_table.hpp"
#include "kernels/cpu/quants.hpp"

namespace hotcold::kernels {

namespace {

constexpr int64_t tile_keys = 64;  // keys widened at a time: two tiles of 64 x 1,024 floats stay in L2

void check_type(tensor_type t) {
  if (!is_kv_cache_type(t)) throw std::invalid_argument("the KV cache holds f32, f16, q8_0 or q4_0 values");
}

}  // namespace

void kv_store_row(tensor_type t, const float* x, void* to, int64_t n) {
  switch (t) {
    case tensor_type::f32: std::memcpy(to, x, static_cast<size_t>(n) * sizeof(float)); return;
    case tensor_type::f16: fp32_to_fp16_row(x, static_cast<uint16_t*>(to), static_cast<size_t>(n)); return;
    case tensor_type::q8_0: quantize_row_q8_0(x, static_cast<block_q8_0*>(to), n); return;
    case tensor_type::q4_0: quantize_row_q4_0(x, static_cast<block_q4_0*>(to), n); return;
    default: check_type(t);
  }
}

HOTCOLD_AVX512_BEGIN
namespace {

// Blocks of 32 widened sixteen values a vector.
HOTCOLD_AVX512 void widen_q8_0(const block_q8_0* b, int64_t nb, float* y) {
  for (int64_t i = 0; i < nb; ++i, y += 32) {
    const __m512 d = _mm512_set1_ps(fp16_to_fp32(b[i].d));
    const __m128i* q = reinterpret_cast<const __m128i*>(b[i].qs);
    _mm512_storeu_ps(y, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q)))));
    _mm512_storeu_ps(y + 16, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q + 1)))));
  }
}
HOTCOLD_AVX512 void widen_q4_0(const block_q4_0* b, int64_t nb, float* y) {
  const __m512i low = _mm512_set1_epi32(0xF), eight = _mm512_set1_epi32(8);
  for (int64_t i = 0; i < nb; ++i, y += 32) {
    const __m512 d = _mm512_set1_ps(fp16_to_fp32(b[i].d));
    const __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs)));
    _mm512_storeu_ps(y, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_and_si512(q, low), eight))));
    _mm512_storeu_ps(y + 16, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(q, 4), eight))));
  }
}

}  // namespace
HOTCOLD_AVX512_END

void kv_load_rows(tensor_type t, const uint8_t* base, int64_t row_bytes, int64_t at, int64_t width, int64_t n, float* y) {
  check_type(t);
  const bool wide = cpu().avx512;
  const uint64_t skip = values_bytes(t, at);
  for (int64_t r = 0; r < n; ++r, y += width) {
    const uint8_t* row = base + r * row_bytes + skip;
    switch (t) {
      case tensor_type::f32: std::memcpy(y, row, static_cast<size_t>(width) * sizeof(float)); break;
      case tensor_type::f16: fp16_to_fp32_row(reinterpret_cast<const uint16_t*>(row), y, static_cast<size_t>(width)); break;
      case tensor_type::q8_0:
        if (wide) widen_q8_0(reinterpret_cast<const block_q8_0*>(row), width / 32, y);
        else dequantize_row_q8_0(reinterpret_cast<const block_q8_0*>(row), y, width);
        break;
      default:
        if (wide) widen_q4_0(reinterpret_cast<const block_q4_0*>(row), width / 32, y);
        else dequantize_row_q4_0(reinterpret_cast<const block_q4_0*>(row), y, width);
    }
  }
}

void round_to_q8_0(float* x, int64_t n) {
  thread_local std::vector<block_q8_0> blocks;
  blocks.resize(static_cast<size_t>(n / 32));
  quantize_row_q8_0(x, blocks.data(), n);
  dequantize_row_q8_0(blocks.data(), x, n);
}

int64_t attend_keys_typed_scratch(int64_t n_head, int64_t n_kv, int64_t hd) {
  return 2 * tile_keys * n_kv * hd + n_head * (hd + 2) + attend_keys_scratch(n_head, hd);
}

namespace {

// Without the vector kernel: tiles of 64 keys, their keys widened by widen_k(b0, n, into), their
// values from rows, through the float kernel, each tile's sums folded into the range's.
template <typename WidenK>
void attend_widened(const float* q, tensor_type vt, const uint8_t* v, int64_t v_row_bytes, int64_t n_head, int64_t n_kv, int64_t hd, int64_t t0,
                    int64_t t1, float scale, key_range_sums out, float* scratch, WidenK widen_k) {
  const int64_t width = n_kv * hd;
  float* kf = scratch;
  float* vf = kf + tile_keys * width;
  const key_range_sums tile{vf + tile_keys * width, vf + tile_keys * width + n_head, vf + tile_keys * width + 2 * n_head};
  float* inner = tile.o + n_head * hd;
  clear_key_range(out, n_head, hd);
  for (int64_t b0 = t0; b0 < t1; b0 += tile_keys) {
    const int64_t n = std::min(tile_keys, t1 - b0);
    widen_k(b0, n, kf);
    kv_load_rows(vt, v + b0 * v_row_bytes, v_row_bytes, 0, width, n, vf);
    attend_keys(q, kf, vf, width, n_head, n_kv, hd, 0, n, scale, tile, inner);
    for (int64_t h = 0; h < n_head; ++h) {  // the tile's sums folded into the range's, both at their common maximum
      const float m = std::max(out.m[h], tile.m[h]);
      const float c = out.m[h] == -INFINITY ? 0.0f : std::exp(out.m[h] - m), ct = std::exp(tile.m[h] - m);
      out.l[h] = out.l[h] * c + tile.l[h] * ct;
      float* o = out.o + h * hd;
      const float* ot = tile.o + h * hd;
      for (int64_t e = 0; e < hd; ++e) o[e] = o[e] * c + ot[e] * ct;
      out.m[h] = m;
    }
  }
}

}  // namespace

void attend_keys_typed(const float* q, kv_types t, const uint8_t* k, const uint8_t* v, int64_t k_row_bytes, int64_t v_row_bytes, int64_t n_head,
                       int64_t n_kv, int64_t hd, int64_t t0, int64_t t1, float scale, key_range_sums out, float* scratch) {
  if (attend_block_vectorized(hd) && cpu_kernels().attend_keys_typed)
    return cpu_kernels().attend_keys_typed(q, t, k, v, k_row_bytes, v_row_bytes, n_head, n_kv, hd, t0, t1, scale, out, scratch);
  attend_widened(q, t.v, v, v_row_bytes, n_head, n_kv, hd, t0, t1, scale, out, scratch,
                 [&](int64_t b0, int64_t n, float* kf) { kv_load_rows(t.k, k + b0 * k_row_bytes, k_row_bytes, 0, n_kv * hd, n, kf); });
}

bool keys_in_tiles(tensor_type t) {
  if (t == tensor_type::f16 || t == tensor_type::f32) return cpu_kernels().attend_key_tiles != nullptr;
  return t == tensor_type::q8_0 && cpu_kernels().attend_q8_0_key_tiles != nullptr;
}

void attend_key_tiles(const float* q, kv_types t, const uint8_t* k_tiles, const uint8_t* v, int64_t v_row_bytes, int64_t n_head, int64_t n_kv,
                      int64_t hd, int64_t t0, int64_t t1, float scale, key_range_sums out, float* scratch) {
  if (t.k != tensor_type::f16 && t.k != tensor_type::f32 && t.k != tensor_type::q8_0) throw std::invalid_argument("keys in tiles are f16, f32 or q8_0");
  const auto kernel = t.k == tensor_type::q8_0 ? cpu_kernels().attend_q8_0_key_tiles : cpu_kernels().attend_key_tiles;
  if (attend_block_vectorized(hd) && kernel) return kernel(q, t, k_tiles, v, v_row_bytes, n_head, n_kv, hd, t0, t1, scale, out, scratch);
  attend_widened(q, t.v, v, v_row_bytes, n_head, n_kv, hd, t0, t1, scale, out, scratch,
                 [&](int64_t b0, int64_t n, float* kf) { widen_key_tiles(t.k, k_tiles, n_kv * hd, b0, n, 0, n_kv * hd, kf); });
}

namespace {

// The index of (position p, dim d) among the elements of F16 or F32 tiles of sixteen positions, `width`
// dims each.
inline int64_t tile_at(int64_t p, int64_t d, int64_t width) { return ((p / 16) * width + d) * 16 + p % 16; }

// Where position p's scale of block b sits within a Q8_0 tile.
inline int64_t q8_0_scale_at(int64_t p, int64_t b, int64_t width) { return q8_0_scales_at(b, width) + p % 16 * 2; }

// Positions pos .. pos + n - 1 copied between tiles and rows of `width` elements of type T: from the
// tiles into the rows (tiles_first), or from the rows into the tiles.
template <typename T>
void copy_tile_rows(const T* from, T* to, int64_t width, int64_t pos, int64_t n, bool tiles_first) {
  for (int64_t p = pos; p < pos + n; ++p)
    for (int64_t d = 0; d < width; ++d) {
      const int64_t in_tile = tile_at(p, d, width), in_row = (p - pos) * width + d;
      to[tiles_first ? in_row : in_tile] = from[tiles_first ? in_tile : in_row];
    }
}
// The same for Q8_0: each block's scale and its eight runs of four quants.
void copy_q8_0_tile_rows(const uint8_t* from, uint8_t* to, int64_t width, int64_t pos, int64_t n, bool tiles_first) {
  const int64_t nb = width / 32, row_bytes = nb * static_cast<int64_t>(sizeof(block_q8_0));
  for (int64_t p = pos; p < pos + n; ++p) {
    const int64_t tile = p / 16 * q8_0_tile_bytes(width), row = (p - pos) * row_bytes;
    auto move = [&](int64_t in_tile, int64_t in_row, size_t bytes) {
      if (tiles_first) std::memcpy(to + in_row, from + tile + in_tile, bytes);
      else std::memcpy(to + tile + in_tile, from + in_row, bytes);
    };
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t block = row + b * static_cast<int64_t>(sizeof(block_q8_0));
      move(q8_0_scale_at(p, b, width), block, 2);
      for (int64_t i = 0; i < 8; ++i) move(q8_0_quads_at(p, b, i), block + 2 + 4 * i, 4);
    }
  }
}
void copy_tile_rows(tensor_type t, const uint8_t* from, uint8_t* to, int64_t width, int64_t pos, int64_t n, bool tiles_first) {
  if (t == tensor_type::q8_0) copy_q8_0_tile_rows(from, to, width, pos, n, tiles_first);
  else if (t == tensor_type::f16) copy_tile_rows(reinterpret_cast<const uint16_t*>(from), reinterpret_cast<uint16_t*>(to), width, pos, n, tiles_first);
  else copy_tile_rows(reinterpret_cast<const float*>(from), reinterpret_cast<float*>(to), width, pos, n, tiles_first);
}

}  // namespace

void widen_key_tiles(tensor_type t, const uint8_t* tiles, int64_t width, int64_t pos, int64_t n, int64_t at, int64_t cols, float* out) {
  if (cpu_kernels().widen_key_tiles && t == tensor_type::f16 && cols % 16 == 0 && at % 16 == 0)
    return cpu_kernels().widen_key_tiles(reinterpret_cast<const uint16_t*>(tiles), width, pos, n, at, cols, out);
  if (t == tensor_type::q8_0) {  // a block's quants gathered, four at a time, then widened
    for (int64_t p = pos; p < pos + n; ++p)
      for (int64_t b = at / 32; b < (at + cols) / 32; ++b) {
        const uint8_t* tile = tiles + p / 16 * q8_0_tile_bytes(width);
        block_q8_0 block;
        std::memcpy(&block.d, tile + q8_0_scale_at(p, b, width), 2);
        for (int64_t i = 0; i < 8; ++i) std::memcpy(block.qs + 4 * i, tile + q8_0_quads_at(p, b, i), 4);
        dequantize_row_q8_0(&block, out + (p - pos) * cols + (b * 32 - at), 32);
      }
    return;
  }
  for (int64_t p = pos; p < pos + n; ++p) {
    float* row = out + (p - pos) * cols;
    for (int64_t d = 0; d < cols; ++d)
      row[d] = t == tensor_type::f16 ? fp16_to_fp32(reinterpret_cast<const uint16_t*>(tiles)[tile_at(p, at + d, width)])
                                     : reinterpret_cast<const float*>(tiles)[tile_at(p, at + d, width)];
  }
}

void store_key_tile(tensor_type t, const float* row, uint8_t* tiles, int64_t width, int64_t pos) {
  thread_local std::vector<uint8_t> stored;
  stored.resize(static_cast<size_t>(width) * 4);
  kv_store_row(t, row, stored.data(), width);
  copy_tile_rows(t, stored.data(), tiles, width, pos, 1, false);
}

void key_tiles_to_rows(tensor_type t, const uint8_t* tiles, int64_t width, int64_t pos, int64_t n, uint8_t* rows) {
  copy_tile_rows(t, tiles, rows, width, pos, n, true);
}

void rows_to_key_tiles(tensor_type t, const uint8_t* rows, uint8_t* tiles, int64_t width, int64_t pos, int64_t n) {
  copy_tile_rows(t, rows, tiles, width, pos, n, false);
}

}  // namespace hotcold::kernels
