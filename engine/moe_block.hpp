#pragma once
// A mixture of experts' FFN (docs/moe.md): the router's choice of experts for each token, then each
// expert chosen by some token of the batch computed once for all of them — its gate and up rows against
// those tokens' inputs gathered together, then its down rows — as llama.cpp's mul_mat_id reads an
// expert's rows once per batch; qwen2moe's shared expert for every token. The experts a device slot
// holds (device_experts) are computed there while the CPU's workers compute the rest; the next
// layer's router applied early guesses its experts (the zero-training predictor).
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/device_experts.hpp"
#include "engine/step_state.hpp"

namespace hotcold {

// A mixture of experts' router: for n tokens' logits (n x n_expert), each token's n_expert_used
// experts (the most probable after a softmax, ties to the lower number, most probable first) and their
// weights (probabilities, renormalized to sum 1 where hp.expert_weights_norm): n x k each.
void route_experts(const hparams& hp, const float* logits, int64_t n, int32_t* experts, float* weights);

class moe_block {
 public:
  explicit moe_block(block_env& env) : env_(env) {}
  // Layer `layer`'s experts (weights l, by these workers) for B's n tokens' normalized inputs `in`:
  // their weighted sum into out (n x n_embd).
  ffn_step_counts run(step_state& B, int64_t layer, const layer_weights& l, const workers& on, const float* in, float* out);
  // After layer `layer`'s output joined the residual stream (B.x): layer + 1's router applied to it,
  // normalized by layer + 1's ffn_norm, guesses layer + 1's experts into B; those no slot holds are
  // uploaded now where the residency prefetches. Returns the uploads queued.
  int64_t guess_next(step_state& B, int64_t layer);
  // The experts on the hot device (null: every expert on the CPU); a step of n tokens begins.
  void set_experts(std::shared_ptr<device_experts> e) { experts_ = std::move(e); }
  const std::shared_ptr<device_experts>& experts() const { return experts_; }
  void begin_step(int64_t n) {
    if (experts_) experts_->begin_step(n);
  }

 private:
  // The step's routing into S; how many of its choices the guess had.
  void route(step_state& B, int64_t layer, const layer_weights& l, const workers& on, const float* in, ffn_step_counts& c);
  // The router's logits (n x n_expert) of n normalized inputs.
  void router_logits(const layer_weights& l, const workers& on, const float* in, int64_t n, float* logits);
  // Which experts the CPU computes (S.on_host): those no slot holds, less a prompt's cold experts
  // streamed to the device; counts the cache's lookups, hits and uploads.
  void split_by_slots(int64_t layer, int64_t n, ffn_step_counts& c);
  // Its experts for one token (out += each one's weighted output), or for a batch, each chosen expert
  // once for the tokens that chose it; both return the experts computed.
  int64_t one_token_experts(const layer_weights& l, const workers& on, const float* in, float* out);
  int64_t batch_experts(int64_t n, const layer_weights& l, const workers& on, const float* in, float* out);
  // Joins the device's experts (and shared expert) into out once its job is done.
  int64_t join_hot(int64_t layer, const layer_weights& l, const float* in, int64_t n, bool shared, float* out, ffn_step_counts& c);
  int64_t count_hot(int64_t layer, bool shared, ffn_step_counts& c);  // the device's bytes, counted (join_hot's, or a sum left there)
  // out += each of m (token, rank) slots' weight times its row of y (m x n_embd), into its token's row.
  void add_weighted(const int64_t* slots, int64_t m, const float* y, float* out);
  // out (n x n_embd) += each token's sigmoid(ffn_gate_inp_shexp . x) times the shared expert's y (n x n_embd).
  void add_shared_expert(const layer_weights& l, const float* in, int64_t n, const float* y, float* out);
  // Queues the step's experts that a device slot holds (and the shared expert, with `shared`) on the
  // device, into hot_.
  // into: where the rows' router-weighted sum stays on the GPU (one token; null: the rows come back).
  devices::event submit_hot_experts(step_state& B, int64_t layer, const float* in, bool shared, float* into = nullptr);
  // y (m x n_embd) = down(silu(gate x) * up x) for m inputs x.
  void expert_product(const workers& on, const tensor_view& gate, const tensor_view& up, const tensor_view& down, const float* x, int64_t m,
                      std::vector<float>& y);
  // The fewest tokens of a batch that make streaming layer `layer`'s cold expert pay.
  double stream_min_tokens(int64_t layer) const;
  void observe(int64_t layer, int64_t n) const;
  // Where expert e's rows are this step: its own place, or with the disk tier the slot it was read into.
  int64_t slot_of(int64_t e) const { return env_.disk ? S_.unit_row[static_cast<size_t>(e)] : e; }

  block_env& env_;
  std::shared_ptr<device_experts> experts_;
  struct scratch {
    std::vector<float> logits, weights, x, g, h, y;  // router logits (n x n_expert); chosen weights (n x k); an expert's inputs and values
    std::vector<int32_t> experts;                    // n x k: each token's chosen experts, most probable first
    std::vector<int64_t> first, slots;               // (token, rank) slots grouped by expert (after routing)
    std::vector<tensor_view> views, downs;           // one token's experts' gate and up rows, and down rows
    std::vector<float> guess_in, guess_logits, guess_weights;  // guess_next's scratch
    std::vector<int32_t> guess_host;                 // of the guess, the experts the host reads (the disk tier's read-ahead)
    std::vector<uint8_t> chosen;                     // n x n_expert: the routing a trace records
    std::vector<uint8_t> on_host;                    // n_expert: 1 where the CPU computes the expert (no device slot holds it)
    std::vector<int64_t> ranks;                      // one token's ranks the CPU computes
    std::vector<int32_t> unit_row;                   // with the disk tier: per expert, the slot holding its rows this step (-1: none)
  };
  scratch S_;
  // The step's experts on the hot device: each one's slot, their tokens' inputs x and outputs y side by
  // side (expert i's at rows [first[i], first[i + 1]), in S_.slots' order); the shared expert's
  // outputs; the device worker's scratch.
  struct hot_experts {
    std::vector<int32_t> experts, slot;
    std::vector<int64_t> first;
    std::vector<float> x, y, shared_y, g, h;
    std::vector<devices::ffn_part> parts;  // a GPU's: the experts (and the shared expert) as one job
    std::vector<float> w;                  // each row's weight, where their sum stays on the GPU
    double seconds = 0;  // the device's time on the experts (measured on its queue)
  };
  hot_experts hot_;
  // Prompt batches' measured seconds per (token, expert) on the CPU's workers and on the device (a
  // running average; 0: not yet), which decide when a cold expert is streamed to the device.
  struct expert_rates {
    double cpu = 0, device = 0;
  };
  expert_rates rates_;
};

}  // namespace hotcold
