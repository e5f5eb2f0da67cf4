#include "engine/row_groups.hpp"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/dot.hpp"
#include "engine/rows.hpp"

namespace hotcold {

using namespace kernels;

namespace {

// Groups [0, groups) of sixteen interleaved rows against n tokens, four at a time, split across the
// threads, tokens tiled so their inputs stay in cache while a thread walks its groups:
// group(g, t, k, o) computes o[16 j + i] = row i of group g . token t + j (j < k <= 4) and writes them.
template <typename Group>
void grouped_products(thread_pool& pool, int64_t groups, int64_t n, const Group& group) {
  pool.parallel_for(groups, [&](int64_t g0, int64_t g1) {
    for (int64_t t0 = 0; t0 < n; t0 += token_tile) {
      const int64_t t_end = std::min(n, t0 + token_tile);
      for (int64_t g = g0; g < g1; ++g)
        for (int64_t t = t0; t < t_end; t += 4) group(g, t, static_cast<int>(std::min<int64_t>(4, t_end - t)));
    }
  }, n == 1 ? 2 : 1);
}

// The groups of sixteen rows of several matrices numbered as one: matrix m's are [first[m], first[m + 1]).
struct matrix_groups {
  std::vector<int64_t> first;
  template <typename Rows>
  matrix_groups(std::span<const tensor_view* const> ws, Rows grouped) : first(ws.size() + 1, 0) {
    for (size_t m = 0; m < ws.size(); ++m) first[m + 1] = first[m] + grouped(*ws[m]) / 16;
  }
  int64_t total() const { return first.back(); }
  int64_t rows(size_t m) const { return 16 * (first[m + 1] - first[m]); }  // matrix m's rows in groups
  void where(int64_t gg, size_t& m, int64_t& g) const {  // group gg of all: matrix m's group g
    m = static_cast<size_t>(std::upper_bound(first.begin(), first.end(), gg) - first.begin() - 1);
    g = gg - first[m];
  }
};

// Rows of a Q4_0 matrix that go in groups of sixteen: its interleaved ones (model::load), or for rows
// kept in plain order (a sparse file's gate and up rows, which its neurons read one by one) all but the
// last ne1 % 16, interleaved into a thread's buffer a group at a time (interleaved_products below).
int64_t grouped_rows(const tensor_view& w) { return w.interleaved16 ? w.interleaved_rows() : w.ne1 - w.ne1 % 16; }

}  // namespace

// Products of Q4_0 matrices as groups of sixteen rows, all reading the same input: one pass over
// every matrix's groups (each group's bytes unpacked once per four tokens), the input quantized once;
// the tail rows one at a time. Interleaved matrices (model::load) are read in place; a plain one
// (several tokens only) has each group of sixteen rows interleaved once into the thread's buffer and
// then read for every token: the sixteen-row integer kernels instead of the float tile over rows
// converted in cache or each row against four tokens (the exact variant of a thresholded ~1B Q4_0 file,
// pp128 on a Zen 3 without AVX-512: 35 -> 65 tokens/s; its dense file, interleaved at load, ~100).
void interleaved_products(thread_pool& pool, std::span<const tensor_view* const> ws, const float* x, int64_t n, std::span<float* const> ys,
                          std::vector<block_q8_0>& xq) {
  const int64_t d = ws[0]->ne0, qrow = d / qk8_0;
  if (static_cast<int64_t>(xq.size()) < n * qrow + 1) xq.resize(static_cast<size_t>(n * qrow + 1));
  for (int64_t t = 0; t < n; ++t) quantize_row_q8_0(x + t * d, xq.data() + t * qrow, d);
  thread_local std::vector<q8_0_terms> terms;
  if (static_cast<int64_t>(terms.size()) < n * qrow) terms.resize(static_cast<size_t>(n * qrow));
  for (int64_t t = 0; t < n; ++t) q8_0_block_terms(xq.data() + t * qrow, qrow, terms.data() + t * qrow);
  const q8_0_terms* xs_terms = terms.data();  // the calling thread's, read by the workers
  const matrix_groups groups(ws, grouped_rows);
  const bool plain = std::any_of(ws.begin(), ws.end(), [](const tensor_view* w) { return !w->interleaved16; });
  auto where = [&](int64_t gg, size_t& m, int64_t& g) { groups.where(gg, m, g); };
  // Group g of matrix m (its bytes at group) against tokens t .. t + k - 1 (k <= 4).
  auto four_tokens = [&](const block_q4_0x16* group, size_t m, int64_t g, int64_t t, int k) {
    const block_q8_0* xs[4];
    const q8_0_terms* ss[4];
    for (int j = 0; j < 4; ++j) {
      const int64_t tj = std::min(t + j, n - 1);
      xs[j] = xq.data() + tj * qrow;
      ss[j] = xs_terms + tj * qrow;
    }
    float o[64];
    dot16r_q4_0(group, xs, ss, k, d, o);
    for (int j = 0; j < k; ++j) std::copy(o + 16 * j, o + 16 * j + 16, ys[m] + (t + j) * ws[m]->ne1 + 16 * g);
  };
  if (plain) {
    // Each group interleaved once into the thread's buffer, a few groups at a time, then every token
    // against them a tile at a time while they sit in cache (the tokens' inputs too: walking all of a
    // 256-token prompt's for each group missed the cache).
    constexpr int64_t chunk = 8;
    pool.parallel_for(groups.total(), [&](int64_t g0, int64_t g1) {
      thread_local std::vector<block_q4_0x16> buffer;
      buffer.resize(static_cast<size_t>(chunk * qrow));
      for (int64_t c0 = g0; c0 < g1; c0 += chunk) {
        const int64_t c1 = std::min(g1, c0 + chunk);
        const block_q4_0x16* at[chunk];
        for (int64_t gg = c0; gg < c1; ++gg) {
          size_t m;
          int64_t g;
          where(gg, m, g);
          const tensor_view& w = *ws[m];
          at[gg - c0] = reinterpret_cast<const block_q4_0x16*>(w.data) + g * qrow;
          if (!w.interleaved16) {
            const block_q4_0* rows = reinterpret_cast<const block_q4_0*>(w.row(16 * g));
            if (!w.packed()) {  // rows of a bundle: the group's sixteen gathered first
              thread_local std::vector<block_q4_0> gathered;
              gathered.resize(static_cast<size_t>(16 * qrow));
              for (int64_t i = 0; i < 16; ++i) std::memcpy(gathered.data() + i * qrow, w.row(16 * g + i), w.row_bytes);
              rows = gathered.data();
            }
            block_q4_0x16* into = buffer.data() + (gg - c0) * qrow;
            interleave_q4_0x16(rows, qrow, into);
            at[gg - c0] = into;
          }
        }
        for (int64_t t0 = 0; t0 < n; t0 += token_tile)
          for (int64_t gg = c0; gg < c1; ++gg) {
            size_t m;
            int64_t g;
            where(gg, m, g);
            for (int64_t t = t0; t < std::min(n, t0 + token_tile); t += 4) four_tokens(at[gg - c0], m, g, t, static_cast<int>(std::min<int64_t>(4, n - t)));
          }
      }
    });
  } else if (n == 1 && groups.total() >= 2) {
    // One token: groups g and g + half together, block by block, two streams from memory for each
    // thread (+4-8% over one group at a time, measured alternately in one process).
    const int64_t total = groups.total(), half = total / 2;
    pool.parallel_for(half, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        size_t ma, mb;
        int64_t ga, gb;
        where(p, ma, ga);
        where(p + half, mb, gb);
        dot16r2_q4_0(reinterpret_cast<const block_q4_0x16*>(ws[ma]->data) + ga * qrow, reinterpret_cast<const block_q4_0x16*>(ws[mb]->data) + gb * qrow, xq.data(),
                     xs_terms, d, ys[ma] + 16 * ga, ys[mb] + 16 * gb);
      }
    }, 2);
    if (total % 2) {
      size_t m;
      int64_t g;
      where(total - 1, m, g);
      const block_q8_0* xs[1] = {xq.data()};
      const q8_0_terms* ss[1] = {xs_terms};
      dot16r_q4_0(reinterpret_cast<const block_q4_0x16*>(ws[m]->data) + g * qrow, xs, ss, 1, d, ys[m] + 16 * g);
    }
  } else {
    grouped_products(pool, groups.total(), n, [&](int64_t gg, int64_t t, int k) {
      size_t m;
      int64_t g;
      where(gg, m, g);
      four_tokens(reinterpret_cast<const block_q4_0x16*>(ws[m]->data) + g * qrow, m, g, t, k);
    });
  }
  for (size_t m = 0; m < ws.size(); ++m) {
    const tensor_view& w = *ws[m];
    for (int64_t r = grouped_rows(w); r < w.ne1; ++r)
      for (int64_t t = 0; t < n; ++t) ys[m][t * w.ne1 + r] = row_dot(w, r, x + t * d, xq.data() + t * qrow);
  }
}

int64_t zero_block_skipping_products(thread_pool& pool, const tensor_view& w, const float* x, int64_t n, float* y, std::vector<block_q8_0>& xq) {
  if (w.type != tensor_type::q4_0 || !w.interleaved16 || w.interleaved_rows() != w.ne1 || n < 1 || n > 4) return -1;
  const int64_t d = w.ne0, qrow = d / qk8_0;
  if (static_cast<int64_t>(xq.size()) < n * qrow) xq.resize(static_cast<size_t>(n * qrow));
  for (int64_t t = 0; t < n; ++t) quantize_row_q8_0(x + t * d, xq.data() + t * qrow, d);
  // The blocks some token has a value in (a block of zeros quantizes to scale 0 and zero quants).
  thread_local std::vector<int32_t> blocks;
  blocks.clear();
  for (int64_t b = 0; b < qrow; ++b)
    for (int64_t t = 0; t < n; ++t) {
      const block_q8_0& q = xq[static_cast<size_t>(t * qrow + b)];
      if (q.d != 0 || std::any_of(q.qs, q.qs + qk8_0, [](int8_t v) { return v != 0; })) {
        blocks.push_back(static_cast<int32_t>(b));
        break;
      }
    }
  const int64_t count = static_cast<int64_t>(blocks.size());
  const bool skip = count < qrow;  // else the usual kernels (with their prefetch), on the input quantized here
  thread_local std::vector<q8_0_terms> terms;
  if (static_cast<int64_t>(terms.size()) < n * qrow) terms.resize(static_cast<size_t>(n * qrow));
  for (int64_t t = 0; t < n; ++t) q8_0_block_terms(xq.data() + t * qrow, qrow, terms.data() + t * qrow);
  const int32_t* list = blocks.data();  // the calling thread's, read by the workers
  const q8_0_terms* ts = terms.data();
  const block_q4_0x16* groups = reinterpret_cast<const block_q4_0x16*>(w.data);
  const int64_t total = w.ne1 / 16;
  const block_q8_0* xs[4];
  const q8_0_terms* ss[4];
  for (int64_t t = 0; t < 4; ++t) xs[t] = xq.data() + std::min(t, n - 1) * qrow, ss[t] = ts + std::min(t, n - 1) * qrow;
  // Group g against the tokens (o: 16 n values), over the listed blocks or every one.
  auto group = [&](int64_t g, float* o) {
    if (skip) dot16r_q4_0_at(groups + g * qrow, xs, ss, static_cast<int>(n), list, count, o);
    else dot16r_q4_0(groups + g * qrow, xs, ss, static_cast<int>(n), d, o);
  };
  if (n == 1 && total >= 2) {
    // Groups g and g + half together: two streams from memory for each thread, as interleaved_products.
    const int64_t half = total / 2;
    pool.parallel_for(half, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        if (skip) dot16r2_q4_0_at(groups + p * qrow, groups + (p + half) * qrow, xq.data(), ts, list, count, y + 16 * p, y + 16 * (p + half));
        else dot16r2_q4_0(groups + p * qrow, groups + (p + half) * qrow, xq.data(), ts, d, y + 16 * p, y + 16 * (p + half));
      }
    }, 2);
    if (total % 2) group(total - 1, y + 16 * (total - 1));
    return count;
  }
  pool.parallel_for(total, [&](int64_t g0, int64_t g1) {
    float o[64];
    for (int64_t g = g0; g < g1; ++g) {
      group(g, o);
      for (int64_t t = 0; t < n; ++t) std::copy(o + 16 * t, o + 16 * t + 16, y + t * w.ne1 + 16 * g);
    }
  }, 2);
  return count;
}

bool one_token_own_inputs(thread_pool& pool, std::span<const tensor_view> ws, std::span<const float* const> xs, std::span<float* const> ys) {
  const tensor_view& w0 = ws[0];
  const int64_t m = static_cast<int64_t>(ws.size()), d = w0.ne0, rows = w0.ne1;
  for (const tensor_view& w : ws)
    if (w.type != w0.type || w.ne0 != d || w.ne1 != rows || w.interleaved16 != w0.interleaved16) return false;
  if (w0.type == tensor_type::q4_0 && w0.interleaved16 && rows % 32 == 0) {
    const int64_t qrow = d / qk8_0, half = rows / 32;  // pairs of groups per matrix: g and g + half
    thread_local std::vector<block_q8_0> xq;
    thread_local std::vector<q8_0_terms> terms;
    xq.resize(static_cast<size_t>(m * qrow)), terms.resize(static_cast<size_t>(m * qrow));
    for (int64_t j = 0; j < m; ++j) {
      quantize_row_q8_0(xs[static_cast<size_t>(j)], xq.data() + j * qrow, d);
      q8_0_block_terms(xq.data() + j * qrow, qrow, terms.data() + j * qrow);
    }
    const block_q8_0* x = xq.data();  // the calling thread's, read by the workers
    const q8_0_terms* t = terms.data();
    pool.parallel_for(m * half, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t j = p / half, g = p % half;
        const auto* groups = reinterpret_cast<const block_q4_0x16*>(ws[static_cast<size_t>(j)].data);
        float* y = ys[static_cast<size_t>(j)];
        dot16r2_q4_0(groups + g * qrow, groups + (g + half) * qrow, x + j * qrow, t + j * qrow, d, y + 16 * g, y + 16 * (g + half));
      }
    }, 2);
    return true;
  }
  if ((w0.type == tensor_type::q4_k || w0.type == tensor_type::q5_k || w0.type == tensor_type::q6_k) && !w0.interleaved16 && d % qk_k == 0) {
    const int64_t kb = d / qk_k;
    thread_local std::vector<block_q8_k> x8;
    x8.resize(static_cast<size_t>(m * kb));
    for (int64_t j = 0; j < m; ++j) quantize_row_q8_k(xs[static_cast<size_t>(j)], x8.data() + j * kb, d);
    const block_q8_k* x = x8.data();
    const tensor_type type = w0.type;
    pool.parallel_for(m * rows, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t j = r / rows, i = r % rows;
        ys[static_cast<size_t>(j)][i] = dot_k_quant_q8_k(type, ws[static_cast<size_t>(j)].row(i), x + j * kb, d);
      }
    }, 16);
    return true;
  }
  return false;
}

// Q4_K, Q5_K, Q6_K rows against Q8_K activations (where few tokens share a product).
float dot_k_quant_q8_k(tensor_type t, const void* row, const block_q8_k* x, int64_t d) {
  switch (t) {
    case tensor_type::q4_k: return dot_q4_k_q8_k(static_cast<const block_q4_k*>(row), x, d);
    case tensor_type::q5_k: return dot_q5_k_q8_k(static_cast<const block_q5_k*>(row), x, d);
    default: return dot_q6_k_q8_k(static_cast<const block_q6_k*>(row), x, d);
  }
}

// Products of Q4_K, Q5_K or Q6_K matrices (all of one type) as groups of sixteen rows (a Q4_K_M or
// Q5_K_M file's attention and FFN, the head of most quantized files), all reading the same input: the
// tokens quantized to Q8_K once (Q4_K, Q5_K: with their group sums); one pass over every matrix's groups — one
// token: groups g and g + half together (two streams a thread); several: each group against four
// tokens at a time, its bytes unpacked once for them —; the tail rows one at a time. Interleaved
// matrices (model::load) are read in place; a plain one (several tokens only: a sparse file's gate
// and up rows, a file under --mmap) has each group interleaved once into the thread's buffer and then
// read for every token, as Q4_0's plain rows are.
void k_quant_group_products(thread_pool& pool, std::span<const tensor_view* const> ws, const float* x, int64_t n, std::span<float* const> ys) {
  const tensor_type type = ws[0]->type;
  const bool q6 = type == tensor_type::q6_k, q5 = type == tensor_type::q5_k;
  const int64_t d = ws[0]->ne0, kb = d / qk_k;
  thread_local std::vector<block_q8_k> x8;
  thread_local std::vector<q8_k_group_sums> sums;
  x8.resize(static_cast<size_t>(n * kb)), sums.resize(static_cast<size_t>(n * kb));
  block_q8_k* const xs = x8.data();  // the calling thread's, read by the workers
  q8_k_group_sums* const gs = sums.data();
  auto quantize = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      quantize_row_q8_k(x + t * d, xs + t * kb, d);
      if (!q6) q8_k_block_group_sums(xs + t * kb, kb, gs + t * kb);
    }
  };
  if (n >= 16) pool.parallel_for(n, quantize);  // (a prompt's tokens: shared out)
  else quantize(0, n);
  const matrix_groups groups(ws, [](const tensor_view& w) { return w.interleaved16 ? w.interleaved_rows() : w.ne1 - w.ne1 % 16; });
  // Matrix m's group g, interleaved in place (16 rows' bytes a group).
  auto group_of = [&](size_t m, int64_t g) { return ws[m]->data + static_cast<size_t>(g) * 16 * ws[m]->row_bytes; };
  const int64_t total = groups.total();
  // Group g of matrix m (its bytes at group) against tokens t .. t + k - 1 (k <= 4).
  auto four_tokens = [&](const uint8_t* group, size_t m, int64_t g, int64_t t, int k) {
    const block_q8_k* px[4];
    const q8_k_group_sums* pg[4];
    for (int j = 0; j < 4; ++j) {
      const int64_t tj = std::min(t + j, n - 1);
      px[j] = xs + tj * kb, pg[j] = gs + tj * kb;
    }
    float o[64];
    if (q6) dot16r_q6_k(reinterpret_cast<const block_q6_kx16*>(group), px, k, d, o);
    else if (q5) dot16r_q5_k(reinterpret_cast<const block_q5_kx16*>(group), px, pg, k, d, o);
    else dot16r_q4_k(reinterpret_cast<const block_q4_kx16*>(group), px, pg, k, d, o);
    for (int j = 0; j < k; ++j) std::copy(o + 16 * j, o + 16 * j + 16, ys[m] + (t + j) * ws[m]->ne1 + 16 * g);
  };
  if (std::any_of(ws.begin(), ws.end(), [](const tensor_view* w) { return !w->interleaved16; })) {
    pool.parallel_for(total, [&](int64_t g0, int64_t g1) {
      thread_local std::vector<uint8_t> rows, buffer;
      rows.resize(16 * ws[0]->row_bytes), buffer.resize(16 * ws[0]->row_bytes);
      for (int64_t gg = g0; gg < g1; ++gg) {
        size_t m;
        int64_t g;
        groups.where(gg, m, g);
        const tensor_view& w = *ws[m];
        const uint8_t* group = group_of(m, g);
        if (!w.interleaved16) {
          for (int64_t i = 0; i < 16; ++i) std::memcpy(rows.data() + i * w.row_bytes, w.row(16 * g + i), w.row_bytes);
          if (q6) interleave_q6_kx16(reinterpret_cast<const block_q6_k*>(rows.data()), kb, reinterpret_cast<block_q6_kx16*>(buffer.data()));
          else if (q5) interleave_q5_kx16(reinterpret_cast<const block_q5_k*>(rows.data()), kb, reinterpret_cast<block_q5_kx16*>(buffer.data()));
          else interleave_q4_kx16(reinterpret_cast<const block_q4_k*>(rows.data()), kb, reinterpret_cast<block_q4_kx16*>(buffer.data()));
          group = buffer.data();
        }
        for (int64_t t = 0; t < n; t += 4) four_tokens(group, m, g, t, static_cast<int>(std::min<int64_t>(4, n - t)));
      }
    });
  } else if (n == 1 && total >= 2) {
    const int64_t half = total / 2;
    pool.parallel_for(half, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        size_t ma, mb;
        int64_t ga, gb;
        groups.where(p, ma, ga);
        groups.where(p + half, mb, gb);
        float* oa = ys[ma] + 16 * ga;
        float* ob = ys[mb] + 16 * gb;
        if (q6) dot16r2_q6_k(reinterpret_cast<const block_q6_kx16*>(group_of(ma, ga)), reinterpret_cast<const block_q6_kx16*>(group_of(mb, gb)), xs, d, oa, ob);
        else if (q5) dot16r2_q5_k(reinterpret_cast<const block_q5_kx16*>(group_of(ma, ga)), reinterpret_cast<const block_q5_kx16*>(group_of(mb, gb)), xs, gs, d, oa, ob);
        else dot16r2_q4_k(reinterpret_cast<const block_q4_kx16*>(group_of(ma, ga)), reinterpret_cast<const block_q4_kx16*>(group_of(mb, gb)), xs, gs, d, oa, ob);
      }
    }, 2);
    if (total % 2) {
      size_t m;
      int64_t g;
      groups.where(total - 1, m, g);
      four_tokens(group_of(m, g), m, g, 0, 1);
    }
  } else {
    grouped_products(pool, total, n, [&](int64_t gg, int64_t t, int k) {
      size_t m;
      int64_t g;
      groups.where(gg, m, g);
      four_tokens(group_of(m, g), m, g, t, k);
    });
  }
  for (size_t m = 0; m < ws.size(); ++m) {
    const tensor_view& w = *ws[m];
    for (int64_t r = groups.rows(m); r < w.ne1; ++r)
      for (int64_t t = 0; t < n; ++t) ys[m][t * w.ne1 + r] = dot_k_quant_q8_k(type, w.row(r), xs + t * kb, d);
  }
}

// Whether the sixteen-row K-quant kernels take a product of w with n tokens: interleaved matrices
// always; plain Q4_K and Q5_K rows from four tokens on, plain Q6_K rows (model::load keeps them plain: the head
// of most quantized files, a Q4_K_M file's attn_v and part of its ffn_down) from sixteen, where the
// float tile took them before (a Q4_K_M ~1B file's pp512 +14-16%); below that, each row against the
// tokens in place (Q6_K four tokens a row). Interleaved at load, Q6_K decoded 4-19% slower there (four
// alternations on a 2 vCPU Zen 4): its sixteen-row kernel reads memory no faster than one row at a
// time, and the head's 54 MB went through it.
bool k_quant_row_groups(const tensor_view& w, int64_t n) {
  if (w.type == tensor_type::q6_k) return w.interleaved16 || (n >= gemm_min_tokens && w.ne0 % qk_k == 0 && w.ne1 >= 16);
  return (w.type == tensor_type::q4_k || w.type == tensor_type::q5_k) && (w.interleaved16 || (n >= 4 && w.ne0 % qk_k == 0 && w.ne1 >= 16));
}

// Whether the sixteen-row kernels (interleaved_products) take a product of w with n tokens: interleaved
// Q4_0 matrices always; Q4_0 rows in plain order from four tokens on (below that, each row against the
// tokens in place beats interleaving them first).
bool sixteen_row_groups(const tensor_view& w, int64_t n) {
  return w.type == tensor_type::q4_0 && (w.interleaved16 || (n >= 4 && w.ne0 % qk4_0 == 0 && w.ne1 >= 16));
}

// F16 rows interleaved sixteen at a time: groups of them against four tokens at a time; the plain tail
// rows alone.
void interleaved_f16_products(thread_pool& pool, const tensor_view& w, const float* x, int64_t n, float* y) {
  const int64_t d = w.ne0, rows = w.ne1;
  const int64_t groups = w.interleaved_rows() / 16;
  const auto* packed = reinterpret_cast<const uint16_t*>(w.data);
  if (n == 1 && groups >= 2) {
    // One token: groups g and g + half together, two streams from memory for each thread.
    const int64_t half = groups / 2;
    pool.parallel_for(half, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) dot16r2_f16(packed + p * 16 * d, packed + (p + half) * 16 * d, x, d, y + 16 * p, y + 16 * (p + half));
    }, 2);
    if (groups % 2) dot16r_f16(packed + (groups - 1) * 16 * d, &x, 1, d, y + 16 * (groups - 1));
    for (int64_t r = 16 * groups; r < rows; ++r) y[r] = row_dot(w, r, x, nullptr);
    return;
  }
  grouped_products(pool, groups, n, [&](int64_t g, int64_t t, int k) {
    const float* xs[4];
    for (int j = 0; j < 4; ++j) xs[j] = x + std::min(t + j, n - 1) * d;
    float o[64];
    dot16r_f16(packed + g * 16 * d, xs, k, d, o);
    for (int j = 0; j < k; ++j) std::copy(o + 16 * j, o + 16 * j + 16, y + (t + j) * rows + 16 * g);
  });
  for (int64_t r = 16 * groups; r < rows; ++r)
    for (int64_t t = 0; t < n; ++t) y[t * rows + r] = row_dot(w, r, x + t * d, nullptr);
}

}  // namespace hotcold
