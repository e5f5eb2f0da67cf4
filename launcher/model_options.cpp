#include "launcher/model_options.hpp"

#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "launcher/default_model.hpp"

namespace hotcold::launcher {

void add_model_options(CLI::App* cmd, model_args& m, bool model_required) {
  auto* opt = cmd->add_option("-m,--model", m.model, model_required ? "GGUF model" : "GGUF model (default: the embedded default model)");
  if (model_required) opt->required();
  cmd->add_option("-t,--threads", m.threads, "Threads (default: all hardware threads)");
  cmd->add_option("-c,--ctx", m.ctx, "Context length (default: the model's, at most 4096)");
  cmd->add_flag("--mmap", m.mmap, "Compute from the file's mmap'd pages instead of a private copy (slower here)");
  cmd->add_option("--mode", m.mode, "dense: every FFN neuron; sparse: the neurons the predictors choose (default: sparse when the file has predictors)")
      ->check(CLI::IsMember({"dense", "sparse"}));
}

loaded load(const model_args& a, int64_t ctx_override) {
  std::string path = a.model.empty() ? ensure_default_model() : a.model;
  auto t0 = std::chrono::steady_clock::now();
  auto m = model::load(path, {a.mmap});
  const auto& hp = m->hp();
  int threads = a.threads > 0 ? a.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int64_t ctx = ctx_override > 0 ? ctx_override : a.ctx > 0 ? a.ctx : std::min<int64_t>(hp.n_ctx_train, 4096);
  ffn_mode mode = a.mode == "dense" ? ffn_mode::dense : a.mode == "sparse" ? ffn_mode::sparse
                : m->has_predictors() ? ffn_mode::sparse : ffn_mode::dense;
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print(stderr, "hotcold: {} — {} {}, {} layers, embd {}, ffn {}, heads {}/{}, vocab {}, {:.1f} MiB of weights{}; loaded in {:.2f} s\n",
             path, architecture_name(hp.arch), activation_name(hp.act), hp.n_layer, hp.n_embd, hp.n_ff, hp.n_head, hp.n_head_kv,
             hp.n_vocab, m->weight_bytes() / double(1 << 20), a.mmap ? " (mmap)" : "", secs);
  fmt::print(stderr, "hotcold: context {}, {} threads, {} FFN\n", ctx, threads, mode == ffn_mode::sparse ? "sparse" : "dense");
  if (const auto* pl = m->placement()) {
    int64_t hot = 0;
    for (const auto& layer : pl->hot) hot += static_cast<int64_t>(layer.size());
    // Until the hot device arrives (issue 5) every neuron runs on the CPU; the placement is read and checked.
    fmt::print(stderr, "hotcold: placement {}: {} hot neurons ({:.1f}% of the FFN), {:.3f} GiB of FFN rows for the fast device\n", placement_path(path), hot,
               100.0 * static_cast<double>(hot) / static_cast<double>(hp.n_layer * hp.n_ff), pl->vram_capacity / double(1ull << 30));
  }
  for (const auto& w : m->vocabulary().warnings()) fmt::print(stderr, "hotcold: warning: {}\n", w);
  loaded l{m, std::make_unique<inference_context>(m, ctx, threads)};
  l.ctx->set_mode(mode);
  return l;
}

}  // namespace hotcold::launcher
