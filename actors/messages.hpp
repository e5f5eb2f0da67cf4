#pragma once
// What travels between hotcold's actors, and their typed interfaces. Activation tensors are immutable
// and reference-counted: a message carries the pointer, never a copy of the values, so handing a
// layer's activations from the hot executor to the cold pool costs the same whatever their size.
// Every type here is for messages inside one process: CAF passes them along but never serializes them.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>
#include <caf/typed_actor.hpp>
#include <caf/replies_to.hpp>

#include "engine/cache_op.hpp"
#include "engine/ram_tier.hpp"
#include "engine/sparse_ffn.hpp"
#include "model/sampler.hpp"
#include "model/vocab.hpp"

namespace hotcold::actors {

// An activation tensor as messages carry it: immutable rows of floats whose storage is shared by
// reference count, never copied between actors.
struct shared_tensor {
  std::shared_ptr<const float> values;  // (rows, cols) row-major; shares ownership of its storage
  int64_t rows = 0;   // tokens in the micro-batch
  int64_t cols = 0;   // values per token (n_embd, n_vocab, ...)
  int64_t step = 0;   // the scheduler's step
  int64_t layer = 0;

  const float* data() const { return values.get(); }
  const float* row(int64_t r) const { return values.get() + r * cols; }
  // Wraps `v` (moved, not copied) as an immutable tensor.
  static shared_tensor wrap(std::vector<float> v, int64_t rows, int64_t cols, int64_t step, int64_t layer) {
    auto owner = std::make_shared<const std::vector<float>>(std::move(v));
    return {std::shared_ptr<const float>(owner, owner->data()), rows, cols, step, layer};
  }
  // Values that live in `owner`'s memory (no copy); the sender must not change them until the receiver
  // has answered.
  template <class Owner>
  static shared_tensor view(std::shared_ptr<Owner> owner, const float* p, int64_t rows, int64_t cols, int64_t step, int64_t layer) {
    return {std::shared_ptr<const float>(std::move(owner), p), rows, cols, step, layer};
  }
  // Rows first..first+n of this tensor, sharing its storage.
  shared_tensor slice(int64_t first, int64_t n) const { return {std::shared_ptr<const float>(values, row(first)), n, cols, step, layer}; }
};

// ---- A request and what its client receives --------------------------------------------------------

struct generation_request {
  std::vector<token_id> prompt;  // must not be empty
  int32_t n_predict = 0;         // tokens to generate after the prompt (0: none)
  sampling_params sampling;
  bool all_logits = false;       // stream the logits of every prompt position computed (eval; from the first not reused)
  bool ignore_eos = false;       // go on past an end-of-generation token (bench)
  bool cache_prompt = true;      // reuse rows of the prompt's beginning already cached (actors/prefix_reuse.hpp)
};

struct token_event {
  int64_t request;
  token_id token;
  int64_t index;  // 0 for the first generated token
  std::chrono::steady_clock::time_point at;  // when the scheduler had it (latencies measure from here)
  std::optional<token_logprobs> probs;  // where the request asks (sampling_params::logprobs)
};
struct logits_event {
  int64_t request;
  int64_t first_position;  // of the prompt; rows are consecutive positions
  shared_tensor logits;       // (rows, n_vocab)
};
struct done_event {
  int64_t request;
  std::string finish;  // "length" (n_predict reached), "stop" (end of generation), "context" (full), "cancelled", "error"
  std::string error;   // why, for "error"
  int64_t prompt_tokens = 0, generated_tokens = 0;
  double queued_s = 0, time_to_first_token_s = 0, total_s = 0;  // from submission
  int64_t cached_tokens = 0;    // of the prompt's, whose rows were reused instead of computed
  int64_t computed_tokens = 0;  // of the prompt's, computed (short of prompt - cached when it ended early)
};

// A sequence slot's cache saved to a file, restored from one, or forgotten (actors/slot_files.hpp),
// between steps; its answer arrives as a slot_event.
struct slot_request {
  int64_t id = 0;
  std::string action;  // save, restore, erase
  int64_t slot = 0;
  std::string path;    // save, restore
};
struct slot_event {
  int64_t request = 0;
  std::string action;
  int64_t slot = 0;
  bool ok = false;
  std::string error;     // why not, for people
  bool missing = false;  // (not ok:) the file to restore cannot be opened
  int64_t n_tokens = 0;  // saved, restored, erased
  uint64_t bytes = 0;    // written or read
  double ms = 0;
};

// ---- Between the actors --------------------------------------------------------------------------------

// One step of the scheduler: token t of request requests[t] at positions[t] of KV slot slots[t].
struct step_plan {
  int64_t step = 0;
  std::vector<token_id> tokens;
  std::vector<int64_t> slots, positions, requests;
  std::vector<int64_t> logit_rows;  // the tokens whose logits are wanted, ascending
  std::vector<cache_op> cache_ops;  // rows moved between slots and the prefix store first, in order
};
struct step_result {
  int64_t step = 0;
  shared_tensor logits;  // (logit_rows.size(), n_vocab)
  int64_t hot_neurons = 0, cold_neurons = 0;  // computed on each side, all layers
};

struct predict_job {
  int64_t layer = 0;
  shared_tensor input;  // (n, n_embd) what the layer's predictor reads
  std::vector<int64_t> requests;
  // The FFN's input, quantized too when the rows want it (the recall check reads it; without a hot
  // device the same job goes on to the cold share).
  shared_tensor ffn_input;
  std::shared_ptr<const q8_rows> ffn_input_q8;
};
struct active_set {
  std::shared_ptr<const std::vector<uint8_t>> chosen;  // (n, n_ff): token t chose neuron i
  std::shared_ptr<const std::vector<int32_t>> union_ids;  // ascending
};

struct cold_job {
  int64_t layer = 0;
  shared_tensor input;  // (n, n_embd) the FFN's normalized input
  std::shared_ptr<const q8_rows> input_q8;  // the same quantized, when the rows want it
  active_set chosen;
  std::shared_ptr<const std::vector<int32_t>> cold_ids;  // ascending
  std::vector<int64_t> requests;
  int64_t computed = 0, union_size = 0;  // the layer's counts, passed back in the answer
  // With the disk tier: the share's rows as the sender asked for them (its reads ahead of the next
  // layer's, which it sent after); null: the cold pool asks.
  std::shared_ptr<const std::optional<ram_tier::use>> rows_in;
};
// A share of a layer's FFN output, and the layer's counts: (token, neuron) pairs computed, rows read.
struct ffn_part {
  shared_tensor out;  // (n, n_embd)
  int64_t computed = 0, union_size = 0;
  int64_t fired = 0;  // neurons of the share that fired for any token: the down rows it read
};

struct sample_job {
  std::vector<int64_t> requests;
  std::vector<int64_t> rows;  // request k's logits are row rows[k] of logits
  shared_tensor logits;
};
// The tokens sampled for a job's requests, in its order, and their log probabilities where a request
// asks for them (probs empty where none does).
struct sampled_tokens {
  std::vector<token_id> tokens;
  std::vector<std::optional<token_logprobs>> probs;
  std::vector<std::string> errors;  // where a request's logits could not be sampled: why (empty: none; the request fails alone)
};

struct telemetry_totals {
  int64_t steps = 0, failed_steps = 0, restarts = 0;
  int64_t prompt_tokens = 0, generated_tokens = 0;  // computed
  int64_t prompt_tokens_cached = 0;                  // reused instead (of the requests done)
  int64_t requests_done = 0, requests_failed = 0;
  double busy_s = 0;  // time with a step in flight
};
struct step_record {
  int64_t step = 0, tokens = 0, prompt_tokens = 0, generated_tokens = 0, sequences = 0;
  double seconds = 0;
  bool failed = false;
};

using submit_atom = caf::atom_constant<caf::atom("submit")>;
using slot_atom = caf::atom_constant<caf::atom("slot")>;
using cancel_atom = caf::atom_constant<caf::atom("cancel")>;
using step_atom = caf::atom_constant<caf::atom("step")>;
using predict_atom = caf::atom_constant<caf::atom("predict")>;
using cold_atom = caf::atom_constant<caf::atom("cold")>;
using sample_atom = caf::atom_constant<caf::atom("sample")>;
using open_atom = caf::atom_constant<caf::atom("open")>;
using close_atom = caf::atom_constant<caf::atom("close")>;
using totals_atom = caf::atom_constant<caf::atom("totals")>;

// The typed interfaces.
using cold_pool_actor = caf::typed_actor<caf::replies_to<cold_atom, cold_job>::with<ffn_part>>;
using predictor_actor = caf::typed_actor<caf::replies_to<predict_atom, predict_job>::with<active_set>>;
using hot_executor_actor = caf::typed_actor<caf::replies_to<step_atom, step_plan>::with<step_result>>;
using sampler_actor = caf::typed_actor<caf::reacts_to<open_atom, int64_t, sampling_params, std::vector<token_id>>,
                                       caf::replies_to<sample_atom, sample_job>::with<sampled_tokens>, caf::reacts_to<close_atom, int64_t>>;
using telemetry_actor = caf::typed_actor<caf::reacts_to<step_atom, step_record>, caf::reacts_to<done_event>,
                                         caf::reacts_to<totals_atom, int64_t>,  // restarts to add
                                         caf::replies_to<totals_atom>::with<telemetry_totals>>;

}  // namespace hotcold::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(hotcold::actors::shared_tensor)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(hotcold::actors::generation_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(hotcold::actors::token_event)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(hotcold::actors::sampled_tokens)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(hotcold::actors::logits_event)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(hotcold::actors::done_event)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(hotcold::actors::slot_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(hotcold::actors::slot_event)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(hotcold::actors::step_plan)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(hotcold::actors::step_result)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(hotcold::actors::predict_job)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(hotcold::actors::active_set)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(hotcold::actors::cold_job)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(hotcold::actors::ffn_part)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(hotcold::actors::sample_job)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(hotcold::actors::telemetry_totals)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(hotcold::actors::step_record)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(hotcold::sampling_params)
