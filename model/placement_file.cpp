#include "model/placement_file.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <stdexcept>

#include <fmt/format.h>

#include "model/gguf.hpp"
#include "model/gguf_writer.hpp"

namespace hotcold {

std::string placement_path(const std::string& model_path) { return model_path + ".generated.gpuidx"; }

placement_origin placement_origin_of(const std::string& model_path, uint64_t budget, uint64_t ctx) {
  placement_origin o;
  o.known = true;
  o.budget = budget, o.ctx = ctx;
  std::error_code ec;
  o.model_bytes = std::filesystem::file_size(model_path, ec);
  if (ec) throw std::runtime_error(fmt::format("{}: {}", model_path, ec.message()));
  const auto t = std::filesystem::last_write_time(model_path, ec);
  if (ec) throw std::runtime_error(fmt::format("{}: {}", model_path, ec.message()));
  o.model_mtime_ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
  return o;
}

void write_placement_file(const placement_data& p, const std::string& path, int64_t n_ff) {
  gguf::writer w(gguf::file_kind::powerinfer);
  w.set_u64("split.vram_capacity", p.vram_capacity);
  if (p.origin.known) {
    w.set_u64("hotcold.placement.budget", p.origin.budget);
    w.set_u64("hotcold.placement.ctx", p.origin.ctx);
    w.set_u64("hotcold.placement.model_bytes", p.origin.model_bytes);
    w.set_u64("hotcold.placement.model_mtime_ns", p.origin.model_mtime_ns);
    w.set_u64("hotcold.placement.kv_layer_bytes", p.origin.kv_layer_bytes);
  }
  std::vector<std::vector<int32_t>> masks;
  masks.reserve(p.hot.size());
  for (const auto& hot : p.hot) {
    std::vector<int32_t> mask(static_cast<size_t>(n_ff), 0);
    for (int32_t i : hot) mask[static_cast<size_t>(i)] = 1;
    masks.push_back(std::move(mask));
  }
  for (size_t l = 0; l < masks.size(); ++l) {
    int64_t ne_mask[] = {n_ff};
    w.add_tensor(fmt::format("blk.{}.gpu_idx", l), tensor_type::i32, ne_mask,
                 {reinterpret_cast<const uint8_t*>(masks[l].data()), masks[l].size() * 4});
    const auto& hot = p.hot[l];
    if (hot.empty()) continue;  // GGUF has no empty tensors; an absent bucket means no hot neuron
    int64_t ne_bucket[] = {static_cast<int64_t>(hot.size())};
    w.add_tensor(fmt::format("blk.{}.gpu_bucket", l), tensor_type::i32, ne_bucket,
                 {reinterpret_cast<const uint8_t*>(hot.data()), hot.size() * 4});
  }
  w.write(path);
}

placement_data read_placement_file(const std::string& path, int64_t n_layer, int64_t n_ff) {
  auto f = gguf::file::open(path);
  placement_data p;
  if (const auto* cap = f.find("split.vram_capacity")) p.vram_capacity = cap->as_u64();
  const auto* budget = f.find("hotcold.placement.budget");
  const auto* ctx = f.find("hotcold.placement.ctx");
  const auto* bytes = f.find("hotcold.placement.model_bytes");
  const auto* mtime = f.find("hotcold.placement.model_mtime_ns");
  const auto* kv = f.find("hotcold.placement.kv_layer_bytes");
  if (budget && ctx && bytes && mtime) p.origin = {true, budget->as_u64(), ctx->as_u64(), bytes->as_u64(), mtime->as_u64(), kv ? kv->as_u64() : 0};
  auto& hot = p.hot;
  hot.resize(static_cast<size_t>(n_layer));
  for (int64_t l = 0; l < n_layer; ++l) {
    const auto* mask = f.find_tensor(fmt::format("blk.{}.gpu_idx", l));
    if (!mask || mask->type != tensor_type::i32 || mask->n_elements != static_cast<uint64_t>(n_ff))
      throw std::runtime_error(fmt::format("{}: blk.{}.gpu_idx is missing or not I32[{}]", path, l, n_ff));
    const auto* m = reinterpret_cast<const int32_t*>(mask->data);
    for (int64_t i = 0; i < n_ff; ++i)
      if (m[i]) hot[static_cast<size_t>(l)].push_back(static_cast<int32_t>(i));
    const auto* bucket = f.find_tensor(fmt::format("blk.{}.gpu_bucket", l));
    size_t n_bucket = bucket ? static_cast<size_t>(bucket->n_elements) : 0;
    if (n_bucket != hot[static_cast<size_t>(l)].size() ||
        (bucket && !std::equal(hot[static_cast<size_t>(l)].begin(), hot[static_cast<size_t>(l)].end(), reinterpret_cast<const int32_t*>(bucket->data))))
      throw std::runtime_error(fmt::format("{}: blk.{}.gpu_bucket does not list the neurons gpu_idx marks", path, l));
  }
  return p;
}

}  // namespace hotcold
