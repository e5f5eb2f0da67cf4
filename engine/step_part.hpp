#pragma once
// One naming of what a step computes, by (name, layer): the parts of a step traces record as
// intervals, the actors time for /metrics (its label `stage`), and the faults tests inject at; and the
// values the forward pass's observer sees. ("Stage" itself means one thing in hotcold: a range of
// layers on another host, actors/stages.hpp.)
#include <cstdint>
#include <string_view>

namespace hotcold {

class trace_recorder;

// The parts of a step, in the order a layer runs them; `output` is the head (layer n_layer), `sample`
// the sampler's work on the logits.
enum class step_part : int { attention, predict, hot_ffn, cold_ffn, ffn, output, sample };
inline constexpr int n_step_parts = 7;
// "attention", "predict", "hot_ffn", "cold_ffn", "ffn", "output", "sample" (a string literal's storage).
constexpr std::string_view step_part_name(step_part s) {
  constexpr std::string_view names[n_step_parts] = {"attention", "predict", "hot_ffn", "cold_ffn", "ffn", "output", "sample"};
  return names[static_cast<int>(s)];
}

// Where an interval of a step goes (engine/trace.hpp): a recorder (none: nothing is recorded), the
// stage, step and layer, and the sequences in the step.
struct trace_span {
  trace_recorder* trace = nullptr;
  step_part s = step_part::ffn;
  int64_t step = 0, layer = 0, seqs = 1;
};

// The intermediate values inference_context's observer is shown, per token and layer.
namespace observed {
inline constexpr std::string_view ffn_pred_in = "ffn_pred_in";  // what the layer's activation predictor reads (n_embd)
inline constexpr std::string_view ffn_act = "ffn_act";          // the FFN's hidden vector after the activation (n_ff)
inline constexpr std::string_view ffn_margin = "ffn_margin";    // per neuron, how far it is from firing: positive exactly when it does (n_ff)
inline constexpr std::string_view ffn_preact = "ffn_preact";    // per neuron, the value the activation is applied to: gate (no gate: up) (n_ff)
}  // namespace observed

}  // namespace hotcold
