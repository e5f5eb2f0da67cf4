// The offline sparse pipeline: profile, train-predictor, prepare (profile + train + sparse file).
#include <chrono>
#include <filesystem>

#include <fmt/format.h>

#include "launcher/commands.hpp"
#include "launcher/option_checks.hpp"
#include "launcher/progress.hpp"
#include "model/gguf.hpp"
#include "model/model.hpp"
#include "model/placement_file.hpp"
#include "loader/placement.hpp"
#include "tools/predictor_train.hpp"
#include "tools/sparsity.hpp"
#include "tools/profile.hpp"
#include "tools/sparse_file.hpp"

namespace hotcold::launcher {
namespace {

namespace fs = std::filesystem;

void print_fits(const tools::trained_predictors& p) {
  fmt::print("| layer | rank | threshold | recall | precision | active fraction | truly active |\n| --- | --- | --- | --- | --- | --- | --- |\n");
  double recall = 0, precision = 0, active = 0, truly = 0;
  for (size_t l = 0; l < p.fits.size(); ++l) {
    const auto& f = p.fits[l];
    fmt::print("| {} | {} | {:.4f} | {:.4f} | {:.4f} | {:.4f} | {:.4f} |\n", l, f.rank, p.layers[l].threshold, f.recall, f.precision,
               f.active_fraction, f.true_active_fraction);
    recall += f.recall, precision += f.precision, active += f.active_fraction, truly += f.true_active_fraction;
  }
  double n = static_cast<double>(std::max<size_t>(1, p.fits.size()));
  fmt::print("| all | | | {:.4f} | {:.4f} | {:.4f} | {:.4f} |\n", recall / n, precision / n, active / n, truly / n);
}

tools::trained_predictors train_with_progress(const tools::profile_data& data, const tools::train_options& o) {
  progress_bar bar("train-predictor");
  auto p = tools::train_predictors(data, o, [&](int64_t d, int64_t t) { bar.update(d, t); });
  bar.finish();
  return p;
}

tools::profile_result profile_with_progress(const tools::profile_options& o) {
  progress_bar bar("profile");
  auto r = tools::run_profile(o, [&](int64_t d, int64_t t) { bar.update(d, t); });
  bar.finish();
  return r;
}

struct train_args {
  std::string dir;
  tools::train_options o;
};

struct place_args {
  std::string model, stats;
  double budget = 0;
  int64_t ctx = 0;
};

struct prepare_args {
  std::string model, out, calib, work;
  int64_t tokens = 2048;
  int threads = 0;
  double budget = 0;
  int64_t ctx = 0;
  bool powerinfer = false;
  bool reuse_profile = false;
  double sparsity = 0;
  int64_t sparsity_tokens = 512;
  tools::train_options train;
};

void run_profile_command(const tools::profile_options& o) {
  auto r = profile_with_progress(o);
  for (size_t l = 0; l < r.active_fraction.size(); ++l) fmt::print("layer {:3}: active fraction {:.4f}\n", l, r.active_fraction[l]);
  fmt::print(stderr, "hotcold profile: {} tokens -> {}\n", r.tokens, o.out_dir);
}

void run_train_predictor(const train_args& a) {
  auto data = tools::read_profile(a.dir);
  auto p = train_with_progress(data, a.o);
  auto path = (fs::path(a.dir) / "predictors.gguf").string();
  tools::save_predictors(p, path);
  print_fits(p);
  fmt::print(stderr, "hotcold train-predictor: wrote {}\n", path);
}

void run_place(const place_args& a) {
  auto plan = tools::plan_from_profile(a.model, a.stats, a.budget, a.ctx);
  auto path = placement_path(a.model);
  auto m = model::load(a.model, {true});
  loader::write_placement(plan, path, m->hp().n_ff, a.model);
  auto gib = [](uint64_t b) { return b / double(1ull << 30); };
  fmt::print("budget {:.3f} GiB: attention {:.3f}, predictors {:.3f}, norms {:.4f}, output head {:.3f}, KV cache {:.3f}, compute {:.4f}; "
             "hot FFN rows {:.3f} GiB\n", gib(plan.budget), gib(plan.fixed.attention), gib(plan.fixed.predictors), gib(plan.fixed.norms),
             gib(plan.fixed.output), gib(plan.fixed.kv_cache), gib(plan.fixed.compute), gib(plan.solution.bytes));
  for (size_t l = 0; l < plan.solution.hot.size(); ++l) fmt::print("layer {:3}: {} hot neurons\n", l, plan.solution.hot[l].size());
  fmt::print("hot neurons take {:.1f}% of the profiled firings{}\n", 100 * plan.hot_mass, plan.solution.exact ? "" : " (greedy solution)");
  fmt::print("{}", plan.table());
  fmt::print(stderr, "hotcold place: wrote {}\n", path);
}

// prepare --sparsity: each layer's activation threshold, calibrated to skip that fraction of its neurons.
void calibrate_thresholds(const prepare_args& a, tools::sparse_file_options& so) {
  if (a.powerinfer) throw std::invalid_argument("--sparsity writes hotcold's GGUF (PowerInfer's files have no activation thresholds): drop --powerinfer");
  tools::sparsity_options c;
  c.model_path = a.model, c.calibration_path = a.calib, c.target = a.sparsity, c.tokens = a.sparsity_tokens, c.threads = a.threads;
  progress_bar bar("calibrate");
  const auto cal = tools::calibrate_act_thresholds(c, [&](int64_t d, int64_t t) { bar.update(d, t); });
  bar.finish();
  for (size_t l = 0; l < cal.thresholds.size(); ++l)
    fmt::print(stderr, "  layer {:2}: |act| threshold {:.5f} skips {:.1f}% of the calibration's neurons\n", l, cal.thresholds[l], 100 * cal.skipped[l]);
  so.act_thresholds = cal.thresholds;
  so.sparsity_target = static_cast<float>(a.sparsity);
}

// Predictors are stored like the model's FFN matrices (F16 next to F16, Q4_0 next to Q4_0), and their
// thresholds are chosen for the stored form. A thresholded model's predictors estimate
// pre-activations, which Q4_0's rounding blurs (the ~1B SiLU Q4_0 file: 74% of the neurons chosen for
// recall 0.997 against 66% as Q8_0), and F16 would spend twice Q8_0's bytes on a step for the same
// choice: they are Q8_0.
tensor_type predictor_type_for(const std::string& dense_path, const tools::sparse_file_options& so) {
  if (!so.act_thresholds.empty()) return tensor_type::q8_0;
  auto dense = gguf::file::open(dense_path);
  if (const auto* up = dense.find_tensor("blk.0.ffn_up.weight")) return up->type;
  return so.predictor_type;
}

void run_prepare(prepare_args a) {
  const auto t0 = std::chrono::steady_clock::now();
  tools::sparse_file_options so;
  if (a.sparsity > 0) calibrate_thresholds(a, so);
  tools::profile_options po;
  po.act_thresholds = so.act_thresholds;
  po.model_path = a.model;
  po.calibration_path = a.calib;
  po.tokens = a.tokens;
  po.threads = a.threads;
  po.out_dir = a.work.empty() ? a.out + ".work" : a.work;
  if (!a.reuse_profile || !fs::exists(fs::path(po.out_dir) / "profile.json")) profile_with_progress(po);
  auto data = tools::read_profile(po.out_dir);
  a.train.threads = a.threads;
  so.predictor_type = predictor_type_for(a.model, so);
  a.train.stored_as = so.predictor_type;
  auto p = train_with_progress(data, a.train);
  tools::save_predictors(p, (fs::path(po.out_dir) / "predictors.gguf").string());
  print_fits(p);
  if (a.powerinfer) so.kind = gguf::file_kind::powerinfer;  // one threshold: see write_sparse_model
  tools::write_sparse_model(a.model, a.out, p.layers, so);
  if (a.budget > 0) {
    auto plan = tools::plan_from_profile(a.out, po.out_dir, a.budget, a.ctx);
    auto m = model::load(a.out, {true});
    loader::write_placement(plan, placement_path(a.out), m->hp().n_ff, a.out);
    fmt::print(stderr, "{}", plan.table());
    fmt::print(stderr, "hotcold prepare: {:.1f}% of firings on hot neurons within {} GiB -> {}\n", 100 * plan.hot_mass, a.budget, placement_path(a.out));
  }
  fmt::print(stderr, "hotcold prepare: wrote {} in {:.1f} s\n", a.out, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

void add_profile_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<tools::profile_options>();
  auto* cmd = app.add_subcommand("profile", "Record per-neuron firing counts and predictor training samples over calibration text");
  cmd->add_option("-m,--model", o->model_path, "Dense GGUF model")->required();
  cmd->add_option("-f,--file", o->calibration_path, "Calibration text (default: text the model samples itself)");
  cmd->add_option("--tokens", o->tokens, "Tokens to profile")->capture_default_str();
  cmd->add_option("-t,--threads", o->threads, "Threads (0 or less: all hardware threads)")->check(thread_count());
  cmd->add_option("-o,--output", o->out_dir, "Output folder")->required();
  cmd->callback([o, &exit_code] { exit_code = run_guarded("profile", [&] { run_profile_command(*o); }); });
}

void add_train_predictor_command(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<train_args>();
  auto* cmd = app.add_subcommand("train-predictor", "Train each layer's activation predictor from a profile folder; writes DIR/predictors.gguf");
  cmd->add_option("dir", a->dir, "Folder written by `hotcold profile`")->required();
  cmd->add_option("--rank", a->o.rank, "Predictor rank (default: chosen per layer)");
  cmd->add_option("--epochs", a->o.epochs, "Training epochs")->capture_default_str();
  cmd->add_option("--recall", a->o.target_recall, "Recall each layer's threshold keeps on held-out samples")->capture_default_str();
  cmd->add_option("-t,--threads", a->o.threads, "Threads (0 or less: all hardware threads)")->check(thread_count());
  cmd->callback([a, &exit_code] { exit_code = run_guarded("train-predictor", [&] { run_train_predictor(*a); }); });
}

void add_place_command(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<place_args>();
  auto* cmd = app.add_subcommand("place", "Choose the hot FFN neurons for the fast device under a memory budget; writes MODEL.generated.gpuidx");
  cmd->add_option("-m,--model", a->model, "Sparse (or dense) GGUF model")->required();
  cmd->add_option("--stats", a->stats, "Profile folder (hotcold profile)")->required();
  cmd->add_option("--vram-budget", a->budget, "Fast-device memory, GiB")->required()->check(finite_in(0, 1 << 20));
  cmd->add_option("-c,--ctx", a->ctx, "Context the KV cache must hold (default: the model's, at most 4096)")->check(whole_in(0, 1ll << 40));
  cmd->callback([a, &exit_code] { exit_code = run_guarded("place", [&] { run_place(*a); }); });
}

void add_prepare_command(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<prepare_args>();
  auto* cmd = app.add_subcommand("prepare", "Profile a dense model, train its predictors and write the sparse model");
  cmd->add_option("-m,--model", a->model, "Dense GGUF model")->required();
  cmd->add_option("-o,--output", a->out, "Sparse GGUF model to write")->required();
  cmd->add_option("-f,--file", a->calib, "Calibration text (default: text the model samples itself)");
  cmd->add_option("--tokens", a->tokens, "Tokens to profile")->capture_default_str();
  cmd->add_option("--work", a->work, "Folder for the profile and predictors (default: OUTPUT.work)");
  cmd->add_option("-t,--threads", a->threads, "Threads (0 or less: all hardware threads)")->check(thread_count());
  cmd->add_option("--recall", a->train.target_recall, "Recall each layer's threshold keeps on held-out samples")->capture_default_str();
  cmd->add_flag("--powerinfer", a->powerinfer, "Write PowerInfer's magic (PWRI) and threshold key instead of hotcold's");
  cmd->add_flag("--reuse-profile", a->reuse_profile, "Use the profile already in the work folder instead of profiling again");
  cmd->add_option("--vram-budget", a->budget, "Also place hot neurons for a fast device of this many GiB (OUTPUT.generated.gpuidx)")
      ->check(finite_in(0, 1 << 20));
  cmd->add_option("-c,--ctx", a->ctx, "Context the placement's KV cache must hold")->check(whole_in(0, 1ll << 40));
  cmd->add_option("--sparsity", a->sparsity,
                  "SiLU/GELU files: skip this mean fraction S of each layer's FFN neurons, those with the smallest |act(gate)| (a threshold "
                  "per layer calibrated on the calibration text, stored in the file); 0: none (ReLU-family files)")
      ->check(finite_in(0, 0.99));
  cmd->add_option("--sparsity-tokens", a->sparsity_tokens, "Tokens the thresholds are calibrated on")->capture_default_str()->check(whole_in(1, 1 << 20));
  cmd->callback([a, &exit_code] { exit_code = run_guarded("prepare", [&] { run_prepare(*a); }); });
}

}  // namespace

void add_sparse_commands(CLI::App& app, int& exit_code) {
  add_profile_command(app, exit_code);
  add_train_predictor_command(app, exit_code);
  add_place_command(app, exit_code);
  add_prepare_command(app, exit_code);
}

}  // namespace hotcold::launcher
