#pragma once
// The sparse FFN's passes over chosen neurons: one token's, a batch's (each row read once for the
// tokens that chose it), and the neurons handed out to threads in pieces; what the forward pass's FFN
// block, the hot/cold split and the cold pool share.
#include <atomic>
#include <bit>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "engine/neuron_rules.hpp"
#include "engine/rows.hpp"
#include "engine/step_part.hpp"
#include "model/arch.hpp"
#include "model/model.hpp"

namespace hotcold {

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

}  // namespace hotcold
