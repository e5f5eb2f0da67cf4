#include "tools/predictor_train.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "kernels/cpu/dot.hpp"
#include "kernels/cpu/fp16.hpp"
#include "model/arch.hpp"
#include "model/gguf.hpp"
#include "model/gguf_writer.hpp"
#include "engine/forward.hpp"
#include "engine/sparse_ffn.hpp"
#include "model/tensor_convert.hpp"
#include "engine/thread_pool.hpp"
#include "tools/sparse_file.hpp"

namespace hotcold::tools {
namespace {

struct samples {
  int64_t n = 0, d = 0, n_ff = 0;
  std::vector<float> x;        // n x d
  std::vector<uint8_t> mask;   // n x ceil(n_ff/8)
  std::vector<float> margin;   // n x n_ff: positive exactly when the neuron fires
  size_t mask_bytes() const { return static_cast<size_t>((n_ff + 7) / 8); }
  bool fired(int64_t s, int64_t i) const { return (mask[static_cast<size_t>(s) * mask_bytes() + static_cast<size_t>(i / 8)] >> (i % 8)) & 1; }
};

samples read_samples(const loader::profile_data& p, int64_t layer) {
  samples s;
  s.n = p.tokens, s.d = p.n_embd, s.n_ff = p.n_ff;
  s.x.resize(static_cast<size_t>(s.n * s.d));
  s.mask.resize(static_cast<size_t>(s.n) * s.mask_bytes());
  s.margin.resize(static_cast<size_t>(s.n * s.n_ff));
  std::vector<uint16_t> half(static_cast<size_t>(s.n_ff));
  std::ifstream in(p.samples_path(layer), std::ios::binary);
  for (int64_t i = 0; i < s.n; ++i) {
    in.read(reinterpret_cast<char*>(s.x.data() + i * s.d), static_cast<std::streamsize>(s.d * 4));
    in.read(reinterpret_cast<char*>(s.mask.data() + static_cast<size_t>(i) * s.mask_bytes()), static_cast<std::streamsize>(s.mask_bytes()));
    in.read(reinterpret_cast<char*>(half.data()), static_cast<std::streamsize>(half.size() * 2));
    kernels::fp16_to_fp32_row(half.data(), s.margin.data() + i * s.n_ff, half.size());
  }
  if (!in) throw std::runtime_error(fmt::format("{}: short read", p.samples_path(layer)));
  return s;
}

// Rounds x through Q8_0, as the forward pass does to the input of Q8_0 / Q4_0 rows.
void round_q8_0(float* x, int64_t n) {
  std::vector<kernels::block_q8_0> q(static_cast<size_t>(n / kernels::qk8_0));
  kernels::quantize_row_q8_0(x, q.data(), n);
  kernels::dequantize_row_q8_0(q.data(), x, n);
}

struct mlp {
  int64_t d, r, n_ff;
  std::vector<float> w1;  // r x d
  std::vector<float> w2;  // n_ff x r
  bool quantized_inputs1 = false, quantized_inputs2 = false;  // stored as Q8_0/Q4_0: inputs rounded to Q8_0
  void forward(const float* x, float* h, float* z) const {
    std::vector<float> xr;
    if (quantized_inputs1) {
      xr.assign(x, x + d);
      round_q8_0(xr.data(), d);
      x = xr.data();
    }
    for (int64_t k = 0; k < r; ++k) h[k] = std::max(0.0f, kernels::dot_f32(w1.data() + k * d, x, d));
    if (quantized_inputs2) round_q8_0(h, r);
    for (int64_t i = 0; i < n_ff; ++i) z[i] = kernels::dot_f32(w2.data() + i * r, h, r);
  }
};

// The predictor as the sparse file will hold it: weights round-tripped through the storage type.
mlp as_stored(const mlp& net, tensor_type type) {
  mlp q = net;
  auto round_trip = [](std::vector<float>& w, int64_t row, tensor_type t) {
    t = predictor_storage_type(t, row);
    if (t == tensor_type::f32) return false;
    auto bytes = convert_rows(w, row, t);
    tensor_view v;
    v.type = t;
    v.ne0 = row;
    v.ne1 = static_cast<int64_t>(w.size()) / row;
    v.row_bytes = bytes.size() / static_cast<size_t>(v.ne1);
    v.data = bytes.data();
    for (int64_t r = 0; r < v.ne1; ++r) dequantize_row(v, r, w.data() + r * row);
    return t == tensor_type::q8_0 || t == tensor_type::q4_0;
  };
  q.quantized_inputs1 = round_trip(q.w1, net.d, type);
  q.quantized_inputs2 = round_trip(q.w2, net.r, type);
  return q;
}

struct adam {
  std::vector<float> m, v;
  int64_t t = 0;
  explicit adam(size_t n) : m(n, 0.0f), v(n, 0.0f) {}
  void step(std::vector<float>& w, const std::vector<float>& g, float lr, float scale) {
    ++t;
    const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
    const float c1 = 1.0f - std::pow(b1, static_cast<float>(t)), c2 = 1.0f - std::pow(b2, static_cast<float>(t));
    for (size_t i = 0; i < w.size(); ++i) {
      float gi = g[i] * scale;
      m[i] = b1 * m[i] + (1 - b1) * gi;
      v[i] = b2 * v[i] + (1 - b2) * gi * gi;
      w[i] -= lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + eps);
    }
  }
};

// A linear start for the MLP: the top k = r/2 principal directions P of the inputs (randomized
// subspace iteration) and a ridge regression A, on the projections, of each neuron's firing margin
// divided by its RMS (the margin says how far from firing a neuron was, which a 0/1 label does not:
// a rarely firing neuron still gives a useful target in every sample) — or of its pre-activation, for a
// thresholded model, whose rule the score then estimates directly. With fc1 = [P; -P] and
// fc2 = [A, -A], relu(z) - relu(-z) = z makes the score exactly A . (P x).
void linear_start(mlp& net, const samples& s, const std::vector<int64_t>& train, std::mt19937_64& rng) {
  const int64_t d = s.d, k = net.r / 2, n = static_cast<int64_t>(train.size());
  std::normal_distribution<float> unit(0.0f, 1.0f);
  std::vector<double> q(static_cast<size_t>(k * d));  // k rows of d
  for (auto& v : q) v = unit(rng);
  auto orthonormalize = [&] {
    for (int64_t a = 0; a < k; ++a) {
      double* qa = q.data() + a * d;
      for (int64_t b = 0; b < a; ++b) {
        const double* qb = q.data() + b * d;
        double dot = 0;
        for (int64_t i = 0; i < d; ++i) dot += qa[i] * qb[i];
        for (int64_t i = 0; i < d; ++i) qa[i] -= dot * qb[i];
      }
      double norm = 0;
      for (int64_t i = 0; i < d; ++i) norm += qa[i] * qa[i];
      norm = std::sqrt(std::max(norm, 1e-300));
      for (int64_t i = 0; i < d; ++i) qa[i] /= norm;
    }
  };
  std::vector<double> z(static_cast<size_t>(n * k));
  auto project = [&] {  // z = X q^T
    for (int64_t t = 0; t < n; ++t) {
      const float* x = s.x.data() + train[static_cast<size_t>(t)] * d;
      for (int64_t a = 0; a < k; ++a) {
        const double* qa = q.data() + a * d;
        double dot = 0;
        for (int64_t i = 0; i < d; ++i) dot += qa[i] * x[i];
        z[static_cast<size_t>(t * k + a)] = dot;
      }
    }
  };
  orthonormalize();
  for (int iter = 0; iter < 3; ++iter) {  // q <- orth(X^T X q)
    project();
    std::fill(q.begin(), q.end(), 0.0);
    for (int64_t t = 0; t < n; ++t) {
      const float* x = s.x.data() + train[static_cast<size_t>(t)] * d;
      for (int64_t a = 0; a < k; ++a) {
        double za = z[static_cast<size_t>(t * k + a)];
        double* qa = q.data() + a * d;
        for (int64_t i = 0; i < d; ++i) qa[i] += za * x[i];
      }
    }
    orthonormalize();
  }
  project();
  // Ridge: (Z^T Z + lambda I) A = Z^T Y, Y = +-1, solved by Cholesky.
  std::vector<double> g(static_cast<size_t>(k * k), 0.0);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t a = 0; a < k; ++a)
      for (int64_t b = 0; b <= a; ++b) g[static_cast<size_t>(a * k + b)] += z[static_cast<size_t>(t * k + a)] * z[static_cast<size_t>(t * k + b)];
  double trace = 0;
  for (int64_t a = 0; a < k; ++a) trace += g[static_cast<size_t>(a * k + a)];
  for (int64_t a = 0; a < k; ++a) g[static_cast<size_t>(a * k + a)] += 1e-3 * trace / static_cast<double>(k) + 1e-12;
  for (int64_t a = 0; a < k; ++a) {  // in-place Cholesky (lower)
    for (int64_t b = 0; b <= a; ++b) {
      double sum = g[static_cast<size_t>(a * k + b)];
      for (int64_t c = 0; c < b; ++c) sum -= g[static_cast<size_t>(a * k + c)] * g[static_cast<size_t>(b * k + c)];
      g[static_cast<size_t>(a * k + b)] = a == b ? std::sqrt(std::max(sum, 1e-300)) : sum / g[static_cast<size_t>(b * k + b)];
    }
  }
  std::vector<double> rhs(static_cast<size_t>(k));
  for (int64_t i = 0; i < s.n_ff; ++i) {
    std::fill(rhs.begin(), rhs.end(), 0.0);
    for (int64_t t = 0; t < n; ++t) {
      double y = s.margin[static_cast<size_t>(train[static_cast<size_t>(t)] * s.n_ff + i)];
      for (int64_t a = 0; a < k; ++a) rhs[static_cast<size_t>(a)] += z[static_cast<size_t>(t * k + a)] * y;
    }
    for (int64_t a = 0; a < k; ++a) {  // forward substitution
      double v = rhs[static_cast<size_t>(a)];
      for (int64_t c = 0; c < a; ++c) v -= g[static_cast<size_t>(a * k + c)] * rhs[static_cast<size_t>(c)];
      rhs[static_cast<size_t>(a)] = v / g[static_cast<size_t>(a * k + a)];
    }
    for (int64_t a = k - 1; a >= 0; --a) {  // back substitution
      double v = rhs[static_cast<size_t>(a)];
      for (int64_t c = a + 1; c < k; ++c) v -= g[static_cast<size_t>(c * k + a)] * rhs[static_cast<size_t>(c)];
      rhs[static_cast<size_t>(a)] = v / g[static_cast<size_t>(a * k + a)];
    }
    for (int64_t a = 0; a < k; ++a) {
      net.w2[static_cast<size_t>(i * net.r + a)] = static_cast<float>(rhs[static_cast<size_t>(a)]);
      net.w2[static_cast<size_t>(i * net.r + k + a)] = static_cast<float>(-rhs[static_cast<size_t>(a)]);
    }
  }
  for (int64_t a = 0; a < k; ++a)
    for (int64_t i = 0; i < d; ++i) {
      net.w1[static_cast<size_t>(a * d + i)] = static_cast<float>(q[static_cast<size_t>(a * d + i)]);
      net.w1[static_cast<size_t>((k + a) * d + i)] = static_cast<float>(-q[static_cast<size_t>(a * d + i)]);
    }
}

// Trains one layer's predictor of rank r (inputs at unit RMS, margins divided by each neuron's RMS):
// the linear start, then `epochs` of Adam on a squared error that costs positive_weight times more
// where a firing neuron's score falls short of its margin (missing a neuron costs more than
// computing one too many).
mlp train_layer(const samples& s, const std::vector<int64_t>& train, int64_t r, int epochs, const train_options& o, thread_pool& pool, uint64_t seed) {
  mlp net{s.d, r, s.n_ff, std::vector<float>(static_cast<size_t>(r * s.d)), std::vector<float>(static_cast<size_t>(s.n_ff * r))};
  std::mt19937_64 rng(seed);
  linear_start(net, s, train, rng);
  adam a1(net.w1.size()), a2(net.w2.size());
  const int threads = pool.size();
  // Each thread owns its gradient buffers; they are summed after the batch.
  std::vector<std::vector<float>> g1(static_cast<size_t>(threads), std::vector<float>(net.w1.size())),
      g2(static_cast<size_t>(threads), std::vector<float>(net.w2.size()));
  std::vector<int64_t> order = train;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t b0 = 0; b0 < order.size(); b0 += static_cast<size_t>(o.batch)) {
      size_t b1 = std::min(order.size(), b0 + static_cast<size_t>(o.batch));
      pool.parallel_for(threads, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
          auto& G1 = g1[static_cast<size_t>(t)];
          auto& G2 = g2[static_cast<size_t>(t)];
          std::fill(G1.begin(), G1.end(), 0.0f);
          std::fill(G2.begin(), G2.end(), 0.0f);
          std::vector<float> h(static_cast<size_t>(r)), z(static_cast<size_t>(s.n_ff)), dh(static_cast<size_t>(r));
          size_t count = b1 - b0;
          for (size_t k = b0 + count * static_cast<size_t>(t) / threads; k < b0 + count * static_cast<size_t>(t + 1) / threads; ++k) {
            int64_t si = order[k];
            const float* x = s.x.data() + si * s.d;
            net.forward(x, h.data(), z.data());
            std::fill(dh.begin(), dh.end(), 0.0f);
            for (int64_t i = 0; i < s.n_ff; ++i) {
              float y = s.margin[static_cast<size_t>(si * s.n_ff + i)];
              float e = z[i] - y;
              float dz = 2.0f * e * (y > 0.0f && e < 0.0f ? o.positive_weight : 1.0f);
              if (dz == 0.0f) continue;
              kernels::axpy_f32(dz, h.data(), G2.data() + i * r, r);
              kernels::axpy_f32(dz, net.w2.data() + i * r, dh.data(), r);
            }
            for (int64_t k2 = 0; k2 < r; ++k2)
              if (h[k2] > 0.0f) kernels::axpy_f32(dh[k2], x, G1.data() + k2 * s.d, s.d);
          }
        }
      });
      for (int t = 1; t < threads; ++t) {
        for (size_t i = 0; i < g1[0].size(); ++i) g1[0][i] += g1[t][i];
        for (size_t i = 0; i < g2[0].size(); ++i) g2[0][i] += g2[t][i];
      }
      float scale = 1.0f / static_cast<float>((b1 - b0) * static_cast<size_t>(s.n_ff));
      a1.step(net.w1, g1[0], o.learning_rate, scale * static_cast<float>(s.n_ff));
      a2.step(net.w2, g2[0], o.learning_rate, scale * static_cast<float>(s.n_ff));
    }
  }
  return net;
}

struct evaluation {
  float threshold;
  layer_fit fit;
};

// The threshold keeping `target_recall` of held-out firings, and what it gives. on_act: the scores
// are estimated pre-activations, compared as |act(score)| (a thresholded model's rule).
evaluation evaluate(const mlp& net, const samples& s, const std::vector<int64_t>& held, double target_recall, std::optional<activation> on_act) {
  std::vector<float> h(static_cast<size_t>(net.r)), z(static_cast<size_t>(s.n_ff));
  std::vector<float> positive, all;
  all.reserve(held.size() * static_cast<size_t>(s.n_ff));
  for (int64_t si : held) {
    net.forward(s.x.data() + si * s.d, h.data(), z.data());
    if (on_act) act_magnitudes(*on_act, z.data(), s.n_ff);
    for (int64_t i = 0; i < s.n_ff; ++i) {
      if (s.fired(si, i)) positive.push_back(z[i]);
      all.push_back(z[i]);
    }
  }
  evaluation e{};
  if (positive.empty()) {
    e.threshold = std::numeric_limits<float>::max();
    e.fit.recall = 1.0;
    return e;
  }
  std::sort(positive.begin(), positive.end());
  size_t allowed_misses = static_cast<size_t>(std::floor((1.0 - target_recall) * static_cast<double>(positive.size())));
  e.threshold = positive[allowed_misses];
  int64_t predicted = 0, hit = 0;
  for (float v : all) predicted += v >= e.threshold;
  for (float v : positive) hit += v >= e.threshold;
  e.fit.recall = static_cast<double>(hit) / static_cast<double>(positive.size());
  e.fit.precision = predicted ? static_cast<double>(hit) / static_cast<double>(predicted) : 1.0;
  e.fit.active_fraction = static_cast<double>(predicted) / static_cast<double>(all.size());
  e.fit.true_active_fraction = static_cast<double>(positive.size()) / static_cast<double>(all.size());
  return e;
}

}  // namespace

trained_predictors train_predictors(const loader::profile_data& data, const train_options& o,
                                    const std::function<void(int64_t, int64_t)>& progress) {
  if (data.tokens < 10) throw std::invalid_argument("the profile has fewer than 10 samples; profile more --tokens");
  if (!(o.target_recall > 0 && o.target_recall <= 1)) throw std::invalid_argument(fmt::format("--recall {} must be in (0, 1]", o.target_recall));
  int threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  thread_pool pool(threads);
  trained_predictors out;
  for (int64_t l = 0; l < data.n_layer; ++l) {
    samples s = read_samples(data, l);
    // Inputs are trained at unit RMS; the scale is folded into fc1 afterwards (score(x) is then
    // computed on raw inputs, which is what the files hold).
    double ss = 0;
    for (float v : s.x) ss += double(v) * v;
    float scale = static_cast<float>(std::sqrt(ss / std::max<size_t>(1, s.x.size())));
    if (scale <= 0) scale = 1;
    for (auto& v : s.x) v /= scale;
    // Pre-activation samples (a thresholded model) are estimated as they are: |act(g)| >= t_l compares
    // them with one threshold in their own units.
    std::optional<activation> on_act;
    if (data.preactivations) on_act = data.act;
    // Each neuron's margins at unit RMS, so that one threshold suits every neuron of the layer.
    std::vector<double> ms(static_cast<size_t>(s.n_ff), 0.0);
    if (!on_act) {
      for (int64_t t = 0; t < s.n; ++t)
        for (int64_t i = 0; i < s.n_ff; ++i) ms[static_cast<size_t>(i)] += double(s.margin[static_cast<size_t>(t * s.n_ff + i)]) * s.margin[static_cast<size_t>(t * s.n_ff + i)];
      for (int64_t i = 0; i < s.n_ff; ++i) ms[static_cast<size_t>(i)] = ms[static_cast<size_t>(i)] > 0 ? 1.0 / std::sqrt(ms[static_cast<size_t>(i)] / static_cast<double>(s.n)) : 0.0;
      for (int64_t t = 0; t < s.n; ++t)
        for (int64_t i = 0; i < s.n_ff; ++i) s.margin[static_cast<size_t>(t * s.n_ff + i)] *= static_cast<float>(ms[static_cast<size_t>(i)]);
    }
    std::vector<int64_t> idx(static_cast<size_t>(s.n));
    std::iota(idx.begin(), idx.end(), 0);
    std::mt19937_64 rng(o.seed + static_cast<uint64_t>(l));
    std::shuffle(idx.begin(), idx.end(), rng);
    size_t n_held = std::max<size_t>(1, static_cast<size_t>(o.holdout * static_cast<double>(s.n)));
    std::vector<int64_t> held(idx.begin(), idx.begin() + static_cast<ptrdiff_t>(n_held)), train(idx.begin() + static_cast<ptrdiff_t>(n_held), idx.end());

    auto round32 = [](int64_t v) { return std::max<int64_t>(32, (v + 31) / 32 * 32); };
    int64_t rank = o.rank > 0 ? o.rank : round32(s.d / (on_act ? 16 : 8));
    const int64_t max_rank = o.rank > 0 ? o.rank : round32(s.d / 2);
    // The linear start alone, or refined by Adam: whichever keeps fewer neurons at the recall. (A
    // pre-activation estimate is the linear start itself: least squares is what it should minimize.)
    auto fit = [&](int64_t r, evaluation& best) {
      uint64_t seed = o.seed * 7919 + static_cast<uint64_t>(l);
      mlp net = train_layer(s, train, r, 0, o, pool, seed);
      best = evaluate(net, s, held, o.target_recall, on_act);
      if (o.epochs > 0 && !on_act) {
        mlp refined = train_layer(s, train, r, o.epochs, o, pool, seed);
        evaluation er = evaluate(refined, s, held, o.target_recall, on_act);
        if (er.fit.active_fraction < best.fit.active_fraction) {
          best = er;
          return refined;
        }
      }
      return net;
    };
    evaluation e;
    mlp net = fit(rank, e);
    if (on_act && o.rank == 0) {
      // A thresholded layer reads the gate rows of the chosen neurons (then up and down of those that
      // pass): of the rows' values, rank x (n_embd + n_ff) for the predictor plus active x n_ff x n_embd.
      // The rank reading the fewest, from n_embd / 16 up.
      auto cost = [&](const evaluation& ev, int64_t r) { return static_cast<double>(r * (s.d + s.n_ff)) + ev.fit.active_fraction * static_cast<double>(s.n_ff * s.d); };
      while (rank * 2 <= max_rank) {
        evaluation ew;
        mlp wider = fit(rank * 2, ew);
        if (cost(ew, rank * 2) >= cost(e, rank)) break;
        rank *= 2;
        net = std::move(wider);
        e = ew;
      }
    }
    // A predictor that must predict far more neurons than fire to keep the recall gets more rank.
    while (!on_act && o.rank == 0 && rank * 2 <= max_rank &&
           e.fit.active_fraction > 1.5 * e.fit.true_active_fraction + 0.01) {
      rank *= 2;
      evaluation ew;
      mlp wider = fit(rank, ew);
      if (ew.fit.active_fraction >= e.fit.active_fraction) break;
      net = std::move(wider);
      e = ew;
    }
    // The threshold (and the reported fit) for the predictor as the file will hold it.
    if (o.stored_as != tensor_type::f32) e = evaluate(as_stored(net, o.stored_as), s, held, o.target_recall, on_act);
    layer_predictor p;
    p.rank = net.r;
    p.fc1 = net.w1;
    for (auto& w : p.fc1) w /= scale;
    p.fc2 = net.w2;
    p.threshold = e.threshold;
    e.fit.rank = net.r;
    out.layers.push_back(std::move(p));
    out.fits.push_back(e.fit);
    if (progress) progress(l + 1, data.n_layer);
  }
  return out;
}

void save_predictors(const trained_predictors& p, const std::string& path) {
  gguf::writer w;
  std::vector<float> thresholds;
  for (const auto& l : p.layers) thresholds.push_back(l.threshold);
  w.set_string("general.architecture", "hotcold-predictors");
  w.set_array(sparse_thresholds_key, std::span<const float>(thresholds));
  for (size_t l = 0; l < p.layers.size(); ++l) {
    const auto& L = p.layers[l];
    int64_t n_embd = static_cast<int64_t>(L.fc1.size()) / L.rank, n_ff = static_cast<int64_t>(L.fc2.size()) / L.rank;
    int64_t ne1[] = {n_embd, L.rank}, ne2[] = {L.rank, n_ff};
    w.add_tensor(fmt::format("blk.{}.fc1.weight", l), tensor_type::f32, ne1,
                 {reinterpret_cast<const uint8_t*>(L.fc1.data()), L.fc1.size() * 4});
    w.add_tensor(fmt::format("blk.{}.fc2.weight", l), tensor_type::f32, ne2,
                 {reinterpret_cast<const uint8_t*>(L.fc2.data()), L.fc2.size() * 4});
  }
  w.write(path);
}

trained_predictors load_predictors(const std::string& path) {
  auto f = gguf::file::open(path);
  const gguf::value* t = f.get_array(sparse_thresholds_key);
  if (!t) throw std::runtime_error(fmt::format("{}: no {}", path, sparse_thresholds_key));
  trained_predictors p;
  for (size_t l = 0; l < t->size(); ++l) {
    const auto* fc1 = f.find_tensor(fmt::format("blk.{}.fc1.weight", l));
    const auto* fc2 = f.find_tensor(fmt::format("blk.{}.fc2.weight", l));
    if (!fc1 || !fc2 || fc1->type != tensor_type::f32 || fc2->type != tensor_type::f32)
      throw std::runtime_error(fmt::format("{}: layer {} has no F32 fc1/fc2", path, l));
    layer_predictor L;
    L.rank = fc1->ne[1];
    L.threshold = static_cast<float>(t->number_at(l));
    L.fc1.assign(reinterpret_cast<const float*>(fc1->data), reinterpret_cast<const float*>(fc1->data) + fc1->n_elements);
    L.fc2.assign(reinterpret_cast<const float*>(fc2->data), reinterpret_cast<const float*>(fc2->data) + fc2->n_elements);
    p.layers.push_back(std::move(L));
  }
  return p;
}

}  // namespace hotcold::tools
