#pragma once
// A weight row's work for any row type, through the kernel table (kernels/cpu/row_kernels.hpp): its dot
// product with an input, a multiple of it added to a sum, the input quantized once for every row that
// reads Q8_0, and the prefetches that bring scattered rows in ahead of use. The sparse FFN, the
// predictor, the hot/cold split and the actors all read rows through these.
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/dot.hpp"
#include "kernels/cpu/quants.hpp"
#include "kernels/cpu/row_kernels.hpp"
#include "model/model.hpp"

namespace hotcold {

// The CPU kernels for rows of type t (kernels/cpu/row_kernels.hpp); throws std::logic_error for a type
// the engine does not compute with (model loading refuses those first).
const kernels::row_kernels& row_kernels_of(tensor_type t);
// Row r of w times x; Q8_0/Q4_0 rows use xq, x already quantized to Q8_0 (kernels::quantize_row_q8_0).
float row_dot(const tensor_view& w, int64_t r, const float* x, const kernels::block_q8_0* xq);
// Whether row_dot wants the quantized input for rows of this type.
inline bool wants_q8_input(tensor_type t) { return kernels::input_format_of(t) == kernels::input_format::q8_0; }
// n inputs of d floats quantized to Q8_0 for rows of w's type, once for every row that reads them;
// null when w's rows read floats.
using q8_rows = std::vector<kernels::block_q8_0>;
std::shared_ptr<q8_rows> quantize_for_rows(const tensor_view& w, const float* in, int64_t n, int64_t d);
// The same into `out` (grown as needed, kept between calls): its data, or null.
const kernels::block_q8_0* quantize_for_rows(const tensor_view& w, const float* in, int64_t n, int64_t d, q8_rows& out);
// y += a * row r of w.
void row_axpy(const tensor_view& w, int64_t r, float a, float* y);
// y += a[0] row r[0] + ... + a[3] row r[3]: one pass over y for four rows where the type has it.
void row_axpy4(const tensor_view& w, const int32_t* r, const float* a, float* y);
// A cache line to be read soon: not kept (prefetchnta) where the CPU reads scattered rows best so,
// into L1 (prefetcht0) where non-temporal hints slow it down (kernels::cpu().prefetch_nta). An asm
// statement, not __builtin_prefetch: GCC counts a function that only prefetches as free of effects
// and deletes calls to it (all the FFN's prefetches were gone at -O1 and above before this).
inline void prefetch_line(const void* p, bool nta) {
#if defined(__x86_64__) || defined(__i386__)
  if (nta) asm volatile("prefetchnta %0" : : "m"(*static_cast<const char*>(p)));
  else asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
#else
  __builtin_prefetch(p, 0, nta ? 0 : 3);
#endif
}
inline void prefetch_line(const void* p) { prefetch_line(p, kernels::cpu().prefetch_nta); }
// A cache line for later: into L2 (prefetcht1), leaving L1's fill buffers to the lines read next.
inline void prefetch_line_l2(const void* p) {
#if defined(__x86_64__) || defined(__i386__)
  asm volatile("prefetcht1 %0" : : "m"(*static_cast<const char*>(p)));
#else
  __builtin_prefetch(p, 0, 2);
#endif
}
// Row r whole into L2.
inline void prefetch_row_l2(const tensor_view& w, int64_t r) {
  const char* p = reinterpret_cast<const char*>(w.row(r));
  for (size_t off = 0; off < w.row_bytes; off += 64) prefetch_line_l2(p + off);
}
// Asks the memory system for row r ahead of its use.
inline void prefetch_row(const tensor_view& w, int64_t r) {
  const char* p = reinterpret_cast<const char*>(w.row(r));
  const bool nta = kernels::cpu().prefetch_nta;
  for (size_t off = 0; off < w.row_bytes; off += 64) prefetch_line(p + off, nta);
}
// Asks for row r's first two cache lines only: enough to start the hardware's stream along it
// (scattered rows, where whole-row prefetches flood the miss buffers).
inline void prefetch_row_start(const tensor_view& w, int64_t r) {
  const char* p = reinterpret_cast<const char*>(w.row(r));
  const bool nta = kernels::cpu().prefetch_nta;
  prefetch_line(p, nta);
  if (w.row_bytes > 64) prefetch_line(p + 64, nta);
}
// A row to be read soon, as suits its length: short rows (Q4_0, Q8_0 at n_embd 2048: 1-2 KiB) are too
// short for the hardware's stream to get going and are asked for whole; long rows (F16, F32) get their
// first lines only (asking for all of a 4 KiB row floods the miss buffers: measured 2x slower).
inline constexpr size_t short_row_bytes = 2304;
inline void prefetch_row_ahead(const tensor_view& w, int64_t r) {
  if (w.row_bytes <= short_row_bytes) prefetch_row(w, r);
  else prefetch_row_start(w, r);
}
// Neurons among ids[0..count) whose value is non-zero for any of n tokens that chose it (hidden and
// chosen: n x n_ff; chosen null: every token chose every id): the down rows a sparse FFN reads
// (those of the neurons that fired, once for the tokens together).
int64_t fired_rows(const float* hidden, const uint8_t* chosen, int64_t n, int64_t n_ff, const int32_t* ids, int64_t count);
// Whether w's rows are floats (F16, BF16, F32), dotted in place; an absent tensor passes.
inline bool float_rows(const tensor_view& w) {
  return !w || w.type == tensor_type::f16 || w.type == tensor_type::bf16 || w.type == tensor_type::f32;
}

// Rows r of w0 and w1 (of one float type) against up to four vectors.
inline void rows2_dot(const tensor_view& w0, const tensor_view& w1, int64_t r, const float* const* xs, int m, float* o0, float* o1) {
  const auto* h0 = reinterpret_cast<const uint16_t*>(w0.row(r));
  const auto* h1 = reinterpret_cast<const uint16_t*>(w1.row(r));
  if (w0.type == tensor_type::f16) kernels::dot2n_f16(h0, h1, xs, m, w0.ne0, o0, o1);
  else if (w0.type == tensor_type::bf16) kernels::dot2n_bf16(h0, h1, xs, m, w0.ne0, o0, o1);
  else kernels::dot2n_f32(reinterpret_cast<const float*>(w0.row(r)), reinterpret_cast<const float*>(w1.row(r)), xs, m, w0.ne0, o0, o1);
}
// Row r of w (of a float type) against up to four vectors.
inline void row1_dot(const tensor_view& w, int64_t r, const float* const* xs, int m, float* o) {
  if (w.type == tensor_type::f16) kernels::dotn_f16(reinterpret_cast<const uint16_t*>(w.row(r)), xs, m, w.ne0, o);
  else if (w.type == tensor_type::bf16) kernels::dotn_bf16(reinterpret_cast<const uint16_t*>(w.row(r)), xs, m, w.ne0, o);
  else kernels::dotn_f32(reinterpret_cast<const float*>(w.row(r)), xs, m, w.ne0, o);
}

// Fetching the scattered rows of the neurons ahead (prefetch_row_ahead): long rows two neurons ahead,
// short ones four, gate, up and down rows together (the down row too, as nearly every chosen neuron
// fires; docs/performance.md).
struct neuron_prefetch {
  const hparams& hp;
  const tensor_view &gate, &up, &down_t;
  bool whole = up.row_bytes <= short_row_bytes;
  int64_t distance() const { return whole ? 4 : 2; }
  void ahead(int64_t r) const {
    prefetch_row_ahead(up, r);
    if (hp.gated_ffn) prefetch_row_ahead(gate, r);
    if (down_t) prefetch_row_ahead(down_t, r);  // nearly every chosen neuron fires (F16: -5% a neuron)
  }
};


// Collects (row, coefficient) pairs and adds them four at a time.
class axpy_batcher {
 public:
  axpy_batcher(const tensor_view& w, float* y) : w_(w), y_(y) {}
  ~axpy_batcher() { flush(); }
  void add(int32_t r, float a) {
    r_[n_] = r, a_[n_] = a;
    if (++n_ == 4) row_axpy4(w_, r_, a_, y_), n_ = 0;
  }
  void flush() {
    for (int k = 0; k < n_; ++k) row_axpy(w_, r_[k], a_[k], y_);
    n_ = 0;
  }

 private:
  const tensor_view& w_;
  float* y_;
  int32_t r_[4];
  float a_[4];
  int n_ = 0;
};

}  // namespace hotcold
