#include "tools/sparsity.hpp"

#include <algorithm>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "engine/forward.hpp"
#include "loader/profile.hpp"

namespace hotcold::tools {

sparsity_result calibrate_act_thresholds(const sparsity_options& o, const std::function<void(int64_t, int64_t)>& progress) {
  if (!(o.target > 0 && o.target < 1)) throw std::invalid_argument(fmt::format("--sparsity {} must be between 0 and 1", o.target));
  if (o.tokens < 1) throw std::invalid_argument("--tokens must be at least 1");
  auto m = model::load(o.model_path);
  const hparams& hp = m->hp();
  if (hp.act != activation::silu && hp.act != activation::gelu)
    throw std::invalid_argument(fmt::format("{}: --sparsity thresholds SiLU or GELU activations; this file's is {} (ReLU-family files are sparse already)",
                                            o.model_path, activation_name(hp.act)));
  if (!hp.act_threshold.empty()) throw std::invalid_argument(fmt::format("{}: the file is thresholded already ({})", o.model_path, activation_thresholds_key));
  // Each layer keeps at most 2^20 of its n_ff x tokens values: every k-th (neuron, token) pair, k odd
  // apart from n_ff's factors of two so that the kept neurons rotate from token to token.
  const int64_t total = hp.n_ff * o.tokens, cap = int64_t{1} << 20;
  int64_t every = std::max<int64_t>(1, (total + cap - 1) / cap);
  if (every > 1 && every % 2 == 0) ++every;
  std::vector<std::vector<float>> values(static_cast<size_t>(hp.n_layer));
  for (auto& v : values) v.reserve(static_cast<size_t>(std::min(total, cap) + hp.n_ff));
  int64_t token = 0;
  const int threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  loader::calibration_tokens feed(*m, o.calibration_path, o.chunk);
  inference_context ctx(m, feed.chunk(), threads);
  // Every neuron's margin is |act| - t with t = 0 here: |act| itself.
  ctx.set_observer([&](std::string_view name, int64_t layer, std::span<const float> x) {
    if (name != observed::ffn_margin) return;
    auto& v = values[static_cast<size_t>(layer)];
    const int64_t base = token * hp.n_ff;
    for (int64_t i = (every - base % every) % every; i < static_cast<int64_t>(x.size()); i += every) v.push_back(x[static_cast<size_t>(i)]);
  });
  std::span<const float> logits;
  for (; token < o.tokens; ++token) {
    logits = ctx.forward(feed.at(token, logits), token % feed.chunk());
    if (progress && (token % 16 == 15 || token + 1 == o.tokens)) progress(token + 1, o.tokens);
  }
  sparsity_result r;
  r.tokens = o.tokens;
  for (auto& v : values) {
    if (v.empty()) throw std::logic_error("calibration saw no activations");
    auto k = static_cast<size_t>(o.target * static_cast<double>(v.size()));
    k = std::min(k, v.size() - 1);
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
    const float t = v[k];
    r.thresholds.push_back(t);
    r.skipped.push_back(static_cast<double>(std::count_if(v.begin(), v.end(), [t](float a) { return a < t; })) / static_cast<double>(v.size()));
  }
  return r;
}

}  // namespace hotcold::tools
