#pragma once
// What the blocks of a step share: the step's activations (step_state), who computes a block
// (workers), and what the context that owns the blocks sets for all of them (block_env).
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "engine/device_layers.hpp"
#include "engine/rows.hpp"
#include "engine/thread_pool.hpp"
#include "model/model.hpp"

namespace hotcold {

class trace_recorder;
class ram_tier;

// How the FFN chooses its neurons.
//   dense:  every neuron (a sparse file's ffn_down_t is used as AXPY rows).
//   sparse: the layer's predictor picks the neurons (layers without one run dense).
//   oracle: the true activations pick them — every gate is computed, then only the neurons that
//           fired go through the sparse path; used to test the sparse path and to profile.
enum class ffn_mode { dense, sparse, oracle };
// "dense", "sparse" or "oracle" (as the CLI, the JSON outputs and the logs spell them).
constexpr const char* ffn_mode_name(ffn_mode m) { return m == ffn_mode::dense ? "dense" : m == ffn_mode::sparse ? "sparse" : "oracle"; }

// The most tokens a step holds.
inline constexpr int64_t max_step_tokens = 256;

// A step's run state (shapes in elements; rows of up to max_step_tokens tokens, grown on use).
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
  std::vector<int64_t> decoded;                                       // the tokens alone in their sequence (scratch)
  std::vector<int64_t> key_ranges;                                    // decode attention's (token, first key, end) ranges (scratch)
  std::vector<int64_t> first_range;                                   // of each decoded token, and the end (scratch)
  std::vector<float> range_sums;                                      // and their sums (kernels::key_range_sums; scratch)
  std::vector<float> angles;                                          // n x n_rot: RoPE's angles for a GPU's attention
  std::vector<int32_t> seqs32, positions32;                           // n: the same tokens' slots and positions, for a GPU
  const float* ffn_in = nullptr;                                      // this layer's FFN input (n x n_embd)
  const float* pred_in = nullptr;                                     // what its predictor reads (n x n_embd)
  std::vector<float> logits;                                          // the head's rows x n_vocab
  std::vector<float> ffn_normed;                                      // n x n_embd: the FFN's output normalized (gemma2's post-norm)
  // A mixture of experts: the next layer's experts guessed from this layer's output (n x k), for
  // layer guessed_layer (-1: none).
  std::vector<int32_t> expert_guess;
  int64_t guessed_layer = -1;
  // A mixture's hot experts' sum left on a GPU for the next layer's attention job to add (device
  // memory, n x n_embd; null: none), and whether the next layer's attention can take it.
  const float* pending = nullptr;
  devices::event pending_done;  // (its job's event: waited on, an error there is the step's)
  bool next_takes_pending = false;
};

// What a layer's FFN did for a step (ffn_block::run): the context adds these up, the actors pass them
// on to their stats.
struct ffn_step_counts {
  int64_t computed = 0;   // (token, neuron) pairs computed (a mixture: k experts' neurons a token)
  int64_t rows = 0;       // neurons whose gate and up rows were read: the union of the tokens' choices
                          // (each chosen expert's neurons once a step)
  int64_t down_rows = 0;  // neurons whose down rows were read: with transposed down rows, those that
                          // fired for any token; with a down matrix, all, or 32 for each block of 32 read
  uint64_t device_bytes = 0;         // weights read from the hot device's copies (a dense layer it holds
                                     // whole, a mixture's experts in its slots and shared expert)
  uint64_t expert_device_bytes = 0;  // of those, routed experts computed from device slots
  // A mixture of experts: how often each expert was chosen (n_expert; empty otherwise); of the k
  // choices per token, how many there were and how many the guess from the layer before had (none
  // for layer 0); and the device slots' cache: experts routed, held when routed, uploaded, and the
  // next layer's experts uploaded on this layer's guess.
  std::vector<int64_t> expert_choices;
  int64_t experts_chosen = 0, experts_guessed = 0;
  int64_t cache_lookups = 0, cache_hits = 0, cache_uploads = 0, next_layer_uploads = 0;
};

// Who computes a block: the context's CPU workers and their scratch, or the hot device's own
// (device_layers::pool) for a block the device holds.
struct workers {
  thread_pool* pool;
  std::vector<kernels::block_q8_0>* xq;  // the inputs quantized for Q8_0 / Q4_0 products
};

// Sees named intermediates as they are computed: (name, layer, values), per token in token order,
// with the names of engine/step_part.hpp's `observed` (inference_context::set_observer).
using step_observer = std::function<void(std::string_view name, int64_t layer, std::span<const float> values)>;

// What the context sets for every block it owns; the blocks read it at each call.
struct block_env {
  std::shared_ptr<const model> m;
  workers cpu;                                   // the context's workers
  std::shared_ptr<const device_layers> device;   // what the hot device holds (null: nothing)
  std::shared_ptr<ram_tier> disk;                 // the disk tier of a file whose FFN rows it reads (null: all in memory)
  trace_recorder* trace = nullptr;
  step_observer watch;                               // empty: no calls
  ffn_mode mode = ffn_mode::dense;
  uint64_t device_read = 0;                      // bytes of weights read from the device's copies so far
  workers on_device() const { return {&device->pool(), &device->xq()}; }
  const hparams& hp() const { return m->hp(); }
};

}  // namespace hotcold
