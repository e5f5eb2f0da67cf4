#include "loader/auto_placement.hpp"

#include <filesystem>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "model/model.hpp"

namespace fs = std::filesystem;

namespace hotcold::loader {

namespace {

std::string cached_path(const std::string& model_path, const std::string& cache_dir) {
  return (fs::path(cache_dir) / "placements" / fs::path(placement_path(model_path)).filename()).string();
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
  if (!o.firing_counts)
    throw std::invalid_argument(fmt::format("{}: {}, and no profile to plan one from here; make one with `hotcold place` (or `hotcold prepare --vram-budget`)",
                                            model_path, r.reason));
  const auto counts = o.firing_counts(model_path, m);
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

}  // namespace hotcold::loader
