#pragma once
// The CPU engine's forward pass: the recipe's layer loop (model/recipe.hpp) over the blocks of a
// step — the KV cache (engine/kv_cache.hpp), attention (engine/attention.hpp), the FFN
// (engine/ffn_block.hpp) or a mixture's experts (engine/moe_block.hpp) — then the head. One path for
// every architecture, where one token is a batch of one; split across the context's threads where the
// work is a loop over rows, neurons or heads. model/reference.hpp is the readable oracle it is tested
// against.
#include <algorithm>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "engine/attention.hpp"
#include "engine/ffn_block.hpp"
#include "engine/kv_cache.hpp"
#include "engine/moe_block.hpp"
#include "engine/step_state.hpp"
#include "engine/trace.hpp"

namespace hotcold {

// What a context's FFNs did since it was made, per layer: ffn_step_counts added up.
struct ffn_totals {
  std::vector<int64_t> computed, rows, down_rows;        // per layer (ffn_step_counts' fields)
  std::vector<int64_t> experts_chosen, experts_guessed;  // per layer; layer 0 guesses nothing
  std::vector<int64_t> expert_choices;                   // n_layer x n_expert (layer l's at l n_expert)
  uint64_t expert_device_bytes = 0;
  void add(int64_t layer, const ffn_step_counts& c);
};

class inference_context {
 public:
  using step_state = hotcold::step_state;
  using observer = step_observer;
  static constexpr int64_t max_batch = max_step_tokens;

  // n_ctx: positions the KV cache holds (0: the model's training context). n_seq: sequences whose KV
  // caches it holds (slots 0..n_seq-1; forward and forward_batch use slot 0). kv: the cache's types
  // (kv_cache; std::invalid_argument for one it does not hold).
  inference_context(std::shared_ptr<const model> m, int64_t n_ctx, int n_threads, int64_t n_seq = 1, kv_types kv = {});

  // Runs `token` at position `pos` of slot 0 (positions 0..pos-1 must have run) and returns the logits
  // over the vocabulary; valid until the next call. Starting again at position 0 begins a new sequence.
  std::span<const float> forward(token_id token, int64_t pos);
  // Runs tokens[0..n) at positions pos..pos+n-1 of slot 0 as batches of at most max_batch: every
  // weight row is read once per batch. The same values as n forward() calls (up to summation order): in
  // sparse mode each token computes exactly its own prediction's neurons, and a layer computes every
  // neuron instead where the union it measured at this batch size makes that read fewer bytes. Returns
  // the last token's logits, or every token's (n x n_vocab) with all_logits.
  std::span<const float> forward_batch(std::span<const token_id> tokens, int64_t pos, bool all_logits = false);
  // One step of several sequences: token t at positions[t] of slot seqs[t] (each sequence's earlier
  // positions must have run); each token attends to its own sequence. Every token's logits (n x n_vocab).
  std::span<const float> forward_step(std::span<const token_id> tokens, std::span<const int64_t> seqs, std::span<const int64_t> positions);
  // Runs tokens[0..n) from position 0 of slot 0 as forward_batch does and returns every token's hidden
  // state after the final norm (n x n_embd: what the head would read; an embedding before pooling).
  std::vector<float> hidden_states(std::span<const token_id> tokens);

  // ---- One step in parts, for a pipeline whose actors run them (actors/pipeline.hpp). A step's
  // activations live in a state of the caller's: step_begin; per layer step_attention and the FFN —
  // the context's own (step_ffn), or computed elsewhere from step_ffn_inputs and handed back to
  // step_ffn_done —; then step_logits. Checked as forward_step is, at most max_batch tokens. The parts of
  // different states may interleave but not run at the same time (they share workers and scratch).
  void step_begin(step_state& s, std::span<const token_id> tokens, std::span<const int64_t> seqs, std::span<const int64_t> positions);
  void step_attention(step_state& s, int64_t layer);
  struct ffn_inputs {
    const float* in;       // (n, n_embd) the FFN's normalized input
    const float* pred_in;  // (n, n_embd) what the layer's predictor reads
    int64_t n;             // tokens in the step
    int64_t step;          // the step's number (for traces)
  };
  ffn_inputs step_ffn_inputs(const step_state& s) const;  // valid from step_attention(layer) to step_ffn_done(layer)
  ffn_step_counts step_ffn(step_state& s, int64_t layer);
  // A layer whose attention and dense FFN a GPU holds, as one job (one wait, not two): the layer's
  // output in s, its FFN's counts; nothing (and nullopt) for any other layer.
  std::optional<ffn_step_counts> step_whole_layer(step_state& s, int64_t layer);
  // out: (n, n_embd) the FFN's output, computed elsewhere; c: what that did.
  void step_ffn_done(step_state& s, int64_t layer, const float* out, const ffn_step_counts& c);
  // Logits of the state's tokens `rows` (ascending; rows.size() x n_vocab); valid until its next step.
  std::span<const float> step_logits(step_state& s, std::span<const int64_t> rows);
  // A range of layers on another host (docs/distributed.md): the residual stream x (n x n_embd) after
  // the layers before arrives instead of embeddings; step_layers runs layers first..last-1 (attention
  // and the context's own FFN), leaving s.x for the next host or the head. Checks x's size.
  void step_begin_hidden(step_state& s, std::span<const float> x, std::span<const int64_t> seqs, std::span<const int64_t> positions);
  void step_layers(step_state& s, int64_t first, int64_t last);

  // Sees named intermediates as they are computed (step_state.hpp; the names of engine/step_part.hpp's
  // `observed`: ffn_pred_in, ffn_act — a mixture's layer: each expert's weight, zero where not chosen —,
  // and whenever every neuron is computed ffn_margin and ffn_preact). Empty: no calls.
  void set_observer(observer o) { env_.watch = std::move(o); }
  // Records attention / predict / ffn / output intervals of every step (null: none); must outlive its use.
  void set_trace(trace_recorder* t) { env_.trace = t; }
  // The disk tier of a model loaded with its FFN rows left in the file (engine/ram_tier): each
  // layer's FFN has the rows it reads brought into place first.
  void set_disk_tier(std::shared_ptr<ram_tier> t) { env_.disk = std::move(t); }
  ram_tier* disk_tier() const { return env_.disk.get(); }
  trace_recorder* trace() const { return env_.trace; }
  int64_t steps() const { return steps_; }  // steps so far
  // Runs the chosen neurons of steps through `e` (null: the context's own threads).
  void set_ffn_executor(std::shared_ptr<ffn_executor> e) { ffn_.set_executor(std::move(e)); }
  // What the hot device holds besides hot FFN rows (null: nothing), given before the first step for
  // this context's positions, slots and KV type (std::invalid_argument otherwise).
  void set_device_layers(std::shared_ptr<const device_layers> d);
  const std::shared_ptr<const device_layers>& device() const { return env_.device; }
  // A mixture's experts on the hot device (null: all on the CPU); after set_device_layers, on its device.
  void set_device_experts(std::shared_ptr<device_experts> e);
  const std::shared_ptr<device_experts>& experts() const { return moe_.experts(); }
  // Bytes of weights read from the device's copies so far (hot FFN rows are the executor's to count).
  uint64_t device_read() const { return env_.device_read + ffn_.predictor_device_read(); }

  // Throws model_error for sparse mode on a model without predictors.
  void set_mode(ffn_mode m);
  ffn_mode mode() const { return env_.mode; }
  // Counts computed vs truly active neurons per layer; costs a dense FFN per token in sparse mode.
  void enable_stats(bool on) { ffn_.enable_stats(on); }
  const std::vector<ffn_layer_stats>& stats() const { return ffn_.stats(); }
  const std::vector<batch_layer_choice>& batch_choices() const { return ffn_.batch_choices(); }
  const ffn_totals& totals() const { return totals_; }

  // The KV cache's prefix store (engine/prefix_index.hpp: blocks of block_tokens positions, set by
  // the pipeline) and the moves of rows between it and the slots, carried out in order; between steps only.
  void reserve_prefix_store(int64_t blocks, int64_t block_tokens) { kv_.reserve_store(blocks, block_tokens); }
  int64_t prefix_store_blocks() const { return kv_.store_blocks(); }
  int64_t prefix_block_tokens() const { return kv_.block_tokens(); }
  uint64_t cache_position_bytes() const { return kv_.position_bytes(); }  // every layer's key and value rows of one position
  kv_cache& cache() { return kv_; }  // (between steps only: slot files)
  void apply(std::span<const cache_op> ops);

  int64_t n_ctx() const { return kv_.n_ctx(); }
  // Prompt tokens a step takes at most (llama.cpp's -ub; 1..max_batch, default max_batch): forward_batch's
  // batches, and the actor pipeline's prompt chunks.
  int64_t batch() const { return batch_; }
  void set_batch(int64_t n) { batch_ = std::clamp<int64_t>(n, 1, max_batch); }
  int64_t n_seq() const { return kv_.n_seq(); }
  kv_types cache_types() const { return kv_.types(); }
  const model& get_model() const { return *env_.m; }
  const std::shared_ptr<const model>& shared_model() const { return env_.m; }
  thread_pool& pool() { return pool_; }

 private:
  int64_t batch_ = max_batch;
  // A step of n tokens: B's buffers sized, its slots and positions, the step's number.
  void begin(step_state& B, int64_t n, const int64_t* seqs, const int64_t* positions);
  void embed(step_state& B, std::span<const token_id> tokens);
  ffn_step_counts ffn(step_state& B, int64_t layer, bool may_go_dense);  // the FFN, joined to the stream
  void run_layer(step_state& B, int64_t layer, bool may_go_dense);         // attention then the FFN (on a GPU that holds both: one job)
  bool whole_layer_job(int64_t layer) const;
  void add_ffn_output(step_state& B, int64_t layer, const float* out, ffn_step_counts& c);
  void head(step_state& B, std::span<const int64_t> rows, float* logits);  // the logits of these rows
  void normalized_rows(step_state& B, std::span<const int64_t> rows);      // the final norm into B.xn
  std::span<const float> run_batches(std::span<const token_id> tokens, std::span<const int64_t> seqs, std::span<const int64_t> positions, bool all_logits,
                                     bool may_go_dense);
  void run_batch(std::span<const token_id> tokens, const int64_t* seqs, const int64_t* positions, bool all_logits, bool may_go_dense, float* logits);
  void check_step(std::span<const token_id> tokens, std::span<const int64_t> seqs, std::span<const int64_t> positions) const;

  thread_pool pool_;
  std::vector<kernels::block_q8_0> xq_;  // activations quantized for Q8_0 / Q4_0 rows
  block_env env_;
  kv_cache kv_;
  attention_block attention_;
  moe_block moe_;
  ffn_block ffn_;
  ffn_totals totals_;
  int64_t steps_ = 0;
  step_state b_;                       // the batch path's own state (forward_batch, forward_step)
  std::vector<float> logits_;          // (n_vocab): forward's and forward_batch's last logits
  std::vector<float> batch_logits_;
};

}  // namespace hotcold
