#pragma once
// A layer's FFN for a step's tokens: which neurons each token computes — every one (dense), the
// predictor's choice (sparse), or the ones that truly fire (oracle) — and how: matrix products for
// many tokens or every neuron, the chosen neurons' rows on the context's workers, an executor (the
// hot/cold split), a dense layer the hot device holds whole, or a mixture of experts (moe_block). Its
// step returns what it did as a value (ffn_step_counts), which the context adds up and the actors
// pass on to their stats.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/moe_block.hpp"
#include "engine/predictor.hpp"
#include "engine/ram_tier.hpp"
#include "engine/sparse_ffn.hpp"
#include "engine/step_state.hpp"

namespace hotcold {

// Computes a layer's chosen FFN neurons on a sparse file (one with ffn_down_t): each token computes
// the neurons it chose (x.chosen) of the union of the tokens' choices, into hidden (n x n_ff, zeroed)
// and out (n x n_embd) = the sum of hidden[t][i] * ffn_down_t row i. Without one the context computes
// them on its own threads; engine/hot_cold_ffn.hpp is the hot/cold split by placement.
class ffn_executor {
 public:
  virtual ~ffn_executor() = default;
  // step: the context's step number (for traces).
  virtual void run_batch(int64_t step, int64_t layer, const batch_ffn_input& x, std::span<const int32_t> union_of_chosen, float* hidden,
                         float* out) = 0;
  // Of neurons ids (ascending) of layer il, those whose rows the host reads (the rest are the device's).
  virtual void keep_cold(int64_t il, std::vector<int32_t>& ids) const = 0;
};

// Per-layer counts of how the FFN chose its neurons (when stats are enabled).
struct ffn_layer_stats {
  int64_t tokens = 0;
  int64_t neurons = 0;          // n_ff x tokens
  int64_t computed = 0;         // neurons the FFN computed
  int64_t truly_active = 0;     // neurons whose activation is nonzero (from a dense computation)
  int64_t active_computed = 0;  // truly active and computed
};

// How sparse-mode batches chose, per layer: predictor + union of active sets, or dense.
struct batch_layer_choice {
  int64_t sparse = 0, dense = 0;  // batches
  double union_fraction = 0;      // last sparse batch's union / n_ff
};

class ffn_block {
 public:
  ffn_block(block_env& env, moe_block& moe);
  // Layer `layer`'s FFN for B's tokens from its normalized input `in` and what its predictor reads,
  // into out (n x n_embd). may_go_dense: a layer may skip its predictor and compute every neuron when
  // that reads fewer bytes (prompt batches); steps of several sequences and single tokens keep each
  // token's own choice.
  ffn_step_counts run(step_state& B, int64_t layer, const float* in, const float* pred_in, bool may_go_dense, float* out);
  // The disk tier's second guess of layer il's rows, before its attention, from the layer's input B.x
  // (ram_tier::read_ahead_at_input; sparse mode alone).
  void read_ahead_at_input(const step_state& B, int64_t il);

  // A whole layer on a GPU (attention and its dense FFN in one job, attention_block::run_with_ffn): the
  // FFN's part of that job (weights, activation, where each neuron's value goes, where something reads
  // them), and what the layer then counts and records, as gpu_job does after its own job.
  bool whole_on_gpu(int64_t layer) const;
  devices::dense_ffn_job gpu_part(step_state& B, int64_t layer) const;
  ffn_step_counts gpu_part_done(step_state& B, int64_t layer);

  void set_executor(std::shared_ptr<ffn_executor> e) { executor_ = std::move(e); }
  void set_device_layers(std::shared_ptr<const device_layers> d) { predictor_.set_device_layers(std::move(d)); }
  void enable_stats(bool on) { stats_on_ = on; }
  const std::vector<ffn_layer_stats>& stats() const { return stats_; }
  const std::vector<batch_layer_choice>& batch_choices() const { return choices_; }
  uint64_t predictor_device_read() const { return predictor_.device_read(); }

 private:
  // How a layer's FFN runs a batch: sparse (where it pays) or every neuron, the oracle's choice, every
  // neuron first for the stats or margins, as matrix products or neuron by neuron.
  struct plan {
    bool sparse = false, oracle = false, choose = false, all_first = false, margins = false, as_matrices = false;
    int cost_class = 0;  // the batch size's class in batch_cost
  };
  ffn_step_counts run(step_state& B, int64_t layer, const layer_weights& l, const workers& on, const float* in, const float* pred_in, bool may_go_dense,
                      float* out);
  ffn_step_counts gpu_job(step_state& B, int64_t layer, const float* in, const float* pred_in, float* out);  // a GPU's whole FFN
  plan plan_for(int64_t layer, const layer_weights& l, int64_t n, bool may_go_dense);
  // Each token's chosen neurons (B.chosen) and their union (union_), as the plan says.
  void choose(step_state& B, int64_t layer, const float* pred_in, const plan& p);
  // Every neuron of n tokens: gate and up as matrix products, then the activation into h (n x n_ff);
  // g: scratch (n x n_ff) for the gate. With margins, each token's firing margins go to B.margin.
  void every_neuron(step_state& B, int64_t layer, const layer_weights& l, const workers& on, const float* in, float* g, float* h, bool margins);
  // The FFN as matrix products (every neuron), or the chosen neurons' rows (here or by the executor).
  // mask (n x n_ff, or null): the neurons each token chose, the others' values set to zero before the
  // down product (a sparse batch whose union is nearly every neuron).
  void as_matrices(step_state& B, int64_t layer, const layer_weights& l, const workers& on, const float* in, bool margins, float* out,
                   const uint8_t* mask = nullptr);
  void down_rows_by_blocks(step_state& B, const layer_weights& l, const workers& on, const float* h, float* out);
  // disk: the disk tier's use of the union's rows (where they sit, and a read still landing), or null.
  void chosen_rows(step_state& B, int64_t layer, const layer_weights& l, const workers& on, const float* in, bool choose, const ram_tier::use* disk,
                   float* out);
  // What the batch measured: the union's share, the stats, the observer's values, the rows read.
  ffn_step_counts record(step_state& B, int64_t layer, const layer_weights& l, const float* pred_in, const plan& p, int64_t down_blocks = -1);
  void observe(const step_state& B, int64_t layer, const float* pred_in, bool margins) const;

  block_env& env_;
  moe_block& moe_;
  predictor_runner predictor_;
  std::shared_ptr<ffn_executor> executor_;
  bool stats_on_ = false;
  std::vector<ffn_layer_stats> stats_;
  std::vector<int32_t> union_;  // the neurons a layer's tokens chose, ascending (scratch)
  // The disk tier's guesses' scratch (ram_tier::read_ahead_next, read_ahead_at_input), and the filter
  // that leaves a hot device's neurons out of them (none without an executor).
  ram_tier::guess_scratch guess_;
  ram_tier::id_filter host_only() const;
  // Measured per layer and batch-size class (log2 n): the union's share of n_ff (running average).
  struct batch_cost {
    static constexpr int classes = 10;
    double union_share[classes] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1};  // -1: not measured yet
    int64_t dense_since_probe[classes] = {};
  };
  std::vector<batch_cost> cost_;
  std::vector<batch_layer_choice> choices_;
};

}  // namespace hotcold
