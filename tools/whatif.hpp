#pragma once
// hotcold replay --activations: what another hot-device budget (or placement) would give, from the
// active sets a run recorded, without running the model. For every recorded (step, layer) the rows
// the step read are split by the candidate placement into hot and cold; the hot-hit ratio follows
// exactly, and the time per token is the recorded one with each layer's FFN time (the longer of the
// hot and cold sides, which run at the same time) replaced by what the new split costs at the rates
// the recorded trace shows for each side (least squares over its hot_ffn and cold_ffn intervals).
//
// Inputs: FILE.activations (written beside a --trace-out trace; docs/traces.md) with the trace JSON
// beside it for the timing, or a profile folder (hotcold profile: the neurons that truly fired, one
// token a step), where the time comes from a bandwidth model instead.
#include <cstdint>
#include <string>
#include <vector>

#include "loader/activation_record.hpp"
#include "model/model.hpp"

namespace hotcold::tools {

using loader::activation_record;

// Per (step, layer) intervals of a trace JSON (--trace-out): the extent of each stage's intervals.
struct step_timing {
  double begin_us = 0, end_us = 0;  // the step's first and last interval
  std::vector<double> hot_us, cold_us;  // per layer: extent of hot_ffn, cold_ffn intervals (0: none)
};
// Steps by number. Throws std::runtime_error for a file that is not a trace.
std::vector<std::pair<int64_t, step_timing>> read_step_timing(const std::string& trace_json, int64_t n_layer);

struct whatif_options {
  std::string model_path;
  std::vector<double> budgets_gib;     // candidate budgets (placement as `hotcold place` would choose it)
  std::vector<std::string> placements; // and/or placement files
  std::string stats_dir;               // firing counts for the placement (a profile); empty: the record's own
  int64_t ctx = 0;                     // the KV cache the budget must hold (0: as place)
  double cpu_gbps = 0;                 // roofline rates, when there is no trace (0: measured here)
  double hot_gbps = 0;                 // (0: the fitted or measured CPU rate, a stand-in device's)
  std::vector<int64_t> experts_cached; // a mixture of experts: cache sizes (experts a layer) to replay its routings through
  std::string experts_popular_from;    // ... and a static popular set learned on this other record (another text)
  double link_gbps = 25;               // ... uploads' host-to-device rate (PCIe 4.0 x16 moves about 25 GB/s)
};

struct whatif_row {
  std::string label;       // "recorded", "budget 1.5 GiB", a placement file
  int64_t hot_neurons = 0;
  uint64_t hot_bytes = 0;  // FFN rows on the hot device
  double hot_hit_ratio = 0;          // chosen (token, neuron) pairs on the hot device / all chosen
  double hot_rows_per_token = 0, cold_rows_per_token = 0;  // FFN rows read, all layers
  double seconds_per_token = 0;      // estimated (recorded, for the recorded row when timed)
  std::vector<double> layer_hot_hit; // per layer
};

struct whatif_result {
  int64_t steps = 0, tokens = 0;
  double active_ratio = 0;
  bool timed = false;  // time from the trace's intervals (else the bandwidth model)
  double cold_gbps = 0, hot_gbps = 0, cold_overhead_us = 0, hot_overhead_us = 0;  // the rates used
  double recorded_seconds_per_token = 0;  // from the trace's step extents (timed)
  std::vector<whatif_row> rows;  // the recorded placement first (when there was one), then each candidate
};

whatif_result estimate_whatif(const activation_record& rec, const std::vector<std::pair<int64_t, step_timing>>& timing, const whatif_options& o);

}  // namespace hotcold::tools
