#pragma once
// One FFN neuron's worth of work over a weight row, for any row type: the pieces the reference
// forward pass, the batch path and the hot/cold executors share.
#include <atomic>
#include <bit>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/quants.hpp"
#include "engine/neuron_rules.hpp"
#include "engine/stage.hpp"
#include "kernels/cpu/row_kernels.hpp"
#include "model/arch.hpp"
#include "model/model.hpp"

namespace hotcold {

// The CPU kernels for rows of type t (kernels/cpu/row_kernels.hpp); throws std::logic_error for a type
// the engine does not compute with (model loading refuses those first).
const kernels::row_kernels& row_kernels_of(tensor_type t);
// Row r of w times x; Q8_0/Q4_0 rows use xq, x already quantized to Q8_0 (kernels::quantize_row_q8_0).
float row_dot(const tensor_view& w, int64_t r, const float* x, const kernels::block_q8_0* xq);
// Whether row_dot wants the quantized input for rows of this type.
inline bool wants_q8_input(tensor_type t) {
  const kernels::row_kernels* k = kernels::row_kernels_for(t);
  return k && k->q8_input;
}
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
// A layer's FFN rows as the sparse routines read them: the gate (absent in a non-gated FFN), up and
// transposed down rows (down_t absent: the down product is done elsewhere), in the model's tensors or
// a device's copy.
struct neuron_rows {
  const tensor_view& gate;
  const tensor_view& up;
  const tensor_view& down_t;
};

// Neurons ids[0..count) and where their rows sit: rows[k] (their ids in the model's tensors, or their
// slots in a device's copy).
struct neuron_set {
  const int32_t* ids;
  const int32_t* rows;
  int64_t count;
  neuron_set from(int64_t k0, int64_t k1) const { return {ids + k0, rows + k0, k1 - k0}; }
};

// One token's input to the FFN and where its results go.
struct token_ffn_io {
  const float* in;                 // (d) the normalized input
  const kernels::block_q8_0* xq;   // in quantized to Q8_0 where the rows want it, else null
  float* hidden;                   // (n_ff) each computed neuron's value, at its id
  float* acc;                      // (d) += value x the neuron's down row (with down_t)
  const float* gates = nullptr;    // (n_ff) a thresholded layer's gate values, computed already
};

// One token's FFN over the neurons of `set`. gates given: the gate rows are not read, and only the
// neurons passing the threshold read their up rows. The rows are scattered, so the next neurons' rows
// are prefetched while one computes.
void token_neurons(const hparams& hp, float threshold, const neuron_rows& w, const neuron_set& set, const token_ffn_io& io);

// A batch's inputs to the FFN: n tokens' normalized inputs (n x d), quantized to Q8_0 where the rows
// want it (n x d/32 blocks, else null), and which neurons each token chose (n x n_ff bytes; may be
// null for one token).
struct batch_ffn_input {
  const float* in;
  const kernels::block_q8_0* xq;
  const uint8_t* chosen;
  int64_t n, d, n_ff;
};

// For the neurons of `set`: each token that chose the neuron computes its hidden value into hidden
// (n x n_ff) and adds value x its down row into acc (n x d). Each row is read once. With one token,
// every neuron given is computed (they are its choice; x.chosen may be null).
void batch_neurons(const hparams& hp, float threshold, const neuron_rows& w, const neuron_set& set, const batch_ffn_input& x, float* hidden, float* acc);

// The chosen neurons ids[0..count) (ascending) handed out to T threads in fixed pieces. Thread t owns
// a shard — an equal share of the chosen, ids[count t / T, count (t + 1) / T) — cut into `per_shard`
// ranges of halving width (a half, a quarter, ..., the rest); it takes its own pieces first, then
// those of the others' that no one has started, so a thread slowed by a neighbour on its core does not
// keep the rest waiting (+2.7-4.6% on a sparse Q4_0 token against fixed halves, alternately in one
// process; equal quarters gained 1-2%). Shares of the chosen, not of the ids: a file whose neurons
// prepare ordered most often firing first (docs/model-files.md) has most of a token's choice in its
// first ids, and shards of the ids gave the first thread most of the work (a sparse Q4_0 token 5-6%
// slower than the unordered file's, 2 threads). Each piece adds into its own accumulator and sum() adds those in piece order: the
// same sums whichever thread took which piece (a sum that depended on the timing would flip an
// activation's Q8_0 rounding now and then, and the logits with it); with every neuron chosen, the
// same pieces as the dense pass.
class neuron_shards {
 public:
  neuron_shards(int64_t count, int threads, int per_shard = 5);
  int64_t pieces() const { return static_cast<int64_t>(bounds_.size()) - 1; }
  // The next non-empty piece for thread t: ids[k0..k1), piece number `piece`. False when none is left.
  bool take(int t, int64_t& k0, int64_t& k1, int64_t& piece);
  // Once every piece has been taken: out (width floats) = the non-empty pieces' accumulators (piece
  // p's at acc + p * width), in piece order.
  void sum(const float* acc, int64_t width, float* out) const;

 private:
  struct alignas(64) shard {
    std::atomic<int> next{0};  // its first piece no thread has taken yet
  };
  std::vector<int64_t> bounds_;  // piece p is ids[bounds_[p], bounds_[p + 1])
  std::unique_ptr<shard[]> shards_;
  int threads_, per_shard_;
};

class thread_pool;

// Every piece of `pieces` on the pool's threads (each its own shard's first): work(k0, k1, acc) for
// ids[k0..k1), acc the piece's own `width` floats of scratch (grown as needed), zeroed first when out
// is given; then out (when given) = their sum in piece order. Each thread's share is one interval
// of `span` (when it names a recorder).
void run_pieces(thread_pool& pool, neuron_shards& pieces, int64_t width, std::vector<float>& scratch, float* out,
                const std::function<void(int64_t k0, int64_t k1, float* acc)>& work, const trace_span& span = {});

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
