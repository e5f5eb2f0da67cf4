#pragma once
// Where each token's time goes: complete intervals (name, step, layer, sequences in the step,
// begin, end, thread) recorded from any thread without a lock on the hot path — each thread
// appends to its own buffer, registered once — and written as Chrome trace-event JSON
// (docs/traces.md), which Perfetto and chrome://tracing open.
#include <atomic>
#include <chrono>
#include <map>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "engine/step_part.hpp"

namespace hotcold {

class trace_recorder {
 public:
  using clock = std::chrono::steady_clock;
  struct interval {
    const char* name;  // a string literal
    int64_t step, layer, seqs;
    clock::time_point begin, end;
  };

  trace_recorder();
  ~trace_recorder();
  void record(const char* name, int64_t step, int64_t layer, int64_t seqs, clock::time_point begin, clock::time_point end);

  // Called as each interval of a trace_scope begins, on the thread that begins it, before its clock
  // starts: what a test holds a side's work on to check which intervals run at the same time. Set it
  // before anything records.
  using begin_listener = std::function<void(const char* name, int64_t step, int64_t layer)>;
  void on_begin(begin_listener f) { on_begin_ = std::move(f); }
  void began(const char* name, int64_t step, int64_t layer) const {
    if (on_begin_) on_begin_(name, step, layer);
  }

  // Everything recorded so far, each with the recording thread's index (0 = first to record).
  struct entry {
    interval span;
    int thread;
  };
  std::vector<entry> entries() const;
  // Thread names, by index: what the thread called itself (pthread name), e.g. "hotcold-sim".
  std::vector<std::string> thread_names() const;
  // {"traceEvents": [...], "displayTimeUnit": "ms"}: "X" events with args {step, layer, seqs},
  // times in microseconds from the first event, and "M" thread_name metadata.
  std::string chrome_json() const;
  void write(const std::string& path) const;  // throws std::system_error naming the path

  // ---- Per-token active sets (what `hotcold replay --activations` reads; docs/traces.md) ----
  // A sparse layer's choice in a step: chosen is tokens x n_ff bytes, 1 = the token computes the neuron.
  void record_active(int64_t step, int64_t layer, int64_t tokens, int64_t n_ff, const uint8_t* chosen);
  // The hot device's neurons per layer while recording (none: every neuron on the CPU).
  void set_hot_neurons(std::vector<std::vector<int32_t>> hot);
  bool has_activations() const;
  // The active sets recorded so far, in the order they came.
  struct active_set {
    int64_t step, layer, tokens, n_ff;
    std::vector<uint8_t> bits;  // tokens x ceil(n_ff/8)
    bool chosen(int64_t token, int64_t neuron) const {
      return bits[static_cast<size_t>(token * ((n_ff + 7) / 8) + neuron / 8)] >> (neuron % 8) & 1;
    }
  };
  std::vector<active_set> active_sets() const;
  // What one sequence's run chose, as model/reference's neuron mask [position][layer][neuron]: its
  // steps in order, a step's rows being its next positions. A layer with no recorded choice (a dense
  // layer) computes every neuron. Throws std::runtime_error when the steps do not cover exactly
  // `positions` positions (several sequences, or a run that was not recorded from its start).
  std::vector<std::vector<std::vector<bool>>> sequence_mask(int64_t positions, int64_t n_layer, int64_t n_ff) const;
  // The binary activation file: "HCACT001", u32 n_layer, u32 n_ff, u32 hot layers (0 or n_layer),
  // per hot layer ceil(n_ff/8) bytes of bits (bit i: neuron i is hot), then per record u64 step,
  // u32 layer, u32 tokens, tokens x ceil(n_ff/8) bytes of bits; little-endian. Throws std::system_error.
  void write_activations(const std::string& path) const;

 private:
  struct active_record {
    int64_t step, layer, tokens;
    std::vector<uint8_t> bits;  // tokens x ceil(n_ff/8)
  };
  mutable std::mutex active_mutex_;
  int64_t active_n_ff_ = 0, active_n_layer_ = 0;
  std::vector<active_record> active_;
  std::vector<std::vector<int32_t>> hot_;

  struct thread_buffer {
    std::string name;
    std::vector<interval> spans;
  };
  thread_buffer& mine();
  begin_listener on_begin_;
  const uint64_t id_;
  mutable std::mutex registry_mutex_;  // taken when a thread records for the first time, and to read
  std::vector<std::unique_ptr<thread_buffer>> threads_;
};

// How busy each kind of interval kept the machine: per name, the time its intervals cover (where
// they overlap, counted once), against the span from the first interval's start to the last one's
// end. "Idle fraction" of a side = 1 - busy / span.
struct trace_busy {
  double span_s = 0;
  std::map<std::string, double> busy_s;
  double both_s = 0;  // time covered by intervals of both names given to busy_time
};
trace_busy busy_time(const std::vector<trace_recorder::entry>& entries, const std::string& a = "hot_ffn", const std::string& b = "cold_ffn");

// Records one interval from construction to destruction (nothing when the recorder is null).
class trace_scope {
 public:
  trace_scope(trace_recorder* r, step_part s, int64_t step, int64_t layer, int64_t seqs = 1)
      : r_(r), name_(step_part_name(s).data()), step_(step), layer_(layer), seqs_(seqs) {
    if (!r_) return;
    r_->began(name_, step, layer);
    begin_ = trace_recorder::clock::now();
  }
  explicit trace_scope(const trace_span& at) : trace_scope(at.trace, at.s, at.step, at.layer, at.seqs) {}
  ~trace_scope() {
    if (r_) r_->record(name_, step_, layer_, seqs_, begin_, trace_recorder::clock::now());
  }
  trace_scope(const trace_scope&) = delete;
  trace_scope& operator=(const trace_scope&) = delete;

 private:
  trace_recorder* r_;
  const char* name_;
  int64_t step_, layer_, seqs_;
  trace_recorder::clock::time_point begin_;
};

}  // namespace hotcold
