#pragma once
// Opening a model for running: one call puts together everything the actors (and the forward pass
// called directly) need — the inference context with its KV caches and CPU workers, and, on a hot
// device, what the plan puts there (loader/placement.hpp: attention with its KV cache, predictors,
// the head, then a sparse file's hot FFN rows, or a dense file's whole layers), the hot/cold split and
// a trace recorder. The commands, the server, bench, eval and the tests open models through it.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "devices/device.hpp"
#include "engine/device_layers.hpp"
#include "engine/forward.hpp"
#include "engine/hot_cold_ffn.hpp"
#include "engine/ram_tier.hpp"
#include "engine/trace.hpp"
#include "loader/auto_placement.hpp"
#include "loader/placement.hpp"

namespace hotcold::loader {

// What a person is told while a model opens (one line each, no newline; the launcher prints them on
// stderr); empty: nothing.
using log_line = std::function<void(const std::string&)>;

struct open_options {
  int64_t ctx = 0;    // positions of each sequence's KV cache (0: the model's, at most 4096)
  int64_t n_seq = 1;  // sequences the context holds KV caches for
  int threads = 0;    // CPU workers (0: every hardware thread; beside a sim device, one fewer)
  kv_types kv;  // the KV cache's types (f16)
  std::optional<ffn_mode> mode;            // default: sparse when the file has predictors
  int64_t n_gpu_layers = -1;               // dense files: layers the device holds whole (-1: as many as fit)
  bool trace = false;                      // keep a trace recorder (the steps' intervals and chosen neurons)
  // A model loaded with its FFN rows left in the file (load_options::ffn_rows_from_disk): the bytes of
  // weights held in memory (plan_ram_tier), and how the disk tier reads the rest.
  uint64_t ram_budget = 0;
  disk_file::options disk_io;
  bool read_ahead_input = true, read_ahead_input_on_trial = true;  // the tier's second guess (ram_tier::input_guess)
  // A mixture of experts on a device (docs/moe.md): --n-cpu-moe N (-1: a cache of experts in every
  // layer), the cache's policy, its uploads' allowance in bytes a token (nullopt: the plan's), and
  // whether the next layer's guessed experts are uploaded a layer early.
  int64_t n_cpu_moe = -1;
  std::optional<hotcold::expert_policy> expert_cache_policy;
  std::optional<uint64_t> expert_upload_bytes;
  bool expert_prefetch = true;
  bool expert_prefetch_on_trial = true;  // (the guess kept where it pays: device_experts::guessing)
  std::vector<std::vector<int32_t>> first_experts;  // per layer the experts the slots start with (empty: 0, 1, ...)
  // What the device holds when the caller says so instead of the plan (tests; nullopt: the plan's).
  std::optional<placement_data> hot;          // a sparse file's hot neurons (else the placement beside the file)
  std::optional<device_residency> residency;  // attention with its KV cache, predictors, whole FFNs, the head
  std::optional<hotcold::expert_residency> experts;  // a mixture's expert slots (with residency)
  auto_placement_options placement;           // where a missing or stale placement is planned from
  // A stage's layers (a worker's, docs/distributed.md): the device holds these alone and no head; a
  // sparse file's hot rows are planned for them from placement.firing_counts (not written: the
  // placement beside the file is the whole model's). last_layer -1: to the end.
  int64_t first_layer = 0, last_layer = -1;
  log_line log;
};

struct opened_model {
  std::shared_ptr<const model> m;
  std::shared_ptr<devices::device> dev;          // the hot device (the CPU: nothing is split off)
  std::shared_ptr<inference_context> ctx;        // KV caches, CPU workers, the forward pass
  std::shared_ptr<const device_layers> device;   // what the device holds besides hot rows (null: nothing)
  std::shared_ptr<const hot_rows> hot;           // a sparse file's hot rows on a device other than the CPU
  std::shared_ptr<device_experts> experts;       // a mixture's experts on the device (null: all on the CPU)
  std::shared_ptr<hot_cold_ffn> split;           // the same rows as the context's FFN executor
  std::shared_ptr<ram_tier> disk;                // the disk tier (null: every weight in memory)
  std::unique_ptr<trace_recorder> trace;         // with open_options::trace
  std::optional<placement_plan> plan;            // the device's plan, where one was made
};

// Whether the plan leaves the CPU's workers FFN work that runs while a thread waits on the device: a
// layer whose FFN is not whole on the device (a dense FFN held whole, every neuron hot, or every expert
// in a slot with the shared expert there). True without a device plan.
bool leaves_cpu_ffn_work(const opened_model& o);

// The device `o` names for this model. `auto`: the first GPU of this build's back end whose kernels
// read this file's FFN rows (F16, Q8_0, Q4_0), else the CPU — said through `log` either way.
// Throws std::invalid_argument for sim_kernels on another kind, and as devices::make_device does.
std::shared_ptr<devices::device> choose_device(const model& m, devices::device_options o, const log_line& log = {});

// The context, and on `dev` (the CPU when null) what the plan puts there. Throws
// std::invalid_argument for what cannot run: a KV cache larger than this machine's memory,
// n_gpu_layers without a device or on a sparse file, a dense file whose layers the device's kernels
// do not read, hot rows that do not fit what the plan leaves them.
opened_model open_for_running(std::shared_ptr<const model> m, std::shared_ptr<devices::device> dev, const open_options& o);

}  // namespace hotcold::loader
