#pragma once
// hotcold bench's timed runs (cmd_bench.cpp reports them): the configurations a call compares, the
// runner that times a prompt and a decode on one opened model, and the repetitions, interleaved, at
// one depth (tokens already in the cache, as llama-bench's -d).
#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "actors/pipeline.hpp"
#include "devices/device.hpp"
#include "engine/bandwidth.hpp"
#include "launcher/cmd_bench.hpp"
#include "launcher/llama_bench.hpp"

namespace hotcold::launcher {

// FFN rows a decode read, per layer, over some steps (each row of a step's union once; a down row
// only where it was read: with transposed down rows, where its neuron fired).
struct rows_read {
  std::vector<int64_t> neurons, down;
  explicit rows_read(size_t layers) : neurons(layers, 0), down(layers, 0) {}
  explicit rows_read(const inference_context& ctx) : neurons(ctx.totals().rows), down(ctx.totals().down_rows) {}
  rows_read& operator-=(const rows_read& before) {
    for (size_t l = 0; l < neurons.size(); ++l) neurons[l] -= before.neurons[l], down[l] -= before.down[l];
    return *this;
  }
  rows_read& operator+=(const rows_read& more) {
    for (size_t l = 0; l < neurons.size(); ++l) neurons[l] += more.neurons[l], down[l] += more.down[l];
    return *this;
  }
};

// Bytes of weights a decode step reads (read_costs, what /metrics counts too): every layer's
// attention, norms and predictor, the FFN rows r counted over `steps`, the head and an embedding row.
double bytes_per_step(const model& m, const rows_read& r, int64_t steps);

// One configuration measured: the chosen one, and with --vs-dense dense mode, with --vs-direct the
// other pipeline, with --vs-parallel and --vs-micro-batches those counts, with --vs-depth that depth, on
// the same loaded model.
struct config {
  ffn_mode mode;
  bool actors;
  int sequences;
  int micro = 1;   // micro-batches (actors)
  int depth = -1;  // tokens cached before its tests (-1: the depth being measured; --vs-depth's own)
  bool constrained = true;  // decodes follow bench's grammar, where it has one (--vs-unconstrained's: not)
  int depth_at(int measured) const { return depth >= 0 ? depth : measured; }
};

// Where each comparison is among the configurations (-1: not asked for).
struct comparisons {
  int dense = -1, other_pipeline = -1, parallel = -1, micro = -1, depth = -1, unconstrained = -1;
};

std::vector<config> configs_of(const bench_args& a, ffn_mode mode, comparisons& c);

// The timed runs on one opened model. Decode: K sequences (slots 0..K-1) one token a step; prefill:
// the prompt as batches. At a depth d, positions 0..d-1 of each slot are in the cache first (an
// untimed prompt) and the timed tokens come after them. The direct pipeline calls the forward pass;
// the actors get K requests (at depth 0 of one prompt token and n - 1 to generate, so both run n
// steps of K tokens; at a depth, prompts of d + 1 tokens, timed from the moment every sequence has
// its first token until each has n more).
class bench_runner {
 public:
  // grammar: GBNF every decode's sampler follows where its configuration is constrained ("" none).
  bench_runner(loaded& l, bool with_actors, std::string grammar = {});
  void set(const config& c);
  // Positions 0..depth-1 of slots 0..sequences-1 computed (the direct pipeline's; untimed).
  void fill(int sequences, int depth);
  // Tokens/s of n steps of `sequences` tokens after `depth` cached ones (the direct pipeline: fill first).
  double decode(bool actors_pipeline, int sequences, int n, int depth = 0);
  // Tokens/s of a prompt of n tokens after `depth` cached ones (the direct pipeline: fill first).
  double prompt(bool actors_pipeline, int n, int depth = 0);
  // Bytes of weights the hot device has read so far, on either pipeline: the actors count the device's
  // reads of attention, predictors and the head with its rows; the forward pass called directly
  // counts them in the context, the hot rows in the split.
  uint64_t device_read(bool actors_pipeline) const;
  // The FFN rows the last decode read before its timed steps (the actors' prompts at a depth: a slot
  // another configuration took in between computes its prompt again), which its count leaves out.
  const rows_read& untimed_rows() const { return untimed_; }
  void stop() { pipe_.reset(); }

 private:
  token_id token_at(int i) const { return static_cast<token_id>((i * 7919 + 13) % l_.m->hp().n_vocab); }
  double decode_actors_at_depth(int sequences, int n, int depth);
  int64_t drain(int requests);  // the prompt positions the requests reused
  loaded& l_;
  inference_context& ctx_;
  std::unique_ptr<actors::pipeline> pipe_;  // when a configuration runs on the actors
  std::vector<int64_t> slots_, positions_;
  std::vector<token_id> step_tokens_;
  rows_read untimed_;
  std::string grammar_, now_;  // bench's grammar; the one the configuration set last follows
};

// What a configuration's repetitions measured.
struct runs {
  std::vector<double> pp, tg;  // tokens/s, per repetition
  int64_t tokens = 0;          // decode steps over the repetitions
  int64_t expert_lookups = 0, expert_hits = 0, expert_uploads = 0;  // a mixture's experts on a device, over the decode steps
  int64_t expert_guess_tokens = 0;  // of the decoded tokens, those with the layer-early guess on
  uint64_t disk_bytes = 0, ram_lookups = 0, ram_hits = 0;  // the disk tier's over the decode steps (engine/ram_tier)
  uint64_t read_ahead = 0, read_missed = 0, disk_needed = 0;
  uint64_t token_steps = 0, guessed_steps = 0;  // the tier's steps of one token, and of those with its second guess on
  double io_wait_seconds = 0;
  rows_read computed;          // FFN rows read over them
  uint64_t device_bytes = 0;   // weights the hot device read over them
  devices::device_traffic traffic;  // the hot device's launches, copies and syncs over them
  devices::device_traffic prompt_traffic;  // and over the timed prompts
  int64_t prompt_tokens = 0;                // (their tokens)
  std::array<double, devices::n_operations> job_seconds{};  // its jobs' time by operation over them
  double step_bytes = 0;       // what a step reads (what its roofline's probe reads)
  std::vector<double> probes;  // read bandwidth before the first repetition and after each
  explicit runs(size_t layers, double dense_step) : computed(layers), step_bytes(dense_step) {}
};

struct measurement {
  std::vector<runs> per_config;
  std::unique_ptr<read_probe> probe;  // with --roofline
  std::vector<llama_bench_run> llama;  // with --vs-llama-bench: its run after each round
};

// The repetitions at `depth`, configurations interleaved so that all see the same machine, after an
// untimed warm-up (unless --no-warmup); the roofline's probes and llama-bench's runs with them.
measurement measure(bench_runner& run, const bench_args& a, const std::vector<config>& configs, const loaded& l, int depth);

}  // namespace hotcold::launcher
