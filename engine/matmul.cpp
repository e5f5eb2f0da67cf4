#include "engine/matmul.hpp"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/dot.hpp"
#include "kernels/cpu/fp16.hpp"
#include "kernels/cpu/gemm.hpp"
#include "engine/row_groups.hpp"
#include "engine/layer_ops.hpp"
#include "engine/rows.hpp"

namespace hotcold {

using namespace kernels;

namespace {
constexpr int64_t row_tile = 8;

bool half_rows(const tensor_view& w) { return w.type == tensor_type::f16 || w.type == tensor_type::bf16; }
bool float_type(const tensor_view& w) { return half_rows(w) || w.type == tensor_type::f32; }

// Long float rows, one token: rows r and r + rows/2 together, two independent streams from memory
// for each thread, with the first lines of the rows two ahead asked for (a third more than one stream
// without prefetch; docs/performance.md). Short rows (the
// predictors' 512 bytes) lose more to the pairs' reductions than they gain.
bool two_streams(const tensor_view& w) { return float_type(w) && !w.interleaved16 && w.row_bytes >= 2048 && w.ne1 >= 64; }

// The pairs of every matrix given (all two_streams, the same input) in one split across the threads.
void two_stream_products(thread_pool& pool, std::span<const tensor_view* const> ws, const float* x, std::span<float* const> ys) {
  std::vector<int64_t> first(ws.size() + 1, 0);  // matrix m's pairs are [first[m], first[m + 1])
  for (size_t m = 0; m < ws.size(); ++m) first[m + 1] = first[m] + ws[m]->ne1 / 2;
  const float* xs[1] = {x};
  // Chunks of at least 256 KB: each chunk starts two streams afresh, which a small product (a
  // predictor's fc1, 1 MB at F16) paid for four times a thread; large products are cut as before.
  const int64_t grain = std::max<int64_t>(8, (int64_t{256} << 10) / (2 * static_cast<int64_t>(ws[0]->row_bytes)));
  // Where the CPU wants it (kernels::cpu().stream_ahead), each F16 stream's lines are asked for that
  // many bytes ahead as it is read (rows r and r + 1 are adjacent); elsewhere the first lines of the
  // rows two on.
  const int64_t ahead = kernels::cpu().stream_ahead / 2;  // in halves
  pool.parallel_for(first.back(), [&](int64_t p0, int64_t p1) {
    size_t m = 0;
    for (int64_t p = p0; p < p1; ++p) {
      while (p >= first[m + 1]) ++m;
      const tensor_view& w = *ws[m];
      const int64_t half = w.ne1 / 2, r = p - first[m], d = w.ne0;
      float* y = ys[m];
      const bool stream = ahead > 0 && w.type == tensor_type::f16 && ahead <= d;
      if (!stream && p + 2 < p1 && r + 2 < half) prefetch_row_start(w, r + 2), prefetch_row_start(w, r + 2 + half);
      const auto* h0 = reinterpret_cast<const uint16_t*>(w.row(r));
      const auto* h1 = reinterpret_cast<const uint16_t*>(w.row(r + half));
      if (stream) {
        // (the rows after the last of each half: none asked for)
        const bool more = p + 1 < p1 && r + 1 < half;
        dot2_f16_ahead(h0, h1, x, d, y + r, y + r + half, more ? h0 + ahead : h0, more ? h1 + ahead : h1);
      } else if (w.type == tensor_type::f16) dot2n_f16(h0, h1, xs, 1, d, y + r, y + r + half);
      else if (w.type == tensor_type::bf16) dot2n_bf16(h0, h1, xs, 1, d, y + r, y + r + half);
      else dot2n_f32(reinterpret_cast<const float*>(w.row(r)), reinterpret_cast<const float*>(w.row(r + half)), xs, 1, d, y + r, y + r + half);
    }
  }, grain);
  for (size_t m = 0; m < ws.size(); ++m)
    if (ws[m]->ne1 % 2) ys[m][ws[m]->ne1 - 1] = row_dot(*ws[m], ws[m]->ne1 - 1, x, nullptr);
}


// Q8_0 rows there too: dequantized a block at a time in cache like the half rows, against the tokens
// rounded to Q8_0 once (quantized and back), so a prompt's products equal what the integer kernels
// give one token (up to float summation order) at the tile's speed.
// K-quant rows (Q4_K, Q5_K, Q6_K) likewise, a 256-value block at a time, against the tokens rounded to Q8_K.
// (Q4_0 and K-quant rows, plain or interleaved, go through the sixteen-row kernels first:
// sixteen_row_groups, k_quant_row_groups; what reaches the tile of theirs is a matrix of fewer than
// sixteen rows.)
bool use_gemm(const tensor_view& w, int64_t n) {
  const bool blocks32 = (w.type == tensor_type::q8_0 || w.type == tensor_type::q4_0) && w.ne0 % qk8_0 == 0;
  return n >= gemm_min_tokens && (float_type(w) || blocks32 || (computes_as_k_quant(w.type) && w.ne0 % qk_k == 0)) && !w.interleaved16 &&
         gemm_tile_vectorized();
}

// What a row type's integer kernels see of the activations, as the row-kernel table says: Q8_0 rows the
// tokens quantized to Q8_0, K-quant rows to Q8_K, float rows the tokens themselves.
using input_rounding = input_format;
input_rounding rounding_of(tensor_type t) { return input_format_of(t); }
// The n tokens of d values as that rounding leaves them (quantized and back), in a buffer of the
// calling thread's; x itself when there is none.
const float* rounded_tokens(input_rounding r, const float* x, int64_t n, int64_t d) {
  if (r == input_rounding::floats) return x;
  thread_local std::vector<float> rounded;
  rounded.resize(static_cast<size_t>(n * d));
  if (r == input_rounding::q8_0) {
    std::vector<block_q8_0> q(static_cast<size_t>(d / qk8_0));
    for (int64_t t = 0; t < n; ++t) {
      quantize_row_q8_0(x + t * d, q.data(), d);
      dequantize_row_q8_0(q.data(), rounded.data() + t * d, d);
    }
  } else {
    std::copy(x, x + n * d, rounded.begin());
    round_to_q8_k(rounded.data(), n * d);
  }
  return rounded.data();
}

// Bytes of a row's elements [k0, k0 + k) (k0 and, but at the row's end, k: multiples of the block).
int64_t row_span_bytes(const tensor_view& w, int64_t k) {
  if (w.type == tensor_type::q8_0) return (k + qk8_0 - 1) / qk8_0 * static_cast<int64_t>(sizeof(block_q8_0));
  if (w.type == tensor_type::q4_0) return (k + qk4_0 - 1) / qk4_0 * static_cast<int64_t>(sizeof(block_q4_0));
  if (computes_as_k_quant(w.type)) return (k + qk_k - 1) / qk_k * static_cast<int64_t>(traits(w.type).block_bytes);
  return k * (half_rows(w) ? 2 : 4);
}

// Elements [k0, k0 + k) of row r as floats (k0 a multiple of the type's block; F32, F16, BF16, Q8_0, Q4_0
// and K-quant rows).
void span_to_float(const tensor_view& w, int64_t r, int64_t k0, int64_t k, float* dst) {
  const uint8_t* row = w.row(r);
  if (w.type == tensor_type::f16) fp16_to_fp32_row(reinterpret_cast<const uint16_t*>(row) + k0, dst, static_cast<size_t>(k));
  else if (w.type == tensor_type::bf16) bf16_to_fp32_row(reinterpret_cast<const uint16_t*>(row) + k0, dst, static_cast<size_t>(k));
  else if (w.type == tensor_type::q8_0) dequantize_row_q8_0(reinterpret_cast<const block_q8_0*>(row) + k0 / qk8_0, dst, k);
  else if (w.type == tensor_type::q4_0) gemm_unpack_q4_0(reinterpret_cast<const block_q4_0*>(row) + k0 / qk4_0, dst, k);
  else if (computes_as_k_quant(w.type)) row_kernels_of(w.type).to_float(row + row_span_bytes(w, k0), dst, k);
  else std::memcpy(dst, reinterpret_cast<const float*>(row) + k0, static_cast<size_t>(k) * 4);
}

// The tokens are packed once into panels of 32 (per block of kc of the inner dimension, element k of
// the 32 side by side), for every matrix given (all reading x). The threads then take blocks of up
// to 96 rows of any of the matrices; per block of kc (256) a thread converts the rows' elements to
// floats (in cache) and runs the register tile over every panel, the next block's weights asked for
// from memory between the tiles. A block's results go out token by token, so the stores into y are
// contiguous.
void float_gemm(thread_pool& pool, std::span<const tensor_view* const> ws, const float* x, int64_t n, std::span<float* const> ys) {
  constexpr int64_t kc_max = 256, nr = gemm_tokens, mr_ = gemm_rows;
  const int64_t d = ws[0]->ne0;
  const int64_t panels = (n + nr - 1) / nr, kblocks = (d + kc_max - 1) / kc_max;
  x = rounded_tokens(rounding_of(ws[0]->type), x, n, d);  // quantized matrices: the tokens as their integer kernels see them
  thread_local std::vector<float> packed;  // the calling thread's, read by the workers
  packed.resize(static_cast<size_t>(kblocks * panels * nr * kc_max));
  float* xp = packed.data();
  pool.parallel_for(kblocks * panels, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t k0 = (i / panels) * kc_max;
      gemm_pack_tokens(x, n, d, (i % panels) * nr, k0, std::min(kc_max, d - k0), xp + i * nr * kc_max);
    }
  });
  int64_t total_rows = 0;
  for (const tensor_view* w : ws) total_rows += w->ne1;
  int64_t mc = 8 * mr_;  // fewer rows a block where that would leave a thread short of blocks
  while (mc > mr_ && (total_rows + mc - 1) / mc < 4 * pool.size()) mc -= mr_;
  std::vector<int64_t> first(ws.size() + 1, 0);  // matrix m's blocks are [first[m], first[m + 1])
  for (size_t m = 0; m < ws.size(); ++m) first[m + 1] = first[m] + (ws[m]->ne1 + mc - 1) / mc;
  const int64_t ld = panels * nr;
  pool.parallel_for(first.back(), [&](int64_t b0, int64_t b1) {
    thread_local std::vector<float> wbuf, cbuf;
    wbuf.resize(static_cast<size_t>(mc * kc_max));
    cbuf.resize(static_cast<size_t>(mc * ld));
    size_t m = 0;
    for (int64_t b = b0; b < b1; ++b) {
      while (b >= first[m + 1]) ++m;
      const tensor_view& w = *ws[m];
      const int64_t rows = w.ne1;
      const int64_t r0 = (b - first[m]) * mc, mr = std::min(mc, rows - r0), tiles = (mr + mr_ - 1) / mr_;
      for (int64_t kb = 0; kb < kblocks; ++kb) {
        const int64_t k0 = kb * kc_max, kc = std::min(kc_max, d - k0);
        for (int64_t i = 0; i < tiles * mr_; ++i) {
          float* dst = wbuf.data() + i * kc_max;
          if (i >= mr) std::fill(dst, dst + kc, 0.0f);
          else span_to_float(w, r0 + i, k0, kc, dst);
        }
        // The next block of kc (or the next rows' first), line by line, spread over this block's tiles.
        const bool more_k = kb + 1 < kblocks;
        const int64_t nk0 = more_k ? k0 + kc_max : 0, nr0 = more_k ? r0 : r0 + mc;
        const int64_t nrows = std::max<int64_t>(0, std::min(mc, rows - nr0));
        const int64_t row_lines = (row_span_bytes(w, std::min(kc_max, d - nk0)) + 63) / 64, lines = nrows * row_lines;
        const int64_t calls = panels * tiles;
        int64_t issued = 0, call = 0;
        for (int64_t p = 0; p < panels; ++p)
          for (int64_t tl = 0; tl < tiles; ++tl) {
            for (const int64_t want = lines * ++call / calls; issued < want; ++issued)
              prefetch_line(w.row(nr0 + issued / row_lines) + row_span_bytes(w, nk0) + 64 * (issued % row_lines));
            gemm_tile(wbuf.data() + tl * mr_ * kc_max, kc_max, xp + (kb * panels + p) * nr * kc_max, kc, cbuf.data() + tl * mr_ * ld + p * nr, ld, kb == 0);
          }
      }
      float* y = ys[m];
      for (int64_t t = 0; t < n; ++t)
        for (int64_t i = 0; i < mr; ++i) y[t * rows + r0 + i] = cbuf[i * ld + t];
    }
  }, 1);
}

}  // namespace

bool transposed_product_reads(const tensor_view& rows) {
  const tensor_type t = rows.type;
  const bool readable = t == tensor_type::f32 || t == tensor_type::f16 || t == tensor_type::bf16 || t == tensor_type::q8_0 || t == tensor_type::q4_0;
  return rows && readable && !rows.interleaved16 && rows.ne0 % gemm_tokens == 0 && gemm_tile_vectorized();
}

bool transposed_product(thread_pool& pool, const tensor_view& rows, const float* h, int64_t n, float* out) {
  constexpr int64_t kc_max = 256, nc = gemm_tokens, mt = gemm_rows;  // neurons a block, columns a panel, tokens a tile
  const int64_t k_all = rows.ne1, d = rows.ne0;
  const tensor_type t = rows.type;
  if (!transposed_product_reads(rows) || n < 1) return false;
  const int64_t panels = d / nc, kblocks = (k_all + kc_max - 1) / kc_max, full = n / mt * mt;
  // Each thread its own panels of columns, for every block of neurons: the block's h (n x 256) stays in
  // cache across the panels, and each panel's columns of the block's rows are converted once.
  const int64_t n_pad = (n + mt - 1) / mt * mt;
  pool.parallel_for(panels, [&](int64_t p0, int64_t p1) {
    // The block's h copied together (rows kc_max apart, the last tile's rows past n zero): twelve rows
    // of h n_ff apart would share a few of L1's sets.
    thread_local std::vector<float> xp, hb, cs;
    xp.resize(static_cast<size_t>(kc_max * nc)), hb.resize(static_cast<size_t>(n_pad * kc_max)), cs.resize(static_cast<size_t>(mt * nc));
    for (int64_t kb = 0; kb < kblocks; ++kb) {
      const int64_t k0 = kb * kc_max, kc = std::min(kc_max, k_all - k0);
      for (int64_t i = 0; i < n_pad; ++i) {
        float* dst = hb.data() + i * kc_max;
        if (i < n) std::copy(h + i * k_all + k0, h + i * k_all + k0 + kc, dst);
        else std::fill(dst, dst + kc, 0.0f);
      }
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t j0 = p * nc;
        if (t == tensor_type::f16) gemm_pack_f16_columns(reinterpret_cast<const uint16_t*>(rows.row(k0)) + j0, static_cast<int64_t>(rows.row_stride() / 2), kc, xp.data());
        else for (int64_t k = 0; k < kc; ++k) span_to_float(rows, k0 + k, j0, nc, xp.data() + k * nc);
        for (int64_t t0 = 0; t0 < full; t0 += mt) gemm_tile(hb.data() + t0 * kc_max, kc_max, xp.data(), kc, out + t0 * d + j0, d, kb == 0);
        if (full < n) {  // the last tokens through a tile of their own
          gemm_tile(hb.data() + full * kc_max, kc_max, xp.data(), kc, cs.data(), nc, true);
          for (int64_t i = 0; i < n - full; ++i) {
            float* o = out + (full + i) * d + j0;
            for (int64_t j = 0; j < nc; ++j) o[j] = (kb == 0 ? 0.0f : o[j]) + cs[static_cast<size_t>(i * nc + j)];
          }
        }
      }
    }
  });
  return true;
}

void matmul_same_input(thread_pool& pool, std::span<const tensor_view* const> ws, const float* x, int64_t n, std::span<float* const> ys,
                       std::vector<block_q8_0>& xq) {
  // (Q8_0 matrices see the tokens rounded to Q8_0, K-quant ones to Q8_K, float ones as they are: one
  // rounding a pass.)
  const input_rounding r = rounding_of(ws[0]->type);
  if (std::all_of(ws.begin(), ws.end(), [&](const tensor_view* w) { return k_quant_row_groups(*w, n) && w->ne0 == ws[0]->ne0 && w->type == ws[0]->type; }))
    return k_quant_group_products(pool, ws, x, n, ys);
  if (std::all_of(ws.begin(), ws.end(), [&](const tensor_view* w) { return sixteen_row_groups(*w, n) && w->ne0 == ws[0]->ne0; }))
    return interleaved_products(pool, ws, x, n, ys, xq);
  if (std::all_of(ws.begin(), ws.end(), [&](const tensor_view* w) { return use_gemm(*w, n) && w->ne0 == ws[0]->ne0 && rounding_of(w->type) == r; }))
    return float_gemm(pool, ws, x, n, ys);
  const bool streams = n == 1 && std::all_of(ws.begin(), ws.end(), [&](const tensor_view* w) { return two_streams(*w) && w->ne0 == ws[0]->ne0; });
  if (streams) return two_stream_products(pool, ws, x, ys);
  for (size_t m = 0; m < ws.size(); ++m) matmul(pool, *ws[m], x, n, ys[m], xq);
}

namespace {

// K-quant rows and a few tokens (decode; the head of Q4_0 files): the tokens quantized to Q8_K once,
// each row read in place with integer multiply-adds (one stream a thread: the hardware's prefetch).
void k_quant_few_tokens(thread_pool& pool, const tensor_view& w, const float* x, int64_t n, float* y) {
  const int64_t d = w.ne0, rows = w.ne1;
  thread_local std::vector<block_q8_k> x8;
  const int64_t kb = d / qk_k;
  x8.resize(static_cast<size_t>(n * kb));
  for (int64_t t = 0; t < n; ++t) quantize_row_q8_k(x + t * d, x8.data() + t * kb, d);
  const block_q8_k* xs = x8.data();
  const tensor_type type = w.type;
  pool.parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const void* row = w.row(r);
      int64_t t = 0;
      // Q6_K (the head of most files) four tokens a call: the row unpacked once for them.
      for (; type == tensor_type::q6_k && t + 4 <= n; t += 4) {
        const block_q8_k* four[4] = {xs + t * kb, xs + (t + 1) * kb, xs + (t + 2) * kb, xs + (t + 3) * kb};
        float o[4];
        dot4t_q6_k_q8_k(static_cast<const block_q6_k*>(row), four, d, o);
        for (int j = 0; j < 4; ++j) y[(t + j) * rows + r] = o[j];
      }
      for (; t < n; ++t) y[t * rows + r] = dot_k_quant_q8_k(type, row, xs + t * kb, d);
    }
  }, row_tile);
}

// One token (xq: it quantized to Q8_0 where the rows are Q8_0 or Q4_0, else null).
void one_token_product(thread_pool& pool, const tensor_view& w, const float* x, float* y, const block_q8_0* xq) {
  const int64_t d = w.ne0, rows = w.ne1;
  if (two_streams(w)) {
    const tensor_view* ws[1] = {&w};
    float* ys[1] = {y};
    return two_stream_products(pool, ws, x, ys);
  }
  if (w.type == tensor_type::q4_0 && rows >= 4) {
    // Rows r, r + q, r + 2q, r + 3q together: the vector's side of the work once for four rows, four
    // streams from memory (+30% over one row at a time). Rows of a multiple of 128 values (a sparse
    // file's plain gate and up rows in dense mode or its exact variant; a dense file under --mmap) go
    // against the input rearranged once (q8_0_to_x4), each stream's next row asked for at the offsets
    // read — the sparse FFN's four-row kernel (a thresholded ~1B Q4_0 file's dense mode 30-33 -> 42-45
    // tok/s); others ask for each row whole two ahead.
    thread_local std::vector<q8_0_x4> buffer;
    const bool rearranged = d % 128 == 0;
    if (rearranged) {
      buffer.resize(static_cast<size_t>(d / 128));
      q8_0_to_x4(xq, d / qk8_0, buffer.data());
    }
    const q8_0_x4* x4 = buffer.data();  // the calling thread's, read by the workers (a thread_local named there would be theirs)
    const int64_t q = rows / 4;
    pool.parallel_for(q, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t rn = rearranged ? std::min(r + 1, r1 - 1) : r;
        if (!rearranged && r + 2 < r1)
          for (int j = 0; j < 4; ++j) prefetch_row(w, r + 2 + j * q);
        const block_q4_0 *w4[4], *next[4];
        for (int64_t j = 0; j < 4; ++j)
          w4[j] = reinterpret_cast<const block_q4_0*>(w.row(r + j * q)), next[j] = reinterpret_cast<const block_q4_0*>(w.row(rn + j * q));
        float o[4];
        if (rearranged) dot4r_q4_0_x4_ahead(w4, xq, x4, d, o, next);
        else dot4r_q4_0(w4, xq, d, o);
        for (int j = 0; j < 4; ++j) y[r + j * q] = o[j];
      }
    }, 8);
    for (int64_t r = 4 * q; r < rows; ++r) y[r] = row_dot(w, r, x, xq);
    return;
  }
  pool.parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      if (r + 2 < r1) prefetch_row_ahead(w, r + 2);
      y[r] = row_dot(w, r, x, xq);
    }
  }, 16);
}

// Float rows: each against four tokens at a time, converted once in registers; tokens tiled so their
// activations stay in cache while a thread walks its rows.
void float_rows_products(thread_pool& pool, const tensor_view& w, const float* x, int64_t n, float* y) {
  const int64_t d = w.ne0, rows = w.ne1;
  pool.parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t t0 = 0; t0 < n; t0 += token_tile) {
      const int64_t t_end = std::min(n, t0 + token_tile);
      for (int64_t r = r0; r < r1; r += 4) {
        const int nr = static_cast<int>(std::min<int64_t>(4, r1 - r));  // rows at a time
        // The next four rows are fetched while these compute: with several tokens a row costs
        // compute as well as memory, and the two overlap only when the loads start early.
        if (t0 == 0)
          for (int64_t p = r + 4; p < std::min(r1, r + 8); ++p) prefetch_row(w, p);
        for (int64_t t = t0; t < t_end; t += 4) {
          const int k = static_cast<int>(std::min<int64_t>(4, t_end - t));
          const float* xs[4] = {x + t * d, x + std::min(t + 1, n - 1) * d, x + std::min(t + 2, n - 1) * d, x + std::min(t + 3, n - 1) * d};
          float o[16];
          if (nr == 4) {
            if (half_rows(w)) {
              const uint16_t* ws[4] = {reinterpret_cast<const uint16_t*>(w.row(r)), reinterpret_cast<const uint16_t*>(w.row(r + 1)),
                                       reinterpret_cast<const uint16_t*>(w.row(r + 2)), reinterpret_cast<const uint16_t*>(w.row(r + 3))};
              if (w.type == tensor_type::f16) dot4n_f16(ws, xs, k, d, o);
              else dot4n_bf16(ws, xs, k, d, o);
            } else {
              const float* ws[4] = {reinterpret_cast<const float*>(w.row(r)), reinterpret_cast<const float*>(w.row(r + 1)),
                                    reinterpret_cast<const float*>(w.row(r + 2)), reinterpret_cast<const float*>(w.row(r + 3))};
              dot4n_f32(ws, xs, k, d, o);
            }
          } else {
            for (int q = 0; q < nr; ++q) {
              if (w.type == tensor_type::f16) dotn_f16(reinterpret_cast<const uint16_t*>(w.row(r + q)), xs, k, d, o + 4 * q);
              else if (w.type == tensor_type::bf16) dotn_bf16(reinterpret_cast<const uint16_t*>(w.row(r + q)), xs, k, d, o + 4 * q);
              else dotn_f32(reinterpret_cast<const float*>(w.row(r + q)), xs, k, d, o + 4 * q);
            }
          }
          for (int q = 0; q < nr; ++q)
            for (int j = 0; j < k; ++j) y[(t + j) * rows + r + q] = o[4 * q + j];
        }
      }
    }
  }, row_tile);
}

// Q8_0 and Q4_0 rows against the tokens quantized to Q8_0 (xq): each row unpacked once for four
// tokens at a time; the next rows fetched while these compute.
void quantized_rows_products(thread_pool& pool, const tensor_view& w, int64_t n, float* y, const block_q8_0* xq) {
  const int64_t d = w.ne0, rows = w.ne1, qrow = d / qk8_0;
  pool.parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t t0 = 0; t0 < n; t0 += token_tile) {
      const int64_t t_end = std::min(n, t0 + token_tile);
      for (int64_t r = r0; r < r1; ++r) {
        if (t0 == 0 && r + 2 < r1) prefetch_row(w, r + 2);
        for (int64_t t = t0; t < t_end; t += 4) {
          const int k = static_cast<int>(std::min<int64_t>(4, t_end - t));
          const block_q8_0* xs[4] = {xq + t * qrow, xq + std::min(t + 1, n - 1) * qrow, xq + std::min(t + 2, n - 1) * qrow, xq + std::min(t + 3, n - 1) * qrow};
          float o[4];
          if (w.type == tensor_type::q8_0) dotn_q8_0(reinterpret_cast<const block_q8_0*>(w.row(r)), xs, k, d, o);
          else dotn_q4_0(reinterpret_cast<const block_q4_0*>(w.row(r)), xs, k, d, o);
          for (int j = 0; j < k; ++j) y[(t + j) * rows + r] = o[j];
        }
      }
    }
  }, row_tile);
}

// Other rows (BF16; Q6_K for 9 to 15 tokens): tiles of rows converted once into a thread's
// buffer, against every token (K-quants: the tokens rounded to Q8_K, as the integer kernels see them).
void converted_rows_products(thread_pool& pool, const tensor_view& w, const float* x, int64_t n, float* y) {
  const int64_t d = w.ne0, rows = w.ne1;
  x = rounded_tokens(rounding_of(w.type), x, n, d);
  pool.parallel_for((rows + row_tile - 1) / row_tile, [&](int64_t b0, int64_t b1) {
    thread_local std::vector<float> buf;
    buf.resize(static_cast<size_t>(row_tile * d));
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t r0 = b * row_tile, r1 = std::min(rows, r0 + row_tile);
      for (int64_t r = r0; r < r1; ++r) dequantize_row(w, r, buf.data() + (r - r0) * d);
      for (int64_t t0 = 0; t0 < n; t0 += token_tile)
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t t = t0; t < std::min(n, t0 + token_tile); ++t) y[t * rows + r] = dot_f32(buf.data() + (r - r0) * d, x + t * d, d);
    }
  });
}

}  // namespace

void matmul(thread_pool& pool, const tensor_view& w, const float* x, int64_t n, float* y, std::vector<block_q8_0>& xq) {
  const int64_t d = w.ne0;
  const bool quantized = w.type == tensor_type::q8_0 || w.type == tensor_type::q4_0;
  const int64_t qrow = d / qk8_0;
  if (w.interleaved16 && w.type == tensor_type::f16) return interleaved_f16_products(pool, w, x, n, y);
  if (k_quant_row_groups(w, n)) {
    const tensor_view* ws[1] = {&w};
    float* ys[1] = {y};
    return k_quant_group_products(pool, ws, x, n, ys);
  }
  if (sixteen_row_groups(w, n)) {
    const tensor_view* ws[1] = {&w};
    float* ys[1] = {y};
    return interleaved_products(pool, ws, x, n, ys, xq);
  }
  if (use_gemm(w, n)) {
    const tensor_view* ws[1] = {&w};
    float* ys[1] = {y};
    return float_gemm(pool, ws, x, n, ys);
  }
  if (quantized) {  // inputs quantized once per product
    if (static_cast<int64_t>(xq.size()) < n * qrow + 1) xq.resize(static_cast<size_t>(n * qrow + 1));
    for (int64_t t = 0; t < n; ++t) quantize_row_q8_0(x + t * d, xq.data() + t * qrow, d);
  }
  if (computes_as_k_quant(w.type) && n <= 8) return k_quant_few_tokens(pool, w, x, n, y);
  if (n == 1) return one_token_product(pool, w, x, y, quantized ? xq.data() : nullptr);
  if (float_type(w)) return float_rows_products(pool, w, x, n, y);
  if (quantized) return quantized_rows_products(pool, w, n, y, xq.data());
  converted_rows_products(pool, w, x, n, y);
}

}  // namespace hotcold
