// hotcold plan -m FILE --vram-budget G [-c CTX] [--gpu NAME | --gpu-bandwidth GBps --pcie GBps]
//              [--cpu-bandwidth GBps] [--cpu-ffn-bandwidth GBps] [--stats DIR | --active F] [--json]
// What a GPU would give this file, on paper (tools/planner.hpp): bytes per token on each side, the
// crossings, and the tokens per second of the CPU alone, of whole layers offloaded and of the hybrid.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "launcher/commands.hpp"
#include "launcher/option_checks.hpp"
#include "model/model.hpp"
#include "tools/planner.hpp"
#include "tools/profile.hpp"

namespace hotcold::launcher {

namespace {

struct plan_args {
  std::string model, gpu, stats;
  double budget = 0, gpu_gbs = 0, pcie_gbs = 0, cpu_gbs = 0, ffn_gbs = 0, active = -1, efficiency = 0.75, crossing_us = 10;
  int64_t ctx = 0;
  int threads = 0;
  bool json = false;
};

// What the planner is told, and where its figures came from.
struct plan_inputs {
  tools::planner_options o;
  std::string gpu_name = "custom", firing_from = "every neuron at --active", cpu_from = "given";
  double chosen_fraction = -1;  // a sparse file's: neurons its predictors choose, measured here
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
  auto p = tools::read_profile(dir);
  if (p.n_layer != m.hp().n_layer || p.n_ff != m.hp().n_ff)
    throw std::invalid_argument(fmt::format("{}: a profile of {} layers x {} neurons, the model has {} x {}", dir, p.n_layer, p.n_ff, m.hp().n_layer, m.hp().n_ff));
  in.o.firing_counts = std::move(p.firing_counts), in.o.tokens = static_cast<uint64_t>(p.tokens);
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
    in.cpu_from = fmt::format("this file's work measured here: {} tokens decoded with {} threads, the median of {} passes ({:.1f} MiB of FFN a token)",
                              r.tokens, r.threads, r.passes, r.ffn_bytes_per_token / double(1 << 20));
  }
  in.o.chosen_per_token = r.chosen_per_token;
  if (!r.chosen_per_token.empty()) {
    double n = 0;
    for (double x : r.chosen_per_token) n += x;
    in.chosen_fraction = n / static_cast<double>(m.hp().n_layer * m.hp().n_ff);
  }
}

void print_plan_json(const plan_args& a, const plan_inputs& in, const tools::plan_prediction& p) {
  const auto& o = in.o;
  nlohmann::json j{{"model", a.model},
                   {"gpu", in.gpu_name},
                   {"vram_budget_bytes", o.budget},
                   {"ctx", p.plan.ctx},
                   {"gpu_bandwidth_gbs", o.gpu_gbs},
                   {"pcie_gbs", o.pcie_gbs},
                   {"cpu_bandwidth_gbs", o.cpu_gbs},
                   {"cpu_bandwidth_from", in.cpu_from},
                   {"chosen_fraction", in.chosen_fraction >= 0 ? nlohmann::json(in.chosen_fraction) : nlohmann::json()},
                   {"cpu_ffn_bandwidth_gbs", o.cpu_ffn_gbs > 0 ? o.cpu_ffn_gbs : o.cpu_gbs},
                   {"gpu_efficiency", o.gpu_efficiency},
                   {"crossing_us", o.crossing_us},
                   {"firing_from", in.firing_from},
                   {"cpu_only_tokens_per_s", p.cpu_only_tokens_per_s},
                   {"layer_offload_tokens_per_s", p.layer_offload_tokens_per_s},
                   {"hybrid_tokens_per_s", p.hybrid_tokens_per_s},
                   {"cpu_only_bytes_per_token", p.cpu_only_bytes},
                   {"host_bytes_per_token", p.host_bytes},
                   {"device_bytes_per_token", p.device_bytes},
                   {"crossings_per_token", p.crossings},
                   {"offload_layers", p.offload_layers},
                   {"limited_by", p.limited_by}};
  fmt::print("{}\n", j.dump());
}

void run_plan(const plan_args& a) {
  plan_inputs in;
  in.o.budget = static_cast<uint64_t>(a.budget * double(1ull << 30));
  in.o.ctx = a.ctx;
  in.o.gpu_efficiency = a.efficiency;
  in.o.crossing_us = a.crossing_us;
  choose_gpu(a, in);
  auto m = model::load(a.model, {true});
  firing_of(a, *m, in);
  cpu_rates_of(a, *m, in);
  const auto p = tools::predict_plan(*m, in.o);
  if (a.json) print_plan_json(a, in, p);
  else fmt::print("{}firing: {}; GPU: {}; CPU bandwidth: {}\n", tools::prediction_table(*m, in.o, p), in.firing_from, in.gpu_name, in.cpu_from);
}

}  // namespace

void add_plan_command(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<plan_args>();
  std::string gpus;
  for (const auto& g : tools::known_gpus()) gpus += (gpus.empty() ? "" : ", ") + g.name;
  auto* cmd = app.add_subcommand("plan", "Predict decode speed on paper: the CPU alone, whole layers on a GPU, and the hybrid, for a GPU budget");
  cmd->add_option("-m,--model", a->model, "GGUF model (sparse: the hybrid; dense: whole layers)")->required();
  cmd->add_option("--vram-budget", a->budget, "GPU memory the plan may use, GiB")->required()->check(finite_in(0, 1 << 20));
  cmd->add_option("-c,--ctx", a->ctx, "Context the KV cache holds (default: the model's, at most 4096); a token reads half of it")
      ->check(whole_in(0, 1ll << 40));
  auto* gpu = cmd->add_option("--gpu", a->gpu, "A GPU by name: " + gpus);
  auto* gbw = cmd->add_option("--gpu-bandwidth", a->gpu_gbs, "The GPU's memory bandwidth, GB/s")->check(finite_in(0, 1e6));
  auto* pcie = cmd->add_option("--pcie", a->pcie_gbs, "The GPU's host link, GB/s one way")->check(finite_in(0, 1e6));
  gpu->excludes(gbw)->excludes(pcie);
  gbw->needs(pcie);
  pcie->needs(gbw);
  cmd->add_option("--cpu-bandwidth", a->cpu_gbs,
                  "The CPU's rate over weights, GB/s, for all its work (default: measured here on this file's own work, a few decoded tokens: "
                  "its products, its predictors and its FFN each at its own rate)")
      ->check(finite_in(0, 1e6));
  cmd->add_option("--cpu-ffn-bandwidth", a->ffn_gbs,
                  "The CPU's rate over the FFN as the file runs it (a sparse file's scattered rows), GB/s (default: with --cpu-bandwidth, the same; "
                  "else measured with the rest)")
      ->check(finite_in(0, 1e6));
  auto* stats = cmd->add_option("--stats", a->stats, "Profile folder (hotcold profile): how often each neuron fires (default: MODEL.work when there)");
  cmd->add_option("--active", a->active, "Without a profile: the fraction of neurons that fire per token")->check(finite_in(0, 1))->excludes(stats);
  cmd->add_option("--gpu-efficiency", a->efficiency, "The fraction of the GPU's bandwidth its kernels reach")->capture_default_str()->check(finite_in(0, 1));
  cmd->add_option("--crossing-us", a->crossing_us, "A crossing's fixed cost in microseconds")->capture_default_str()->check(finite_in(0, 1e6));
  cmd->add_option("-t,--threads", a->threads, "Threads of the CPU's measurement (default: the cores)")->check(whole_in(0, 1024));
  cmd->add_flag("--json", a->json, "One JSON object on stdout");
  cmd->callback([a, &exit_code] { exit_code = run_guarded("plan", [&] { run_plan(*a); }); });
}

}  // namespace hotcold::launcher
