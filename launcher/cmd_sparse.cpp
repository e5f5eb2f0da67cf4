// The offline sparse pipeline: profile, train-predictor, prepare (profile + train + sparse file).
#include <chrono>
#include <filesystem>

#include <fmt/format.h>

#include "launcher/cmd_sparse.hpp"
#include "launcher/commands.hpp"
#include "launcher/option_checks.hpp"
#include "launcher/progress.hpp"
#include "model/gguf.hpp"
#include "model/model.hpp"
#include "model/placement_file.hpp"
#include "loader/placement.hpp"
#include "tools/predictor_train.hpp"
#include "tools/sparsity.hpp"
#include "loader/profile.hpp"
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

tools::trained_predictors train_with_progress(const loader::profile_data& data, const tools::train_options& o) {
  progress_bar bar("train-predictor");
  auto p = tools::train_predictors(data, o, [&](int64_t d, int64_t t) { bar.update(d, t); });
  bar.finish();
  return p;
}

loader::profile_result profile_with_progress(const loader::profile_options& o) {
  progress_bar bar("profile");
  auto r = loader::run_profile(o, [&](int64_t d, int64_t t) { bar.update(d, t); });
  bar.finish();
  return r;
}

}  // namespace

void run_profile_command(const loader::profile_options& o) {
  auto r = profile_with_progress(o);
  for (size_t l = 0; l < r.active_fraction.size(); ++l) fmt::print("layer {:3}: active fraction {:.4f}\n", l, r.active_fraction[l]);
  fmt::print(stderr, "hotcold profile: {} tokens -> {}\n", r.tokens, o.out_dir);
}

void run_train_predictor(const train_args& a) {
  auto data = loader::read_profile(a.dir);
  auto p = train_with_progress(data, a.o);
  auto path = (fs::path(a.dir) / "predictors.gguf").string();
  tools::save_predictors(p, path);
  print_fits(p);
  fmt::print(stderr, "hotcold train-predictor: wrote {}\n", path);
}

void run_place(const place_args& a) {
  auto plan = loader::plan_from_profile(a.model, a.stats, a.budget, a.ctx, parse_cache_types(a.cache_type_k, a.cache_type_v));
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

namespace {

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

}  // namespace

void run_prepare(prepare_args a) {
  const auto t0 = std::chrono::steady_clock::now();
  tools::sparse_file_options so;
  if (a.powerinfer && a.down_layout == "blocks")
    throw std::invalid_argument("--down-layout blocks writes hotcold's GGUF (PowerInfer's files hold ffn_down_t rows): drop --powerinfer");
  if (a.sparsity > 0) calibrate_thresholds(a, so);
  loader::profile_options po;
  po.act_thresholds = so.act_thresholds;
  po.model_path = a.model;
  po.calibration_path = a.calib;
  po.tokens = a.tokens;
  po.threads = a.threads;
  po.out_dir = a.work.empty() ? a.out + ".work" : a.work;
  if (!a.reuse_profile || !fs::exists(fs::path(po.out_dir) / "profile.json")) profile_with_progress(po);
  auto data = loader::read_profile(po.out_dir);
  a.train.threads = a.threads;
  so.predictor_type = predictor_type_for(a.model, so);
  a.train.stored_as = so.predictor_type;
  auto p = train_with_progress(data, a.train);
  tools::save_predictors(p, (fs::path(po.out_dir) / "predictors.gguf").string());
  print_fits(p);
  if (a.powerinfer) so.kind = gguf::file_kind::powerinfer;  // one threshold: see write_sparse_model
  so.down_blocks = a.down_layout == "blocks";
  if (!a.powerinfer && !a.plain_layout) {
    // Neurons most often firing first, each one's rows side by side (docs/model-files.md, "Layout").
    so.order = tools::firing_order(data.firing_counts, data.n_layer, data.n_ff);
    so.bundle = !so.down_blocks;
  }
  tools::write_sparse_model(a.model, a.out, p.layers, so);
  if (a.budget > 0) {
    auto plan = loader::plan_from_profile(a.out, po.out_dir, a.budget, a.ctx, parse_cache_types(a.cache_type_k, a.cache_type_v));
    auto m = model::load(a.out, {true});
    loader::write_placement(plan, placement_path(a.out), m->hp().n_ff, a.out);
    fmt::print(stderr, "{}", plan.table());
    fmt::print(stderr, "hotcold prepare: {:.1f}% of firings on hot neurons within {} GiB -> {}\n", 100 * plan.hot_mass, a.budget, placement_path(a.out));
  }
  fmt::print(stderr, "hotcold prepare: wrote {} in {:.1f} s\n", a.out, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace hotcold::launcher
