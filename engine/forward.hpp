#pragma once
// The CPU engine's forward pass: one path for every architecture (a layer is model/recipe.hpp's
// recipe over the helpers of engine/layer_ops.hpp), where one token is a batch of one. Split across
// the context's threads where the work is a loop over rows, neurons or heads. model/reference.hpp is
// the readable oracle it is tested against.
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "kernels/cpu/quants.hpp"
#include "model/model.hpp"
#include "engine/device_experts.hpp"
#include "engine/device_layers.hpp"
#include "engine/sparse_ffn.hpp"
#include "engine/predictor.hpp"
#include "engine/thread_pool.hpp"
#include "engine/layer_ops.hpp"
#include "engine/trace.hpp"

namespace hotcold {

// How the FFN chooses its neurons.
//   dense:  every neuron (a sparse file's ffn_down_t is used as AXPY rows).
//   sparse: the layer's predictor picks the neurons (layers without one run dense).
//   oracle: the true activations pick them — every gate is computed, then only the neurons that
//           fired go through the sparse path; used to test the sparse path and to profile.
enum class ffn_mode { dense, sparse, oracle };

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
};

// Per-layer counts of how the FFN chose its neurons (when stats are enabled).
struct ffn_layer_stats {
  int64_t tokens = 0;
  int64_t neurons = 0;        // n_ff x tokens
  int64_t computed = 0;       // neurons the FFN computed
  int64_t truly_active = 0;   // neurons whose activation is nonzero (from a dense computation)
  int64_t active_computed = 0;  // truly active and computed
};

// A mixture of experts' router (docs/moe.md): for n tokens' logits (n x n_expert), each token's
// n_expert_used experts (the most probable after a softmax, ties to the lower number, most probable
// first) and their weights (probabilities, renormalized to sum 1 where hp.expert_weights_norm): n x k each.
void route_experts(const hparams& hp, const float* logits, int64_t n, int32_t* experts, float* weights);

class inference_context {
 public:
  // n_ctx: positions the KV cache holds (0: the model's training context).
  // n_seq: sequences whose KV caches it holds (slots 0..n_seq-1; forward and forward_batch use slot 0).
  // kv_type: the cache's values, f16 (llama.cpp's default: keys after RoPE and values rounded to
  // half precision as they are stored, read back as floats) or f32; std::invalid_argument otherwise.
  inference_context(std::shared_ptr<const model> m, int64_t n_ctx, int n_threads, int64_t n_seq = 1, tensor_type kv_type = tensor_type::f16);

  // Runs `token` at position `pos` (positions 0..pos-1 of this sequence must have run) and
  // returns the logits over the vocabulary; valid until the next call. Starting again at position 0
  // begins a new sequence: the cache is overwritten as positions run again.
  std::span<const float> forward(token_id token, int64_t pos);

  // Runs tokens[0..n) at positions pos..pos+n-1 as one batch (split into batches of at most
  // max_batch): every weight row is read once per batch instead of once per token. Gives the same
  // values as n forward() calls (up to summation order): in sparse mode each token still computes
  // exactly the neurons its own prediction chose; the union of the batch's chosen neurons is what
  // is read. A layer skips its predictor and computes every neuron (the dense result) when the union
  // it measured at this batch size makes that read fewer bytes (batch_cost). Returns the logits of
  // the last token, or of every token (n x n_vocab) with all_logits.
  std::span<const float> forward_batch(std::span<const token_id> tokens, int64_t pos, bool all_logits = false);
  static constexpr int64_t max_batch = 256;

  // One step of several sequences: token t at positions[t] of sequence slot seqs[t] (each sequence's
  // earlier positions must have run). Weight rows are read once for all of them; each token attends
  // to its own sequence only. Returns every token's logits (n x n_vocab).
  std::span<const float> forward_step(std::span<const token_id> tokens, std::span<const int64_t> seqs, std::span<const int64_t> positions);
  int64_t n_seq() const { return n_seq_; }

  // ---- One step in stages, for a pipeline whose actors run them (actors/pipeline.hpp). A step's
  // activations live in a step_state of the caller's (the context's own batch path has another). For a
  // state: step_begin; then per layer step_attention and the FFN — the context's own (step_ffn), or
  // computed elsewhere from step_ffn_inputs and handed back to step_ffn_done —; then step_logits.
  // forward_step is these stages in a row. Checks as forward_step does, and at most max_batch
  // tokens. The stages of different states may interleave but not run at the same time (they share
  // the context's workers and scratch).
  struct step_state;
  void step_begin(step_state& s, std::span<const token_id> tokens, std::span<const int64_t> seqs, std::span<const int64_t> positions);
  void step_attention(step_state& s, int64_t layer);
  // A stage of a pipeline across hosts (docs/distributed.md): the step's residual stream x (n x
  // n_embd, after the layers before this stage) arrives instead of the tokens' embeddings; then
  // step_layers runs layers first..last-1 (attention and the context's own FFN each), and s.x holds
  // the stream for the next stage, or step_logits the head's. Checks the slots and positions as
  // step_begin does, and x's size.
  void step_begin_hidden(step_state& s, std::span<const float> x, std::span<const int64_t> seqs, std::span<const int64_t> positions);
  void step_layers(step_state& s, int64_t first, int64_t last);
  struct ffn_inputs {
    const float* in;       // (n, n_embd) the FFN's normalized input
    const float* pred_in;  // (n, n_embd) what the layer's predictor reads
    int64_t n;             // tokens in the step
    int64_t step;          // the step's number (for traces)
  };
  ffn_inputs step_ffn_inputs(const step_state& s) const;  // valid from step_attention(layer) to step_ffn_done(layer)
  void step_ffn(step_state& s, int64_t layer);
  // out: (n, n_embd) the FFN's output; computed / read: neurons computed and rows read (counters).
  void step_ffn_done(step_state& s, int64_t layer, const float* out, int64_t computed, int64_t read, int64_t down_read);
  // Logits of the state's tokens `rows` (ascending; rows.size() x n_vocab); valid until its next step.
  std::span<const float> step_logits(step_state& s, std::span<const int64_t> rows);

  // A batch's run state (shapes in elements; rows of up to max_batch tokens, grown on use).
  struct step_state {
    std::vector<float> x, xn, xn2, layer_in, qkv, attn, proj, ffn_out;  // n x n_embd (qkv: n x (n_embd + 2 kv))
    std::vector<float> hidden, truth, gate;                             // n x n_ff (truth, gate: when every neuron is computed first)
    std::vector<float> margin, preact;                                  // n x n_ff, for the "ffn_margin" and "ffn_preact" observers
    q8_rows ffn_in_q8;                                                  // the FFN's input quantized to Q8_0, where its rows read that
    std::vector<uint8_t> chosen;                                        // n x n_ff
    std::vector<float> acc;                                             // threads x n x n_embd
    int64_t n = 0;                                                      // tokens in the step
    int64_t step = 0;                                                   // the context's step number
    std::vector<int64_t> seqs, positions;                               // n
    std::vector<int64_t> logit_rows;                                    // rows whose logits the head computes
    std::vector<int64_t> groups;                                        // attention's query groups (scratch)
    std::vector<float> angles;                                          // n x n_rot: RoPE's angles for a GPU's attention
    std::vector<int32_t> seqs32, positions32;                           // n: the same tokens' slots and positions, for a GPU
    const float* ffn_in = nullptr;                                      // this layer's FFN input (n x n_embd)
    const float* pred_in = nullptr;                                     // what its predictor reads (n x n_embd)
    std::vector<float> logits;                                          // step_logits' rows x n_vocab
    // A mixture of experts: the next layer's experts guessed from this layer's output (n x k), for
    // layer guessed_layer (-1: none).
    std::vector<int32_t> expert_guess;
    int64_t guessed_layer = -1;
  };

  // How sparse-mode batches chose, per layer: predictor + union of active sets, or dense.
  struct batch_layer_choice {
    int64_t sparse = 0, dense = 0;   // batches
    double union_fraction = 0;       // last sparse batch's union / n_ff
  };
  const std::vector<batch_layer_choice>& batch_choices() const { return choices_; }

  // Sees named intermediates as they are computed: (name, layer, values), per token in token order,
  // with the names of engine/stage.hpp's `observed`:
  // ffn_pred_in — what the layer's activation predictor reads (n_embd), in every mode;
  // ffn_act — the FFN's hidden vector after the activation (n_ff), whose nonzeros are the
  // neurons that fired (or were computed, in sparse mode); a mixture of experts' layer: each
  // expert's weight for the token (n_expert), zero where the router did not choose it;
  // ffn_margin — whenever every neuron is computed (dense and oracle modes, or with stats): per
  // neuron how far it is from firing, positive exactly when it does (firing_margin: the gate; up for
  // Falcon; min(gate, up) for dReLU; |act| - t_l for a thresholded activation, |act| without a
  // threshold); ffn_preact — with ffn_margin, each neuron's pre-activation (the gate; up without one).
  // Empty function: no calls.
  using observer = std::function<void(std::string_view name, int64_t layer, std::span<const float> values)>;
  void set_observer(observer o) { observer_ = std::move(o); }

  // Records attention / predict / ffn / output intervals of every step (null: none). The recorder
  // must outlive the context's use of it.
  void set_trace(trace_recorder* t) { trace_ = t; }
  trace_recorder* trace() const { return trace_; }
  int64_t steps() const { return steps_; }  // forward / forward_batch calls so far

  // Runs the chosen neurons of one-token steps through `e` (empty: the context's own threads).
  void set_ffn_executor(std::shared_ptr<ffn_executor> e) { executor_ = std::move(e); }

  // What the hot device holds besides hot FFN rows (null: nothing): the attention (and KV cache),
  // predictors, dense FFNs and head it holds run on its queue over its copies. Given before the first
  // step, for this context's positions, sequences and KV type (std::invalid_argument otherwise).
  void set_device_layers(std::shared_ptr<const device_layers> d);
  const std::shared_ptr<const device_layers>& device() const { return device_; }
  // A mixture's experts on the hot device (null: every expert on the CPU): each step's routed experts
  // that a slot holds are computed there while the CPU's workers compute the rest (engine/moe_ffn.cpp),
  // and the slots refilled as device_experts says. Given after set_device_layers, on its device.
  void set_device_experts(std::shared_ptr<device_experts> e);
  const std::shared_ptr<device_experts>& experts() const { return experts_; }
  // Bytes of weights the context's stages read from the device's copies so far (attention, predictors,
  // dense FFNs, the head; hot FFN rows are the executor's to count).
  uint64_t device_read() const { return device_read_ + predictor_.device_read(); }
  // Of those, a mixture's routed experts computed from device slots (shared experts not counted).
  uint64_t expert_device_read() const { return expert_device_read_; }

  // Throws model_error for sparse mode on a model without predictors.
  void set_mode(ffn_mode m);
  ffn_mode mode() const { return mode_; }
  // Counts computed vs truly active neurons per layer; costs a dense FFN per token in sparse mode.
  void enable_stats(bool on) { stats_on_ = on; }
  const std::vector<ffn_layer_stats>& stats() const { return stats_; }
  // Neurons computed per layer since construction (always counted; cheap).
  const std::vector<int64_t>& computed_neurons() const { return computed_; }
  // A mixture of experts' zero-training expert predictor (docs/moe.md): layer l + 1's router applied
  // to layer l's output (normalized by layer l + 1's ffn_norm) guesses layer l + 1's experts before
  // its attention runs. Per layer since construction: the experts it chose, and how many of them the
  // guess had (layer 0: none guessed).
  const std::vector<int64_t>& experts_chosen() const { return experts_chosen_; }
  const std::vector<int64_t>& experts_guessed() const { return experts_guessed_; }
  // How often each expert was chosen since construction: n_layer x n_expert (layer l's at l n_expert).
  const std::vector<int64_t>& expert_choices() const { return expert_choices_; }
  // Neurons whose rows were read per layer since construction: one token's choice per forward(), a
  // batch's union per batch (so a step of several sequences reads each chosen row once).
  const std::vector<int64_t>& read_neurons() const { return read_; }
  // Of those, the neurons whose down rows were read: with transposed down rows (sparse files) only
  // the ones that fired (for any token of a batch), in dense mode too; with a down matrix, all, or
  // 32 for each block of 32 neurons read where the product skipped the others.
  const std::vector<int64_t>& read_down_rows() const { return down_read_; }

  int64_t n_ctx() const { return n_ctx_; }
  tensor_type kv_type() const { return kv_type_; }
  const model& get_model() const { return *model_; }
  const std::shared_ptr<const model>& shared_model() const { return model_; }
  thread_pool& pool() { return pool_; }

 private:
  // Who computes a stage: the context's CPU workers and their scratch, or the hot device's own
  // (device_layers::workers) for a stage the device holds.
  struct workers {
    thread_pool* pool;
    std::vector<kernels::block_q8_0>* xq;  // the inputs quantized for Q8_0 / Q4_0 products
  };
  workers cpu_workers() { return {&pool_, &xq_}; }
  // y (n x w.ne1) = x (n x w.ne0) times w's rows; each row read once.
  void matmul(const workers& on, const tensor_view& w, const float* x, int64_t n, float* y);
  // The layer's FFN for the state's n tokens, from its normalized input `in` and what its predictor
  // reads, into out (n x n_embd). may_go_dense: a layer may skip its predictor and compute every
  // neuron when that reads fewer bytes (prompt batches); steps of several sequences and single tokens
  // keep each token's own choice.
  void ffn_block(step_state& B, int64_t layer, const float* in, const float* pred_in, bool may_go_dense, float* out);
  void ffn_block(step_state& B, int64_t layer, const layer_weights& l, const workers& on, const float* in, const float* pred_in, bool may_go_dense,
                 float* out);
  // How a layer's FFN runs a batch: sparse (where it pays) or every neuron, the oracle's choice, every
  // neuron first for the stats or margins, as matrix products or neuron by neuron.
  struct ffn_plan {
    bool sparse = false, oracle = false, choose = false, all_first = false, margins = false, as_matrices = false;
    int cost_class = 0;  // the batch size's class in batch_cost
  };
  ffn_plan plan_ffn(int64_t layer, const layer_weights& l, int64_t n, bool may_go_dense);
  // Each token's chosen neurons (B.chosen) and their union (union_), as the plan says.
  void choose_neurons(step_state& B, int64_t layer, const float* pred_in, const ffn_plan& p);
  // The FFN as matrix products (every neuron), or the chosen neurons' rows (here or by the executor).
  // mask (n x n_ff, or null): the neurons each token chose, the others' values set to zero before the
  // down product (a sparse batch whose union is nearly every neuron).
  void ffn_as_matrices(step_state& B, int64_t layer, const layer_weights& l, const workers& on, const float* in, bool margins, float* out,
                       const uint8_t* mask = nullptr);
  void ffn_chosen_rows(step_state& B, int64_t layer, const layer_weights& l, const workers& on, const float* in, bool choose, float* out);
  // What the batch measured: the union's share, the stats, the observer's values, the rows read.
  void record_ffn(step_state& B, int64_t layer, const layer_weights& l, const float* pred_in, const ffn_plan& p, int64_t down_blocks = -1);
  // Every neuron of n tokens: gate and up as matrix products, then the activation into h (n x n_ff);
  // g: scratch (n x n_ff) for the gate. With margins, each token's firing margins go to B.margin.
  void every_neuron(step_state& B, int64_t layer, const layer_weights& l, const workers& on, const float* in, float* g, float* h, bool margins);
  // A mixture of experts' FFN (engine/moe_ffn.cpp): the router's choice, each chosen expert once for
  // the tokens that chose it, their weighted sum into out (n x n_embd); qwen2moe's shared expert.
  void moe_ffn(step_state& B, int64_t layer, const layer_weights& l, const workers& on, const float* in, float* out);
  // Its experts for one token (out += each one's weighted output), or for a batch, each chosen expert
  // once for the tokens that chose it; both return the experts computed. Read moe_'s routing.
  int64_t one_token_experts(const layer_weights& l, const workers& on, const float* in, float* out);
  // The router's logits (n x n_expert) of n normalized inputs.
  void router_logits(const layer_weights& l, const workers& on, const float* in, int64_t n, float* logits);
  // After layer `layer`'s output joined the residual stream: the next layer's experts guessed into B.
  void guess_next_experts(step_state& B, int64_t layer);
  int64_t batch_experts(int64_t n, const layer_weights& l, const workers& on, const float* in, float* out);
  // out += each of m (token, rank) slots' weight times its row of y (m x n_embd), into its token's row.
  void add_weighted(const int64_t* slots, int64_t m, const float* y, float* out);
  // out (n x n_embd) += each token's sigmoid(ffn_gate_inp_shexp . x) times the shared expert's y (n x n_embd).
  void add_shared_expert(const layer_weights& l, const float* in, int64_t n, const float* y, float* out);
  // Queues the step's experts that a device slot holds (and the shared expert, with `shared`) on the
  // device, into hot_; reads moe_'s routing.
  devices::event submit_hot_experts(step_state& B, int64_t layer, const float* in, bool shared);
  // y (m x n_embd) = down(silu(gate x) * up x) for m inputs x.
  void expert_product(const workers& on, const tensor_view& gate, const tensor_view& up, const tensor_view& down, const float* x, int64_t m,
                      std::vector<float>& y);
  std::span<const float> run_batches(std::span<const token_id> tokens, std::span<const int64_t> seqs, std::span<const int64_t> positions, bool all_logits,
                                     bool may_go_dense);
  void run_batch(std::span<const token_id> tokens, const int64_t* seqs, const int64_t* positions, bool all_logits, bool may_go_dense, float* logits);
  void check_step(std::span<const token_id> tokens, std::span<const int64_t> seqs, std::span<const int64_t> positions) const;
  void check_slot(int64_t seq, int64_t pos) const;  // std::out_of_range for a slot or position outside the context
  // The stages of a batch: embeddings; a layer's attention (leaves the state's ffn_in / pred_in); the
  // FFN's output added to the residual stream; the head.
  // A step of n tokens: B's buffers sized, its slots and positions, the step's number; then embed()
  // writes the tokens' embeddings into B.x (a stage of a pipeline across hosts writes the stream it got).
  void begin(step_state& B, int64_t n, const int64_t* seqs, const int64_t* positions);
  void embed(step_state& B, std::span<const token_id> tokens);
  void attention_block(step_state& B, int64_t layer);
  // Over the weights l, by these workers; with `gpu`, the products, RoPE, cache and softmax go to the hot
  // device as one job over its copies (gpu), the norms stay here (l: the host's weights).
  void attention_block(step_state& B, int64_t layer, const layer_weights& l, const workers& on, const layer_weights* gpu = nullptr);
  void attention_job(step_state& B, int64_t layer, const layer_weights& gpu, const layer_recipe& r);
  // What the layer's predictor reads: the layer's input (kept in layer_in) or the residual stream.
  static const float* predictor_input(const step_state& B, const layer_recipe& r);
  void dense_ffn_job(step_state& B, int64_t layer, const float* in, const float* pred_in, float* out);  // a GPU's whole FFN
  void attention_products(step_state& B, int64_t layer, const layer_weights& l, const layer_recipe& r, const workers& on);  // xn -> proj on the host's workers
  void attention_tail(step_state& B, const layer_recipe& r);  // proj added, the FFN's input normalized
  void add_ffn_output(step_state& B, int64_t layer, const float* out);
  void head(step_state& B, std::span<const int64_t> rows, float* logits);  // the logits of these rows
  void head_product(step_state& B, std::span<const int64_t> rows, float* logits);  // ... before the head's bias
  uint8_t* k_at(int64_t seq, int64_t layer, int64_t pos);  // the cache row of (sequence slot, layer, position)
  uint8_t* v_at(int64_t seq, int64_t layer, int64_t pos);
  void store_kv(uint8_t* to, const float* row, int64_t n);  // n values into a cache row, in the cache's type

  std::shared_ptr<const model> model_;
  int64_t n_ctx_;
  int64_t n_seq_;
  tensor_type kv_type_;
  int64_t kv_bytes_;  // of one cached value
  const std::vector<float>& rope_factors_;  // the frequency factors this context's size rotates by (hparams::rope_factors_for)
  observer observer_;
  std::shared_ptr<ffn_executor> executor_;
  std::shared_ptr<const device_layers> device_;
  uint64_t device_read_ = 0, expert_device_read_ = 0;
  trace_recorder* trace_ = nullptr;
  int64_t steps_ = 0, step_ = 0;
  ffn_mode mode_ = ffn_mode::dense;
  bool stats_on_ = false;
  std::vector<ffn_layer_stats> stats_;
  std::vector<int64_t> computed_;
  std::vector<int64_t> read_;
  std::vector<int64_t> down_read_;
  std::vector<int64_t> experts_chosen_, experts_guessed_, expert_choices_;
  thread_pool pool_;
  predictor_runner predictor_;

  std::vector<int32_t> union_;   // the neurons a layer's tokens chose, ascending (scratch)
  struct moe_scratch {
    std::vector<float> logits, weights, x, g, h, y;  // router logits (n x n_expert); chosen weights (n x k); an expert's inputs and values
    std::vector<int32_t> experts;                    // n x k: each token's chosen experts, most probable first
    std::vector<int64_t> first, slots;               // (token, rank) slots grouped by expert (moe_ffn, after routing)
    std::vector<tensor_view> views, downs;           // one token's experts' gate and up rows, and down rows
    std::vector<float> guess_in, guess_logits, guess_weights;  // guess_next_experts' scratch
    std::vector<uint8_t> chosen;                     // n x n_expert: the routing a trace records
    std::vector<uint8_t> on_host;                    // n_expert: 1 where the CPU computes the expert (no device slot holds it)
    std::vector<int64_t> ranks;                      // one token's ranks the CPU computes
  };
  moe_scratch moe_;
  // The step's experts on the hot device: each one's slot, their tokens' inputs x and outputs y side by
  // side (expert i's at rows [first[i], first[i + 1]), in moe_.slots' order); the shared expert's
  // outputs; the device worker's scratch.
  struct hot_experts {
    std::vector<int32_t> experts, slot;
    std::vector<int64_t> first;
    std::vector<float> x, y, shared_y, g, h;
    double seconds = 0;  // the device's time on the experts (measured on its queue)
  };
  hot_experts hot_;
  // Prompt batches' measured seconds per (token, expert) on the CPU's workers and on the device (a
  // running average; 0: not yet), which decide when a cold expert is streamed to the device.
  struct expert_rates {
    double cpu = 0, device = 0;
  };
  expert_rates expert_rates_;
  // The fewest tokens of a batch that make streaming layer `layer`'s cold expert pay.
  double stream_min_tokens(int64_t layer) const;
  std::shared_ptr<device_experts> experts_;
  std::vector<float> logits_;    // (n_vocab): forward's and forward_batch's last logits
  std::vector<kernels::block_q8_0> xq_;  // activations quantized for Q8_0 / Q4_0 rows
  // The batch path's own state (forward_batch, forward_step).
  step_state b_;
  // Measured per layer and batch-size class (log2 n): the union's share of n_ff (running average).
  struct batch_cost {
    static constexpr int classes = 10;
    double union_share[classes] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1};  // -1: not measured yet
    int64_t dense_since_probe[classes] = {};
  };
  std::vector<batch_cost> cost_;
  std::vector<batch_layer_choice> choices_;
  std::vector<float> batch_logits_;
  // The KV cache (page_buffer: decode attention reads a layer's rows of every position 8 KB apart at
  // embd 2048, and only the positions written are backed).
  page_buffer k_cache_;  // kv_type values (n_layer, n_seq, n_ctx, n_embd_kv)
  page_buffer v_cache_;
  std::vector<uint8_t*> k_layers_, v_layers_;  // each layer's (n_seq, n_ctx, n_embd_kv) block
};

}  // namespace hotcold
