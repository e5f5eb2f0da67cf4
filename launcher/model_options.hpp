#pragma once
// Options every command that runs a model shares (-m, -t, -c, --mmap, --mode, --device,
// --vram-budget, --n-gpu-layers, --kv-type, --trace-out) and the loading that follows them.
#include <memory>
#include <string>
#include <vector>

#include "actors/stages.hpp"
#include "loader/open.hpp"

namespace hotcold::actors {
class pipeline;
}

namespace hotcold::launcher {

struct model_args {
  std::string model;
  int threads = 0;
  std::vector<int> thread_list;  // -t as given (bench takes a comma list; the rest one count)
  int64_t ctx = 0;
  bool mmap = false;
  std::string mode;  // "dense", "sparse"; empty: sparse when the file has predictors
  std::string device = "auto";  // the hot device: auto | cpu | sim | cuda | hip
  double vram_budget_gib = 0;   // the hot device's budget (0: its free memory; sim needs one)
  double ram_budget_gib = 0;    // --ram-budget: weights in memory, the rest of the FFN rows read from disk (0: all in memory)
  std::string trace_out;        // Chrome trace-event JSON written when the command ends
  // The KV cache's keys' and values' types (--cache-type-k/-ctk, --cache-type-v/-ctv; --kv-type sets
  // both): f16 | f32 | q8_0 | q4_0; empty: f16.
  std::string cache_type_k, cache_type_v;
  // MiB of host memory for the prefix store (actors/prefix_reuse.hpp): -1 half the machine's memory,
  // 0 none (each slot still reuses its own rows); default 8192 (llama-server's --cache-ram), at most a
  // quarter of the machine's memory.
  int64_t cache_ram_mib = 8192;
  // run, chat, serve: a full context drops half of what follows the first `keep` tokens (and BOS;
  // -1: the whole prompt) and goes on, as llama.cpp's --context-shift / --keep; else it ends there.
  bool context_shift = false;
  int64_t keep = 0;
  int64_t n_gpu_layers = -1;    // dense files: layers the hot device holds whole (-1: as many as fit)
  bool sim_kernels = false;     // --device sim computes as a GPU does (devices::device_options::sim_kernels)
  std::string device_wait = "auto";  // how threads wait for the device: auto | spin | yield | block (devices::device_wait)
  // A mixture of experts on a device (docs/moe.md): --n-cpu-moe N / --cpu-moe (-1: a cache of experts
  // in every layer), the cache's policy, its uploads a token in MiB (negative: the plan's), prefetching.
  int64_t n_cpu_moe = -1;
  bool cpu_moe = false;
  std::string expert_policy;
  double expert_upload_mib = -1;
  bool no_expert_prefetch = false;
  std::string expert_guess = "auto";  // --expert-guess auto|on|off
  std::string read_ahead_input = "auto";  // --read-ahead-input auto|on|off (the disk tier's second guess)
  std::string experts_from;  // a recorded run's routings (FILE.activations): the slots start with each layer's most chosen
  bool record_choices = false;  // keep a trace recorder (written only with --trace-out) for the steps' chosen neurons
  std::vector<std::string> workers;           // --workers tcp://H1:P1,...: the layers on these stage hosts (docs/distributed.md)
  std::vector<std::string> split = {"auto"};  // --split N1,N2,... or auto
  std::string workers_tls;                    // --workers-tls DIR: TLS links with this folder's certificates (hotcold keygen --tls)
  // llama.cpp's (launcher/llama_habits.hpp): --mlock; -b and -ub, prompt tokens a step (0: the most,
  // 256); -fa's value (on, off, auto; "" not given).
  bool mlock = false;
  int64_t batch = 0, ubatch = 0;
  std::string flash_attn;
};


// A model opened for running (loader/open.hpp) and where its trace goes.
struct loaded : loader::opened_model {
  std::string trace_path;
  actors::stage_plan stages;  // --workers, --split, --workers-tls (empty: every layer here)
  uint64_t prefix_store_bytes = 0;  // --cache-ram's
  bool context_shift = false;        // --context-shift, --keep
  int64_t keep = 0;
  // The actor pipeline over this context, hot rows and trace.
  // recall_every: steps between the predictors' recall checks (0: none).
  std::unique_ptr<actors::pipeline> make_pipeline(int64_t prefill_chunk = 32, int64_t recall_every = 0, int micro_batches = 1);
  // Writes the trace (if asked for) and says where; call when the work is done.
  void finish();
};

// Where a sparse file's placement on a device is planned from when it has none: a profile beside
// it, else a short profile now (tools/profile.hpp) with `threads`, kept under the cache folder.
loader::auto_placement_options placement_sources(int threads);

// Loads the model (the default model when none is given), logs it on stderr and opens it for running
// on the device the options name (loader::open_for_running), planning a placement from a profile
// (tools/profile.hpp) when a sparse file on a device has none.
// n_seq: sequences the context holds KV caches for.
// ctx_override: the command's own context (at least -c's when given).
loaded load(const model_args& a, int64_t ctx_override = 0, int64_t n_seq = 1);

}  // namespace hotcold::launcher
