#pragma once
// hotcold profile: runs the dense reference over calibration text and records, per layer, how often
// each FFN neuron fires and predictor training samples (the predictor's input and the true mask),
// streamed to disk so memory stays bounded whatever the token count.
//
// DIR/profile.json            what was profiled (model, shapes, tokens, files)
// DIR/firing_counts.u64       n_layer x n_ff little-endian counts
// DIR/layer-NNN.samples       per token: n_embd float32 (predictor input), ceil(n_ff/8) mask bytes
//                             (bit i = neuron i fired), n_ff float16 firing margins (positive exactly
//                             when the neuron fires: see inference_context's "ffn_margin") — for a
//                             thresholded model (profile.json "values": "preactivations") each
//                             neuron's pre-activation instead ("ffn_preact"), which its predictor estimates
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "loader/placement.hpp"
#include "model/model.hpp"
#include "model/sampler.hpp"

namespace hotcold::loader {

inline constexpr int profile_format = 2;  // profile.json "format": 2 added the margins

struct profile_options {
  std::string model_path;
  std::string calibration_path;  // empty: text the model samples itself (temperature 1, seed 2024),
                                 // each chunk started with a few tokens of mixed_text
  int64_t tokens = 2048;
  int64_t chunk = 256;           // tokens per sequence; positions restart each chunk
  int threads = 0;
  std::string out_dir;
  std::vector<float> act_thresholds;  // non-empty: the model's activation thresholds (prepare --sparsity)
};

struct profile_result {
  int64_t tokens = 0;
  int64_t n_layer = 0, n_embd = 0, n_ff = 0;
  std::vector<double> active_fraction;  // per layer
};

profile_result run_profile(const profile_options& o, const std::function<void(int64_t, int64_t)>& progress = {});

// The tokens profile (and prepare --sparsity's calibration) feed a model: the calibration text
// repeated, or text the model samples itself at temperature 1 (seed 2024), each chunk of `chunk`
// positions starting at BOS and, self-sampled, with a few tokens of mixed_text.
class calibration_tokens {
 public:
  calibration_tokens(const model& m, const std::string& text_path, int64_t chunk);
  // Token t, given the logits after token t - 1 (empty at the start).
  token_id at(int64_t t, std::span<const float> logits);
  int64_t chunk() const { return chunk_; }

 private:
  const vocab& v_;
  std::vector<token_id> text_, seed_prompt_;
  sampler self_text_;
  int64_t chunk_;
  bool bos_;
};

// Reading what run_profile wrote.
struct profile_data {
  int64_t n_layer = 0, n_embd = 0, n_ff = 0, tokens = 0;
  std::vector<uint64_t> firing_counts;  // n_layer x n_ff
  std::string dir;
  std::string model_path;
  bool preactivations = false;          // the samples' n_ff values are pre-activations of activation `act`
  bool file_order = false;              // the profiled file records its neurons' order (blk.N.ffn_order): the
                                        // counts are in that order, not the dense file's
  activation act = activation::relu;
  std::string samples_path(int64_t layer) const;
  size_t record_bytes() const { return static_cast<size_t>(n_embd) * 4 + static_cast<size_t>((n_ff + 7) / 8) + static_cast<size_t>(n_ff) * 2; }
};
profile_data read_profile(const std::string& dir);

// The profile's firing counts in m's order of the neurons: a profile of the dense file that prepare
// read counts neurons in that file's order, which a file prepare laid out records (blk.N.ffn_order);
// a profile of a laid-out file is in its order already.
std::vector<uint64_t> counts_in_order_of(const profile_data& d, const model& m);

// hotcold place: the plan for `model_path` from the firing counts of the profile in `stats_dir`.
placement_plan plan_from_profile(const std::string& model_path, const std::string& stats_dir, double budget_gib, int64_t ctx, kv_types kv = {});

// The firing counts a run plans a placement from when it has none (loader::firing_counts_source): a
// profile beside the model (prepare's MODEL.work) of this model's shape, else a short profile of text
// the model samples itself, kept under cache_dir/profiles.
struct short_profile_options {
  std::string cache_dir;
  int64_t tokens = 512;
  int threads = 0;
  std::function<void(int64_t done, int64_t total)> progress;
};
std::vector<uint64_t> firing_counts_for(const std::string& model_path, const model& m, const short_profile_options& o);

}  // namespace hotcold::loader
