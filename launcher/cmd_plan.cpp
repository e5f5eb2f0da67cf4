// hotcold plan -m FILE --vram-budget G [-c CTX] [--gpu NAME | --gpu-bandwidth GBps --pcie GBps]
//              [--cpu-bandwidth GBps] [--cpu-ffn-bandwidth GBps] [--stats DIR | --active F] [--json]
// What a GPU would give this file, on paper (tools/planner.hpp): bytes per token on each side, the
// crossings, and the tokens per second of the CPU alone, of whole layers offloaded and of the hybrid.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "launcher/cmd_plan.hpp"
#include "launcher/commands.hpp"
#include "launcher/option_checks.hpp"
#include "model/model.hpp"
#include "tools/planner.hpp"
#include "loader/profile.hpp"

namespace hotcold::launcher {

namespace {

// What the planner is told, and where its figures came from.
struct plan_inputs {
  tools::planner_options o;
  std::string gpu_name = "custom", firing_from = "every neuron at --active", cpu_from = "given";
  double chosen_fraction = -1;  // a sparse file's: neurons its predictors choose, measured here
  double cpu_spread = -1;       // the CPU's measurement: how far its passes were apart (-1: not measured)
  bool cpu_noisy = false;       // ... more than a quiet machine's
};

// The GPU: by name, or its bandwidth and link.
void choose_gpu(const plan_args& a, plan_inputs& in) {
  if (!a.gpu.empty()) {
    const auto* g = tools::find_gpu(a.gpu);
    if (!g) throw std::invalid_argument(fmt::format("--gpu {}: not one of the GPUs known here; give --gpu-bandwidth and --pcie instead", a.gpu));
    in.o.gpu_gbs = g->bandwidth_gbs, in.o.pcie_gbs = g->pcie_gbs, in.gpu_name = g->name;
  } else if (a.gpu_gbs > 0) {
    in.o.gpu_gbs = a.gpu_gbs, in.o.pcie_gbs = a.pcie_gbs;
  } else {
    throw std::invalid_argument("plan needs a GPU: --gpu NAME, or --gpu-bandwidth and --pcie");
  }
}

// How often neurons fire: the profile given, or the one prepare left beside the model, or --active.
void firing_of(const plan_args& a, const model& m, plan_inputs& in) {
  std::string dir = a.stats;
  if (dir.empty() && a.active < 0 && std::filesystem::exists(std::filesystem::path(a.model + ".work") / "firing_counts.u64")) dir = a.model + ".work";
  if (dir.empty()) {
    if (a.active < 0 && m.has_predictors()) throw std::invalid_argument("plan: no profile beside the model: give --stats DIR or --active F");
    in.o.active = std::max(0.0, a.active);
    return;
  }
  auto p = loader::read_profile(dir);
  if (p.n_layer != m.hp().n_layer || p.n_ff != m.hp().n_ff)
    throw std::invalid_argument(fmt::format("{}: a profile of {} layers x {} neurons, the model has {} x {}", dir, p.n_layer, p.n_ff, m.hp().n_layer, m.hp().n_ff));
  in.o.firing_counts = loader::counts_in_order_of(p, m), in.o.tokens = static_cast<uint64_t>(p.tokens);
  in.firing_from = fmt::format("{} ({} tokens)", dir, p.tokens);
}

// The CPU's rates: given, or this file's own work on this machine: a few tokens decoded by the engine,
// each kind of work timed against the bytes it read (tools::measure_cpu_rates). A plain read probe is
// a ceiling the kernels do not reach (50-75% of it here), and a sparse FFN's scattered rows, short
// ones most (Q4_0), are read slower than a product reads the same bytes. A sparse file's decoded
// tokens also say how many neurons its predictors choose (more than fire: the rows it reads).
void cpu_rates_of(const plan_args& a, const model& m, plan_inputs& in) {
  in.o.cpu_gbs = a.cpu_gbs;
  in.o.cpu_ffn_gbs = a.ffn_gbs;
  if (in.o.cpu_gbs > 0 && !(m.has_predictors() && a.active < 0)) return;
  const auto r = tools::measure_cpu_rates(model::load(a.model), a.threads);
  if (in.o.cpu_gbs <= 0) {
    in.o.cpu_gbs = r.products_gbs;
    if (in.o.cpu_ffn_gbs <= 0) in.o.cpu_ffn_gbs = r.ffn_gbs;
    in.cpu_from = fmt::format("this file's work measured here: {} tokens decoded with {} threads after a warm-up, the median of {} passes "
                              "({:.1f} MiB of FFN a token; the passes {:.0f}% apart)",
                              r.tokens, r.threads, r.passes, r.ffn_bytes_per_token / double(1 << 20), 100 * r.spread);
    in.cpu_spread = r.spread, in.cpu_noisy = r.noisy;
    if (r.noisy)
      fmt::print(stderr,
                 "hotcold plan: the machine was too busy to trust the CPU's measurement: its passes were {:.0f}% apart (a quiet machine: under {:.0f}%); "
                 "rerun when it is quiet, or give --cpu-bandwidth\n",
                 100 * r.spread, 100 * tools::cpu_rates::noisy_spread);
  }
  in.o.chosen_per_token = r.chosen_per_token;
  if (!r.chosen_per_token.empty()) {
    double n = 0;
    for (double x : r.chosen_per_token) n += x;
    in.chosen_fraction = n / static_cast<double>(m.hp().n_layer * m.hp().n_ff);
  }
}

// The disk tier's plan (--ram-budget): the disk's rate given, or measured on this file with the
// reads the prediction expects (one neuron's rows each, a layer's misses at a time); beside a GPU's
// plan where there is one.
struct disk_plan {
  tools::disk_tier_prediction p;
  std::string rate_from = "given (--disk-read)";
};
disk_plan plan_disk(const plan_args& a, const plan_inputs& in, const tools::plan_prediction* beside = nullptr) {
  load_options lo;
  lo.ffn_rows_from_disk = true;  // (what run --ram-budget loads: the rows and the embedding table left in the file)
  const auto m = model::load(a.model, lo);
  const uint64_t budget = static_cast<uint64_t>(a.ram_budget * double(1ull << 30));
  disk_plan d;
  if (a.disk_gbs > 0) {
    d.p = tools::predict_disk_tier(*m, in.o, budget, a.disk_gbs, beside);
    return d;
  }
  const auto first = tools::predict_disk_tier(*m, in.o, budget, 1.0, beside);  // (the reads it expects; their time scales with the rate)
  const uint64_t piece = *std::max_element(first.neuron_bytes.begin(), first.neuron_bytes.end());
  const int64_t batch = std::max<int64_t>(1, std::llround(first.neurons_read_per_token / static_cast<double>(m->hp().n_layer)));
  // (2048 reads, fewer where they are long: at most ~256 MiB; and at least eight batches)
  const auto pieces = std::max<int64_t>(8 * batch, std::min<int64_t>(2048, static_cast<int64_t>((uint64_t{256} << 20) / piece)));
  const auto r = tools::measure_disk_rate(a.model, piece, batch, pieces);
  d.p = tools::predict_disk_tier(*m, in.o, budget, r.gbs, beside);
  d.rate_from = fmt::format("measured here: {} reads of {:.1f} KiB at random places in the file, {} at a time{}", r.reads, piece / 1024.0, batch,
                            r.direct ? ", direct" : " (through the page cache: the file system refused direct reads, so this is the cache's rate)");
  return d;
}

nlohmann::json disk_json(const disk_plan& d) {
  const auto& p = d.p;
  return {{"ram_budget_bytes", p.budget},
          {"pinned_neurons_per_layer", p.pinned_rows},
          {"device_neurons_per_layer", p.device_rows},
          {"window_neurons", p.window_rows},
          {"disk_read_gbs", p.disk_gbs},
          {"disk_read_from", d.rate_from},
          {"disk_bytes_per_token", p.disk_bytes_per_token},
          {"neurons_read_per_token", p.neurons_read_per_token},
          {"ram_hit_rate", p.ram_hit_rate},
          {"compute_seconds_per_token", p.compute_seconds},
          {"io_wait_seconds_per_token", p.disk_seconds},
          {"in_memory_tokens_per_s", p.in_memory_tokens_per_s},
          {"tokens_per_s", p.tokens_per_s},
          {"overlapped_tokens_per_s", p.overlapped_tokens_per_s}};
}

std::string disk_lines(const disk_plan& d) {
  const auto& p = d.p;
  const std::string holds = p.experts && p.pinned_rows == 0 ? fmt::format("a cache of {} experts for all the layers", p.window_rows)
                                                             : fmt::format("each layer's {} hottest {}{} and a window of {} more", p.pinned_rows,
                                                                           p.experts ? "experts" : "neurons",
                                                                           p.device_rows > 0 ? fmt::format(" past the GPU's {}", p.device_rows) : "",
                                                                           p.window_rows);
  return fmt::format("disk tier: --ram-budget {:.3f} GiB holds {}; a token reads {:.1f} MiB from the "
                     "file ({:.1f} {}; {:.1f}% of the chosen ones in memory) at {:.2f} GB/s ({})\n"
                     "disk tier per token: {} work {:.2f} ms + the reads {:.2f} ms = {:.1f} tokens/s ({:.1f} with the reads wholly beside the "
                     "work; {:.1f} with the whole file in memory)\n",
                     p.budget / double(1ull << 30), holds, p.disk_bytes_per_token / double(1 << 20), p.neurons_read_per_token,
                     p.experts ? "experts" : "neurons", 100 * p.ram_hit_rate, p.disk_gbs, d.rate_from, p.beside_gpu ? "the hybrid's (GPU and CPU)" : "the CPU's",
                     p.compute_seconds * 1e3, p.disk_seconds * 1e3, p.tokens_per_s, p.overlapped_tokens_per_s, p.in_memory_tokens_per_s);
}

// The inputs every plan's JSON carries: the file, the CPU's rates and where they came from, the firing.
nlohmann::json inputs_json(const plan_args& a, const plan_inputs& in) {
  return {{"model", a.model},
          {"cpu_bandwidth_gbs", in.o.cpu_gbs},
          {"cpu_bandwidth_from", in.cpu_from},
          {"cpu_measurement_spread", in.cpu_spread >= 0 ? nlohmann::json(in.cpu_spread) : nlohmann::json()},
          {"cpu_measurement_noisy", in.cpu_noisy},
          {"chosen_fraction", in.chosen_fraction >= 0 ? nlohmann::json(in.chosen_fraction) : nlohmann::json()},
          {"cpu_ffn_bandwidth_gbs", in.o.ffn_gbs()},
          {"firing_from", in.firing_from}};
}

void print_plan_json(const plan_args& a, const plan_inputs& in, const tools::plan_prediction& p, const disk_plan* disk) {
  const auto& o = in.o;
  nlohmann::json j = inputs_json(a, in);
  j.update({{"gpu", in.gpu_name},
            {"vram_budget_bytes", o.budget},
            {"ctx", p.plan.ctx},
            {"gpu_bandwidth_gbs", o.gpu_gbs},
            {"pcie_gbs", o.pcie_gbs},
            {"gpu_efficiency", o.gpu_efficiency},
            {"crossing_us", o.crossing_us},
            {"cpu_only_tokens_per_s", p.cpu_only_tokens_per_s},
            {"layer_offload_tokens_per_s", p.layer_offload_tokens_per_s},
            {"hybrid_tokens_per_s", p.hybrid_tokens_per_s},
            {"cpu_only_bytes_per_token", p.cpu_only_bytes},
            {"host_bytes_per_token", p.host_bytes},
            {"device_bytes_per_token", p.device_bytes},
            {"crossings_per_token", p.crossings},
            {"launch_us", o.launch_us},
            {"copy_us", o.copy_us},
            {"launches_per_token", p.launches},
            {"copies_per_token", p.copies},
            {"syncs_per_token", p.syncs},
            {"round_trip_seconds_per_token", p.round_trip_seconds},
            {"offload_layers", p.offload_layers},
            {"limited_by", p.limited_by}});
  if (disk) j["disk_tier"] = disk_json(*disk);
  if (p.plan.experts) {
    j["n_cpu_moe"] = p.n_cpu_moe >= 0 ? nlohmann::json(p.n_cpu_moe) : nlohmann::json();
    j["n_cpu_moe_tokens_per_s"] = p.layer_offload_tokens_per_s;
    j["expert_hit_rate"] = p.expert_hit_rate;
    int64_t held = 0;
    for (const auto& l : p.plan.layers) held += l.expert_slots;
    j["experts_on_gpu"] = held;
  }
  fmt::print("{}\n", j.dump());
}

}  // namespace

void run_plan(const plan_args& a) {
  plan_inputs in;
  const bool gpu = a.budget >= 0 || !a.gpu.empty() || a.gpu_gbs > 0;  // (a GPU's plan; without one, the disk tier's alone)
  if (!gpu && a.ram_budget <= 0) throw std::invalid_argument("plan needs --vram-budget GiB (a GPU's plan) or --ram-budget GiB (the disk tier's), or both");
  if (gpu && a.budget < 0) throw std::invalid_argument("plan: a GPU's plan needs --vram-budget GiB");
  if (!gpu) {
    auto m = model::load(a.model, {true});
    firing_of(a, *m, in);
    cpu_rates_of(a, *m, in);
    const disk_plan d = plan_disk(a, in);
    if (!a.json) {
      fmt::print("{}: {} layers, embd {}, ffn {}\n{}firing: {}; CPU: {:.1f} GB/s products, {:.1f} GB/s sparse FFN rows ({})\n", a.model, m->hp().n_layer,
                 m->hp().n_embd, m->hp().n_ff, disk_lines(d), in.firing_from, in.o.cpu_gbs, in.o.ffn_gbs(),
                 in.cpu_from);
      return;
    }
    nlohmann::json j = inputs_json(a, in);
    j["disk_tier"] = disk_json(d);
    fmt::print("{}\n", j.dump());
    return;
  }
  in.o.budget = static_cast<uint64_t>(a.budget * double(1ull << 30));
  in.o.ctx = a.ctx;
  in.o.kv = parse_cache_types(a.cache_type_k, a.cache_type_v);
  if (!in.o.kv.plain())
    fmt::print(stderr, "hotcold plan: a {} cache: the bytes counted in its types; hotcold's GPU attention reads f16 or f32 caches, so the GPU columns "
                       "assume what would hold (run keeps such a cache's attention on the CPU)\n", kv_types_name(in.o.kv));
  in.o.gpu_efficiency = a.efficiency;
  in.o.crossing_us = a.crossing_us;
  in.o.launch_us = a.launch_us, in.o.copy_us = a.copy_us;
  choose_gpu(a, in);
  auto m = model::load(a.model, {true});
  in.o.expert_hit_rate = a.expert_hit_rate;
  if (a.expert_hit_rate >= 0 && !m->hp().moe()) throw std::invalid_argument(fmt::format("--expert-hit-rate: {} is not a mixture of experts", a.model));
  if (m->hp().moe())
    in.firing_from = a.expert_hit_rate >= 0 ? fmt::format("a mixture: {:.1f}% of the routed experts in the GPU's slots (--expert-hit-rate)", 100 * a.expert_hit_rate)
                                            : std::string("a mixture: each layer's slots over its experts (experts routed evenly)");
  else
    firing_of(a, *m, in);
  cpu_rates_of(a, *m, in);
  const auto p = tools::predict_plan(*m, in.o);
  std::optional<disk_plan> disk;
  if (a.ram_budget > 0) disk = plan_disk(a, in, &p);
  if (a.json) print_plan_json(a, in, p, disk ? &*disk : nullptr);
  else
    fmt::print("{}{}firing: {}; GPU: {}; CPU bandwidth: {}\n", tools::prediction_table(*m, in.o, p), disk ? disk_lines(*disk) : std::string(), in.firing_from,
               in.gpu_name, in.cpu_from);
}

}  // namespace hotcold::launcher
