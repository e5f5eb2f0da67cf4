#include "engine/embeddings.hpp"

#include <cmath>
#include <stdexcept>

namespace hotcold {

std::optional<pooling> pooling_from_name(std::string_view name) {
  if (name == "mean") return pooling::mean;
  if (name == "last") return pooling::last;
  if (name == "cls") return pooling::cls;
  return std::nullopt;
}

std::string_view pooling_name(pooling p) {
  switch (p) {
    case pooling::mean: return "mean";
    case pooling::last: return "last";
    case pooling::cls: return "cls";
  }
  return "mean";
}

pooling default_pooling(const model& m) {
  switch (m.hp().pooling_type) {
    case 2: return pooling::cls;
    case 3: return pooling::last;
    default: return pooling::mean;
  }
}

std::vector<float> pooled(std::span<const float> hidden, int64_t n, int64_t d, pooling p) {
  if (n <= 0 || static_cast<int64_t>(hidden.size()) != n * d) throw std::invalid_argument("pooled: hidden states of n x d values, n > 0");
  std::vector<double> sum(static_cast<size_t>(d), 0.0);
  const int64_t first = p == pooling::last ? n - 1 : 0, last = p == pooling::mean ? n : first + 1;
  for (int64_t t = first; t < last; ++t)
    for (int64_t k = 0; k < d; ++k) sum[static_cast<size_t>(k)] += hidden[static_cast<size_t>(t * d + k)];
  double norm = 0;
  for (double x : sum) norm += x * x;
  norm = std::sqrt(norm);  // (the mean's 1/n cancels in the normalization)
  std::vector<float> out(static_cast<size_t>(d));
  for (int64_t k = 0; k < d; ++k) out[static_cast<size_t>(k)] = norm > 0 ? static_cast<float>(sum[static_cast<size_t>(k)] / norm) : 0.0f;
  return out;
}

embedder::embedder(std::shared_ptr<const model> m, int64_t n_ctx, int n_threads, pooling p)
    : ctx_(m, n_ctx, n_threads), n_embd_(m->hp().n_embd), p_(p) {
  ctx_.set_mode(ffn_mode::dense);  // every neuron: the model as its file means it
}

std::vector<float> embedder::embed(std::span<const token_id> tokens) {
  std::lock_guard lock(mu_);
  const auto hidden = ctx_.hidden_states(tokens);
  return pooled(hidden, static_cast<int64_t>(tokens.size()), n_embd_, p_);
}

}  // namespace hotcold
