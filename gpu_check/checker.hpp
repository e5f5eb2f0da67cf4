#pragma once
// The staged GPU check (hotcold-gpu-check all, gpu_check.hpp): one checker runs the stages — the kernels
// and the table (run.cpp), the generated files, the hybrid against model/reference and the speed
// (stages.cpp) — each a set of child processes under a deadline. Private to this room.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "devices/device_info.hpp"
#include "gpu_check/child_steps.hpp"
#include "gpu_check/gpu_check.hpp"

namespace hotcold::gpu_check::detail {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;
using json = nlohmann::json;

inline double since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

inline std::optional<json> read_json(const fs::path& p) {
  try {
    return json::parse(read_file(p));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

struct stage_record {
  std::string name;
  double share_s = 0, seconds = 0;
  std::string status = "not run";
  std::vector<std::string> notes;
  std::vector<std::string> skipped;  // what the stage left out for lack of time
};

// A generated model: its file, what it is, its size.
struct model_file {
  std::string name, path, shape;
  bool made = false;
  uint64_t bytes = 0;
  // The full-shape file's weights, and the bytes a weight takes (the schedule estimates a GPU run).
  double params = 0, bytes_per_param = 2;
  double planned_bytes() const { return params * bytes_per_param; }
  double gib(double fraction) const { return fraction * static_cast<double>(bytes) / double(1ull << 30); }
};

class checker {
 public:
  explicit checker(const gpu_check_options& o) : o_(o), work_(o.work) {}

  int run();

 private:
  double left() const { return std::chrono::duration<double>(deadline_ - clock_type::now()).count(); }
  std::string bin(const std::string& name) const { return (fs::path(o_.bin_dir) / name).string(); }
  std::vector<std::string> threads() const;
  std::vector<std::string> device_args(double budget_gib) const;
  static std::string now_text();
  step_spec spec(const std::string& tag, std::vector<std::string> argv) const { return {std::move(argv), work_ / (tag + ".out"), work_ / (tag + ".err")}; }
  step_result step(const std::string& tag, std::vector<std::string> argv, double limit = 1e30);
  static double until(clock_type::time_point t) { return std::chrono::duration<double>(t - clock_type::now()).count(); }
  // Threads for each of n steps run at once.
  std::vector<std::string> threads_of(int n) const;
  // A step that ran out of time marks its stage; the stage goes on to say so, and later stages run.
  void over_time(stage_record& s, const std::string& what);
  // Left out before it started: the stage had no time for it.
  void skip_for_time(stage_record& s, const std::string& what);

  // ---- 0: the schedule, estimated and printed before the stages start (schedule.cpp) ----
  void plan_schedule(const std::vector<double>& shares_s);
  json schedule_ = json::object();

  // ---- 1: the kernels, then compute-sanitizer's tools on small shapes ----
  void kernels(stage_record& s);

  // ---- 2: generated models through actors + the device against model/reference ----
  struct to_make {
    model_file* m;
    std::vector<std::string> shape;
    std::string type;
    bool sparse;
    std::string tokens;  // what prepare profiles
    std::vector<std::string> train = {};  // prepare's training options
  };
  // Generates every file not made by an earlier run (at once: gen-model is one thread each), then
  // prepares the sparse ones (at once, the threads shared).
  bool make_models(stage_record& s, const std::vector<to_make>& files, clock_type::time_point deadline);

  // The files the check makes (kept in the work folder: a rerun reuses them). The 7B shape proves the
  // 7B's widths (4096/11008, 32 heads) in two layers; the ~1B file (16 layers) is what the speeds
  // are measured on; a Q4_0 copy; a mixture of experts.
  std::vector<to_make> model_plan();

  void hybrid(stage_record& s);

  // Steps in waves whose memory (need, per step) fits what this machine has available, in order;
  // a step that needs more than that runs alone. Each wave gets the stage's time left.
  std::vector<step_result> run_in_waves(const std::vector<step_spec>& steps, const std::vector<uint64_t>& need);
  static uint64_t available_memory();

  // The hot neurons of a run's plan (its table's total row on stderr: "| total | ... | hot neurons |
  // hot rows MiB | device MiB |"); -1 without one.
  static int64_t hot_neurons_in(const std::string& err);

  // ---- 3: tokens/s, side by side ----
  void speed(stage_record& s);

  // ---- 4: the table, the JSON and the archive ----
  int finish(int code);
  // The results (the JSON, each step's output, the kernels' and checks' JSON; not the models) packed
  // into WORK/gpu-check-results.tar.gz: one file to copy back. "" and a note when tar fails.
  std::string pack_results();
  // The speed stage's prompt: at least 300 tokens, so decode crosses the flash-decoding split.
  static std::string long_prompt();

  const gpu_check_options& o_;
  fs::path work_;
  std::string json_path_;
  std::vector<stage_record> stages_;
  clock_type::time_point deadline_;
  json device_ = json::object(), kernels_ = json::object(), sanitizers_ = json::object(), plans_ = json::object();
  json hybrid_checks_ = json::array(), suite_tests_ = json::array(), speed_ = json::array();
  bool kernel_wrong_ = false, hybrid_wrong_ = false;
  double cpu_gbs_ = 0;  // the planner's CPU bandwidth, measured by its first call
  model_file big_, one_, one_dense_, one_q4_, moe_, depth_;
  bool speed_slow_ = false;  // a kernel below its speed floor
  // The files made in the background (from the start until stage 2's end) and how that went.
  std::thread maker_;
  stage_record making_{"making the files", 0, 0, "passed", {}, {}};
  bool made_ok_ = false;

 public:
  ~checker() {
    if (maker_.joinable()) maker_.join();
  }
};

}  // namespace hotcold::gpu_check::detail
