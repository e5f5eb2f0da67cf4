#pragma once
// The hot executor's state and the pieces its two ways of running a step share (internal to actors/):
// executors.cpp runs a step as one batch, layer by layer; micro_batches.cpp runs it as lanes of whole
// sequences whose device and cold work interleave.
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/pipeline.hpp"
#include "engine/hot_cold_ffn.hpp"
#include "engine/predictor.hpp"

namespace hotcold::actors::detail {

// The cold pool's scratch: the cold neurons' values (n, n_ff) and the sums of the pieces of them.
struct cold_scratch {
  std::vector<float> hidden, acc;
};

// One micro-batch of a step (see run_lanes): whole sequences of the step's tokens, its own activations
// and its own progress through the layers.
struct lane {
  std::shared_ptr<inference_context::step_state> s = std::make_shared<inference_context::step_state>();
  int64_t begin = 0, end = 0;         // its tokens: the plan's [begin, end)
  std::vector<int64_t> logit_rows;    // the plan's logit rows among them, relative to begin
  std::vector<int64_t> requests;      // its tokens' requests (what the fault hook is told)
  int64_t layer = 0;                  // the layer in flight
  active_set active;                  // its choice there
  ffn_split split;
  std::shared_ptr<q8_rows> xq;
  std::vector<float> hidden, hot_out, out;
  devices::event ready;     // the device's chain for the layer: attention, predictor, split
  devices::event hot_done;  // the hot rows
  int64_t computed = 0, union_size = 0, hot_chosen = 0;
  void wait_all() {
    for (auto* e : {&ready, &hot_done})
      if (*e) try {
          (*e)->wait();
        } catch (...) {
        }
  }
};

struct hot_executor_state {
  std::shared_ptr<compute_resources> p;
  predictor_actor predictor;
  cold_pool_actor cold;
  // Without a hot device the predictor's and the cold pool's work run on this actor's thread (see
  // run_layer), and so do predictors a hot device holds: their own scratch.
  std::unique_ptr<predictor_runner> runner;
  cold_scratch cold_rows;
  ram_tier::guess_scratch guess;  // the disk tier's guesses: the next layer's, and a layer's own before its attention
  // The step in flight.
  // Its activations; shared, because the views of them that messages carry keep them alive.
  std::shared_ptr<inference_context::step_state> s = std::make_shared<inference_context::step_state>();
  step_plan plan;
  caf::typed_response_promise<step_result> promise;
  int64_t hot_neurons = 0, cold_neurons = 0;
  std::chrono::steady_clock::time_point started;  // the step's
  uint64_t host_bytes = 0, device_bytes = 0;      // weights the step read so far
  int64_t hot_chosen = 0;                         // the layer's (token, neuron) pairs on the hot device
  ffn_split split;
  active_set active;  // the layer's choice, held until its FFN is done (the device reads it)
  std::shared_ptr<q8_rows> xq;
  std::vector<float> hidden, hot_out, out;  // (n, n_ff), (n, n_embd), (n, n_embd)
  std::shared_ptr<std::vector<float>> logits_out;  // the last step's answer
  devices::event hot_done;
  // A step split into micro-batches (run_lanes): the lanes, the order their device chains were
  // queued in (the device runs them in that order), and how many are through every layer.
  std::vector<lane> lanes;
  std::deque<size_t> queued;
  size_t lanes_done = 0;
  static inline const char* name = "hot_executor";
  ~hot_executor_state() {  // the device may still read this state's buffers
    if (hot_done) try {
        hot_done->wait();
      } catch (...) {
      }
    for (auto& l : lanes) l.wait_all();
  }
};
using hot_executor_ptr = hot_executor_actor::stateful_pointer<hot_executor_state>;

// A layer's predictor on its input (traced, timed; with the recall check every recall_every steps
// unless `recall` is false).
active_set predict(predictor_runner& runner, const compute_resources& p, const predict_job& job, bool recall = true);
// Ends the step in flight with `what` (after the device's work on this actor's buffers), and the actor.
void fail(hot_executor_ptr self, const std::string& what);
// Bytes a layer read on each side, added to the step's counts: attention's, the FFN norm's and the
// predictor's weights where the device holds them, else on the host.
void count_fixed_bytes(hot_executor_state& st, int64_t layer);
// And its FFN rows split by placement: the hot rows' (gate and up of each, down of those that fired)
// on the device, the cold ones' on the host; with the layer's counts for the live stats.
// A layer's FFN as a step (or a micro-batch) ran it: rows chosen, where they were, which fired.
struct hot_cold_counts {
  int64_t tokens = 0, computed = 0, hot_chosen = 0;
  int64_t hot_rows = 0, hot_fired = 0;       // on the device
  int64_t union_size = 0, cold_fired = 0;    // every row read; those on the host that fired
};
void count_ffn(hot_executor_state& st, int64_t layer, const hot_cold_counts& c);
// The buffer the step's logits leave in (emptied).
std::vector<float>& logits_buffer(hot_executor_state& st);
// The step's logits are in the logits buffer (its `heads` head computations done): the bytes of the
// heads and the tokens' embedding rows, the step's stats, and the answer.
void deliver_step(hot_executor_ptr self, uint64_t heads, std::chrono::steady_clock::time_point head_start);

// Micro-batches (micro_batches.cpp): whether this step runs as lanes, and running it so.
bool use_lanes(const hot_executor_state& st);
void run_lanes(hot_executor_ptr self);

}  // namespace hotcold::actors::detail
