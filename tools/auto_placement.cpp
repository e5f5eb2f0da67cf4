#include "tools/auto_placement.hpp"

#include <filesystem>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "model/model.hpp"
#include "tools/profile.hpp"

namespace fs = std::filesystem;

namespace hotcold::tools {

namespace {

std::string cached_path(const std::string& model_path, const std::string& cache_dir) {
  return (fs::path(cache_dir) / "placements" / fs::path(placement_path(model_path)).filename()).string();
}

// Firing counts: a profile beside the model (prepare's work folder) of this model's shape, else a
// short one now, in the cache folder.
std::vector<uint64_t> firing_counts(const std::string& model_path, const model& m, const auto_placement_options& o) {
  const auto& hp = m.hp();
  const std::string beside = model_path + ".work";
  if (fs::exists(fs::path(beside) / "firing_counts.u64")) {
    try {
      auto d = read_profile(beside);
      if (d.n_layer == hp.n_layer && d.n_ff == hp.n_ff) return d.firing_counts;
    } catch (const std::exception&) {
      // unreadable: profile afresh
    }
  }
  profile_options po;
  po.model_path = model_path;
  po.tokens = o.profile_tokens;
  po.chunk = std::min<int64_t>(256, hp.n_ctx_train);
  po.threads = o.threads;
  po.out_dir = (fs::path(o.cache_dir) / "profiles" / fs::path(model_path).filename()).string();
  fs::create_directories(po.out_dir);
  run_profile(po, o.progress);
  return read_profile(po.out_dir).firing_counts;
}

}  // namespace

auto_placement ensure_placement(const std::string& model_path, const model& m, uint64_t budget, const plan_options& p, const auto_placement_options& o) {
  const auto& hp = m.hp();
  const int64_t ctx = p.ctx > 0 ? p.ctx : std::min<int64_t>(hp.n_ctx_train, 4096);
  placement_origin wanted = placement_origin_of(model_path, budget, static_cast<uint64_t>(ctx));
  const placement_plan fixed = plan_device(m, budget, p);
  wanted.kv_layer_bytes = fixed.kv_layer_bytes;
  auto_placement r;
  r.reason = "there is no placement beside it";
  bool stale = false;
  for (const std::string& path : {placement_path(model_path), cached_path(model_path, o.cache_dir)}) {
    // The one beside the model was read when the model loaded.
    std::optional<placement_data> data;
    if (path == placement_path(model_path)) {
      if (m.placement()) data = *m.placement();
    } else if (fs::exists(path)) {
      data = read_placement_file(path, hp.n_layer, hp.n_ff);
    }
    if (!data) continue;
    // Hot rows that do not fit in what this device's plan leaves (one made for a device that holds
    // less besides them: no attention kernels, no step buffers) are planned again.
    const bool fits = data->vram_capacity <= fixed.left;
    if (fits && (!data->origin.known || data->origin == wanted)) {
      r.data = std::move(*data);
      r.path = path;
      return r;
    }
    if (stale) continue;  // the first stale one says why
    stale = true;
    const auto& had = data->origin;
    r.reason = !fits ? fmt::format("{} holds {:.1f} MiB of hot rows, more than the {:.1f} MiB this device's plan leaves them", path,
                                   data->vram_capacity / double(1 << 20), fixed.left / double(1 << 20))
               : had.model_bytes != wanted.model_bytes || had.model_mtime_ns != wanted.model_mtime_ns ? fmt::format("{} was made for another version of the file", path)
               : had.budget != wanted.budget ? fmt::format("{} was made for a budget of {:.3f} GiB", path, had.budget / double(1ull << 30))
               : had.ctx != wanted.ctx       ? fmt::format("{} was made for a context of {}", path, had.ctx)
                                             : fmt::format("{} was made for another KV cache ({:.1f} MiB a layer, not {:.1f})", path,
                                                           had.kv_layer_bytes / double(1 << 20), wanted.kv_layer_bytes / double(1 << 20));
  }
  if (!m.has_predictors()) throw std::invalid_argument(fmt::format("{}: a placement needs a sparse file (predictors in every layer); make one with `hotcold prepare`", model_path));
  const auto counts = firing_counts(model_path, m, o);
  r.plan = plan_placement(m, counts, budget, p);
  r.made = true;
  r.path = placement_path(model_path);
  try {
    r.data = write_placement(r.plan, r.path, hp.n_ff, model_path);
  } catch (const std::exception&) {  // the model's folder is read-only: the cache folder
    r.path = cached_path(model_path, o.cache_dir);
    fs::create_directories(fs::path(r.path).parent_path());
    r.data = write_placement(r.plan, r.path, hp.n_ff, model_path);
  }
  return r;
}

}  // namespace hotcold::tools
