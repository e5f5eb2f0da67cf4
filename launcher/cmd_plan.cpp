// hotcold plan -m FILE --vram-budget G [-c CTX] [--gpu NAME | --gpu-bandwidth GBps --pcie GBps]
//              [--cpu-bandwidth GBps] [--cpu-rows-bandwidth GBps] [--stats DIR | --active F] [--json]
// What a GPU would give this file, on paper (tools/planner.hpp): bytes per token on each side, the
// crossings, and the tokens per second of the CPU alone, of whole layers offloaded and of the hybrid.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/forward.hpp"
#include "engine/matmul.hpp"
#include "engine/read_costs.hpp"
#include "engine/trace.hpp"
#include "engine/thread_pool.hpp"
#include "launcher/commands.hpp"
#include "launcher/option_checks.hpp"
#include "model/model.hpp"
#include "tools/planner.hpp"
#include "tools/profile.hpp"

namespace hotcold::launcher {

void add_plan_command(CLI::App& app, int& exit_code) {
  struct args {
    std::string model, gpu, stats;
    double budget = 0, gpu_gbs = 0, pcie_gbs = 0, cpu_gbs = 0, rows_gbs = 0, active = -1, efficiency = 0.75, crossing_us = 10;
    int64_t ctx = 0;
    int threads = 0;
    bool json = false;
  };
  auto a = std::make_shared<args>();
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
  cmd->add_option("--cpu-bandwidth", a->cpu_gbs, "The CPU's rate over weights, GB/s (default: this file's products measured here)")->check(finite_in(0, 1e6));
  cmd->add_option("--cpu-rows-bandwidth", a->rows_gbs,
                  "A sparse file: the CPU's rate over its FFN's scattered rows, GB/s (default: with --cpu-bandwidth, the same; else a few of this file's "
                  "decoded tokens measured here)")
      ->check(finite_in(0, 1e6));
  auto* stats = cmd->add_option("--stats", a->stats, "Profile folder (hotcold profile): how often each neuron fires (default: MODEL.work when there)");
  cmd->add_option("--active", a->active, "Without a profile: the fraction of neurons that fire per token")->check(finite_in(0, 1))->excludes(stats);
  cmd->add_option("--gpu-efficiency", a->efficiency, "The fraction of the GPU's bandwidth its kernels reach")->capture_default_str()->check(finite_in(0, 1));
  cmd->add_option("--crossing-us", a->crossing_us, "A crossing's fixed cost in microseconds")->capture_default_str()->check(finite_in(0, 1e6));
  cmd->add_option("-t,--threads", a->threads, "Threads of the CPU's measurement (default: the cores)")->check(whole_in(0, 1024));
  cmd->add_flag("--json", a->json, "One JSON object on stdout");
  cmd->callback([a, &exit_code] {
    exit_code = run_guarded("plan", [&] {
      tools::planner_options o;
      o.budget = static_cast<uint64_t>(a->budget * double(1ull << 30));
      o.ctx = a->ctx;
      o.gpu_efficiency = a->efficiency;
      o.crossing_us = a->crossing_us;
      std::string gpu_name = "custom";
      if (!a->gpu.empty()) {
        const auto* g = tools::find_gpu(a->gpu);
        if (!g) throw std::invalid_argument(fmt::format("--gpu {}: not one of the GPUs known here; give --gpu-bandwidth and --pcie instead", a->gpu));
        o.gpu_gbs = g->bandwidth_gbs, o.pcie_gbs = g->pcie_gbs, gpu_name = g->name;
      } else if (a->gpu_gbs > 0) {
        o.gpu_gbs = a->gpu_gbs, o.pcie_gbs = a->pcie_gbs;
      } else {
        throw std::invalid_argument("plan needs a GPU: --gpu NAME, or --gpu-bandwidth and --pcie");
      }
      auto m = model::load(a->model, {true});
      // How often neurons fire: the profile given, or the one prepare left beside the model, or --active.
      std::string dir = a->stats;
      if (dir.empty() && a->active < 0 && std::filesystem::exists(std::filesystem::path(a->model + ".work") / "firing_counts.u64")) dir = a->model + ".work";
      std::string source = "every neuron at --active";
      if (!dir.empty()) {
        auto p = tools::read_profile(dir);
        if (p.n_layer != m->hp().n_layer || p.n_ff != m->hp().n_ff)
          throw std::invalid_argument(fmt::format("{}: a profile of {} layers x {} neurons, the model has {} x {}", dir, p.n_layer, p.n_ff, m->hp().n_layer,
                                                  m->hp().n_ff));
        o.firing_counts = std::move(p.firing_counts), o.tokens = static_cast<uint64_t>(p.tokens);
        source = fmt::format("{} ({} tokens)", dir, p.tokens);
      } else {
        if (a->active < 0 && m->has_predictors()) throw std::invalid_argument("plan: no profile beside the model: give --stats DIR or --active F");
        o.active = std::max(0.0, a->active);
      }
      o.cpu_gbs = a->cpu_gbs;
      o.cpu_rows_gbs = a->rows_gbs > 0 ? a->rows_gbs : a->cpu_gbs;
      std::string cpu_source = "given", rows_source = a->rows_gbs > 0 ? "given" : "--cpu-bandwidth";
      std::shared_ptr<const model> loaded;
      thread_pool pool(a->threads);
      if (o.cpu_gbs <= 0 || (o.cpu_rows_gbs <= 0 && m->has_predictors())) loaded = model::load(a->model);
      if (o.cpu_gbs <= 0) {
        // The rate the engine's own products reach here: every attention matrix and the head of this
        // file (its types, its layout in the private copy) times a vector, the median of nine passes
        // after a warm-up — a plain read probe is a ceiling the kernels do not reach (50-75% of it here).
        const auto& w = loaded->weights();
        std::vector<const tensor_view*> mats;
        for (const auto& l : w.layers)
          for (const tensor_view* t : {&l.wq, &l.wk, &l.wv, &l.wqkv, &l.wo})
            if (*t) mats.push_back(t);
        mats.push_back(&w.output);
        uint64_t bytes = 0;
        int64_t widest = 0;
        for (const auto* t : mats) bytes += t->bytes(), widest = std::max(widest, t->ne1);
        std::vector<float> x(static_cast<size_t>(loaded->hp().n_embd), 0.5f), y(static_cast<size_t>(widest));
        std::vector<kernels::block_q8_0> xq;
        std::vector<double> passes;
        for (int pass = 0; pass < 10; ++pass) {
          const auto t0 = std::chrono::steady_clock::now();
          for (const auto* t : mats) matmul(pool, *t, x.data(), 1, y.data(), xq);
          const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          if (pass > 0) passes.push_back(s);  // (the first warms up)
        }
        std::nth_element(passes.begin(), passes.begin() + static_cast<long>(passes.size() / 2), passes.end());
        o.cpu_gbs = static_cast<double>(bytes) / passes[passes.size() / 2] / 1e9;  // the median pass, as bench's mean is typical
        cpu_source = fmt::format("this file's products measured here ({} threads, {:.0f} MiB)", pool.size(), bytes / double(1 << 20));
      }
      if (o.cpu_rows_gbs <= 0 && m->has_predictors()) {
        // The rate the engine's sparse FFN reaches over this file's rows (scattered, each chosen
        // neuron's gate, up and down rows: slower per byte than a product, and more so for short
        // quantized rows): 32 tokens decoded after an 8-token prompt, the time of their FFN blocks
        // (the trace's "ffn" intervals) against the rows those read (read_costs, as bench counts).
        const auto& hp = loaded->hp();
        inference_context ctx(loaded, 64, static_cast<int>(pool.size()), 1);
        ctx.set_mode(ffn_mode::sparse);
        std::vector<token_id> prompt;
        for (int i = 0; i < 8; ++i) prompt.push_back(static_cast<token_id>((7 + 131 * i) % hp.n_vocab));
        auto logits = ctx.forward_batch(prompt, 0);
        const std::vector<int64_t> n0 = ctx.read_neurons(), d0 = ctx.read_down_rows();
        trace_recorder rec;
        ctx.set_trace(&rec);
        for (int64_t pos = 8; pos < 40; ++pos) {
          const token_id next = static_cast<token_id>(std::max_element(logits.begin(), logits.end()) - logits.begin());
          logits = ctx.forward_batch(std::span<const token_id>(&next, 1), pos);
        }
        ctx.set_trace(nullptr);
        double seconds = 0, bytes = 0;
        for (const auto& e : rec.entries())
          if (std::string_view(e.span.name) == stage_name(stage::ffn)) seconds += std::chrono::duration<double>(e.span.end - e.span.begin).count();
        const read_costs c(*loaded);
        for (size_t l = 0; l < c.neuron.size(); ++l)
          bytes += static_cast<double>(c.ffn_rows(l, static_cast<uint64_t>(ctx.read_neurons()[l] - n0[l]), static_cast<uint64_t>(ctx.read_down_rows()[l] - d0[l])));
        if (seconds > 0 && bytes > 0) {
          o.cpu_rows_gbs = bytes / seconds / 1e9;
          rows_source = fmt::format("this file's sparse FFN over 32 decoded tokens here ({} threads, {:.1f} MiB of rows a token)", pool.size(),
                                    bytes / 32 / double(1 << 20));
        } else {
          o.cpu_rows_gbs = o.cpu_gbs, rows_source = "the products' (no FFN rows were read)";
        }
      }
      const auto p = tools::predict_plan(*m, o);
      if (a->json) {
        nlohmann::json j{{"model", a->model},
                         {"gpu", gpu_name},
                         {"vram_budget_bytes", o.budget},
                         {"ctx", p.plan.ctx},
                         {"gpu_bandwidth_gbs", o.gpu_gbs},
                         {"pcie_gbs", o.pcie_gbs},
                         {"cpu_bandwidth_gbs", o.cpu_gbs},
                         {"cpu_bandwidth_from", cpu_source},
                         {"cpu_rows_bandwidth_gbs", o.cpu_rows_gbs > 0 ? o.cpu_rows_gbs : o.cpu_gbs},
                         {"cpu_rows_bandwidth_from", m->has_predictors() ? rows_source : "a dense file: no sparse rows"},
                         {"gpu_efficiency", o.gpu_efficiency},
                         {"crossing_us", o.crossing_us},
                         {"firing_from", source},
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
      } else {
        fmt::print("{}firing: {}; GPU: {}; CPU bandwidth: {}\n", tools::prediction_table(*m, o, p), source, gpu_name, cpu_source);
      }
    });
  });
}

}  // namespace hotcold::launcher
