#include "tools/gen_model.hpp"
#include "tools/gen_model_presets.hpp"

#include "model/chat_template.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

#include "kernels/cpu/dot.hpp"
#include "model/chat_template.hpp"
#include "model/gguf.hpp"
#include "model/gguf_writer.hpp"
#include "model/tensor_convert.hpp"
#include "model/vocab.hpp"

namespace hotcold::tools {
namespace {

using detail::check_options;
using detail::file_type_of;
using detail::preset_types;

constexpr double firing_cap = 0.97;   // the hottest neurons fire for at most this share of tokens
constexpr float bias_level = 4.0f;    // the residual stream's constant channels hold +A and -A
constexpr float context_weight = 0.2f;  // share of a gate row reading the context subspace
constexpr float token_noise = 0.3f;     // isotropic part of a token vector, next to its low-rank part

// xoshiro256** seeded through splitmix64: fast, and the same stream on every platform.
class rng {
 public:
  explicit rng(uint64_t seed) {
    for (auto& s : s_) {
      seed += 0x9E3779B97F4A7C15ull;
      uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      s = z ^ (z >> 31);
    }
  }
  uint64_t next() {
    uint64_t r = rotl(s_[1] * 5, 7) * 9, t = s_[1] << 17;
    s_[2] ^= s_[0], s_[3] ^= s_[1], s_[1] ^= s_[2], s_[0] ^= s_[3], s_[2] ^= t, s_[3] = rotl(s_[3], 45);
    return r;
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  float normal() {
    if (have_spare_) {
      have_spare_ = false;
      return spare_;
    }
    double u1 = std::max(uniform(), 1e-300), u2 = uniform();
    double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = static_cast<float>(r * std::sin(2 * M_PI * u2));
    have_spare_ = true;
    return static_cast<float>(r * std::cos(2 * M_PI * u2));
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
  float spare_ = 0;
  bool have_spare_ = false;
};

double top20(const std::vector<double>& p) {
  size_t k = std::max<size_t>(1, p.size() / 5);
  double all = std::accumulate(p.begin(), p.end(), 0.0);
  return std::accumulate(p.begin(), p.begin() + static_cast<ptrdiff_t>(k), 0.0) / all;
}

std::vector<double> with_alpha(int64_t n, double mean, double alpha) {
  // Find c so that mean(min(cap, c (r+1)^-alpha)) == mean.
  auto probs = [&](double c) {
    std::vector<double> p(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r) p[r] = std::min(firing_cap, c * std::pow(static_cast<double>(r + 1), -alpha));
    return p;
  };
  auto mean_of = [&](double c) {
    auto p = probs(c);
    return std::accumulate(p.begin(), p.end(), 0.0) / static_cast<double>(n);
  };
  double lo = 0, hi = 1;
  while (mean_of(hi) < mean && hi < 1e300) hi *= 2;
  for (int i = 0; i < 200; ++i) {
    double mid = 0.5 * (lo + hi);
    (mean_of(mid) < mean ? lo : hi) = mid;
  }
  return probs(hi);
}

// Rows of a matrix as floats: rows x cols, row-major.
struct matrix {
  int64_t rows, cols;
  std::vector<float> v;
  matrix(int64_t r, int64_t c) : rows(r), cols(c), v(static_cast<size_t>(r * c), 0.0f) {}
  float* row(int64_t r) { return v.data() + r * cols; }
};

// The residual stream's layout: channels 0 and 1 are constant (+A, -A) and give every neuron a
// bias; the token subspace S carries the embedding; the context subspace T receives every layer's
// output (attention and FFN write only there), so S and the constant channels stay as embedded.
struct layout {
  int64_t s_begin, s_end, t_begin, t_end;
  explicit layout(int64_t n_embd) {
    s_begin = 2;
    s_end = 2 + (n_embd - 2) / 2;
    t_begin = s_end;
    t_end = n_embd;
  }
};

void zero_mean(float* x, int64_t begin, int64_t end) {
  double m = 0;
  for (int64_t i = begin; i < end; ++i) m += x[i];
  m /= std::max<int64_t>(1, end - begin);
  for (int64_t i = begin; i < end; ++i) x[i] -= static_cast<float>(m);
}

void fill_normal(rng& g, float* x, int64_t n, float scale) {
  for (int64_t i = 0; i < n; ++i) x[i] = g.normal() * scale;
}

}  // namespace

std::vector<double> power_law_probabilities(int64_t n, double mean, double top20_share, double* alpha_out) {
  // The top 20% can hold at most 0.2 * cap / mean of all firings.
  double best = std::min(1.0, 0.2 * firing_cap / mean * (static_cast<double>(std::max<int64_t>(1, n / 5)) * 5 / n));
  double target = std::min(top20_share, 0.97 * best);
  double lo = 0, hi = 8;
  for (int i = 0; i < 60; ++i) {
    double mid = 0.5 * (lo + hi);
    (top20(with_alpha(n, mean, mid)) < target ? lo : hi) = mid;
  }
  if (alpha_out) *alpha_out = hi;
  return with_alpha(n, mean, hi);
}

namespace {

// A synthetic model put together tensor by tensor, every draw from one random stream in a fixed order
// (the same options and seed write the same file).
class model_builder {
 public:
  model_builder(const gen_model_options& o, const gguf::file& vf, int64_t n_vocab)
      : o_(o), vf_(vf), types_{o}, n_vocab_(n_vocab), d_(o.n_embd), hd_(o.head_dim > 0 ? o.head_dim : o.n_embd / o.n_head), kv_(hd_ * o.n_head_kv),
        dq_(hd_ * o.n_head), lay_(o.n_embd), s_len_(lay_.s_end - lay_.s_begin), t_len_(lay_.t_end - lay_.t_begin), g_(o.seed), arch_(architecture_name(o.arch)) {
    report_.n_vocab = n_vocab;
  }
  gen_model_report build(const std::function<void(int64_t, int64_t)>& progress) {
    const int64_t total_steps = o_.n_layer + 3;
    int64_t step = 0;
    auto tick = [&] {
      if (progress) progress(++step, total_steps);
    };
    metadata();
    token_embeddings();
    tick();
    choose_sample();
    context_basis();
    for (int64_t il = 0; il < o_.n_layer; ++il) {
      layer(il);
      tick();
    }
    tail();
    tick();
    std::filesystem::path dir = std::filesystem::path(o_.out_path).parent_path();
    if (!dir.empty()) std::filesystem::create_directories(dir);
    w_.write(o_.out_path);
    report_.file_bytes = std::filesystem::file_size(o_.out_path);
    tick();
    return report_;
  }

 private:
  // Falcon's layout (parallel attention and FFN: a fused attn_qkv, LayerNorms with biases, no gate);
  // Phi-3's fused ffn_up of gate and up (with a fused attn_qkv); tensors the architecture's table names.
  bool falcon() const { return traits_.parallel; }
  bool has_role(tensor_role r) const {
    return std::any_of(traits_.tensors.begin(), traits_.tensors.end(), [r](const tensor_spec& t) { return t.role == r; });
  }
  bool fused_up() const { return has_role(tensor_role::ffn_up_gate); }
  bool moe() const { return o_.n_experts > 0; }
  int64_t shared_ff() const { return o_.n_ff_shared > 0 ? o_.n_ff_shared : o_.n_ff; }
  bool sparse() const { return o_.act == activation::relu || o_.act == activation::drelu; }
  float in_scale() const { return 1.0f / std::sqrt(static_cast<float>(d_)); }

  void add(const std::string& name, tensor_type t, const matrix& m) {
    storage_.push_back(convert_rows(m.v, m.cols, t));
    std::vector<int64_t> ne = m.rows == 1 ? std::vector<int64_t>{m.cols} : std::vector<int64_t>{m.cols, m.rows};
    w_.add_tensor(name, t, ne, storage_.back());
  }

  // llama.cpp's keys for the architecture, hotcold's activation key, the tokenizer.
  void metadata() {
    const std::string& arch = arch_;
    w_.set_string("general.architecture", arch);
    w_.set_string("general.name", fmt::format("hotcold-synthetic-{}-{}", arch, activation_name(o_.act)));
    w_.set_u32("general.file_type", file_type_of(o_));
    w_.set_u32(arch + ".context_length", static_cast<uint32_t>(o_.n_ctx));
    w_.set_u32(arch + ".embedding_length", static_cast<uint32_t>(d_));
    w_.set_u32(arch + ".block_count", static_cast<uint32_t>(o_.n_layer));
    w_.set_u32(arch + ".feed_forward_length", static_cast<uint32_t>(o_.n_ff));
    w_.set_u32(arch + ".attention.head_count", static_cast<uint32_t>(o_.n_head));
    w_.set_u32(arch + ".attention.head_count_kv", static_cast<uint32_t>(o_.n_head_kv));
    w_.set_u32(arch + ".rope.dimension_count", static_cast<uint32_t>(hd_));
    if (dq_ != d_ && !traits_.gemma2) {
      w_.set_u32(arch + ".attention.key_length", static_cast<uint32_t>(hd_));
      w_.set_u32(arch + ".attention.value_length", static_cast<uint32_t>(hd_));
    }
    if (o_.phi3_rope_orig_ctx > 0) {
      const double ratio = static_cast<double>(o_.n_ctx) / static_cast<double>(o_.phi3_rope_orig_ctx);
      w_.set_u32(arch + ".rope.scaling.original_context_length", static_cast<uint32_t>(o_.phi3_rope_orig_ctx));
      w_.set_f32(arch + ".rope.scaling.attn_factor", static_cast<float>(std::sqrt(1 + std::log(ratio) / std::log(static_cast<double>(o_.phi3_rope_orig_ctx)))));
    }
    w_.set_f32(arch + ".rope.freq_base", o_.rope_freq_base);
    w_.set_f32(fmt::format("{}.{}", arch, traits_.eps_key), 1e-5f);
    if (traits_.gemma2) {  // as llama.cpp's converter writes a Gemma 2 file (key and value widths always)
      w_.set_u32(arch + ".attention.key_length", static_cast<uint32_t>(hd_));
      w_.set_u32(arch + ".attention.value_length", static_cast<uint32_t>(hd_));
      w_.set_u32(arch + ".attention.sliding_window", static_cast<uint32_t>(o_.sliding_window > 0 ? o_.sliding_window : 4096));
      w_.set_f32(arch + ".attn_logit_softcapping", o_.attn_softcap);
      w_.set_f32(arch + ".final_logit_softcapping", o_.final_softcap);
    }
    w_.set_u32(arch + ".vocab_size", static_cast<uint32_t>(n_vocab_));
    if (moe()) {
      w_.set_u32(arch + ".expert_count", static_cast<uint32_t>(o_.n_experts));
      w_.set_u32(arch + ".expert_used_count", static_cast<uint32_t>(o_.n_experts_used));
      if (!traits_.experts_as_wide_as_ff) w_.set_u32(arch + ".expert_feed_forward_length", static_cast<uint32_t>(o_.n_ff));
      if (traits_.shared_expert) w_.set_u32(arch + ".expert_shared_feed_forward_length", static_cast<uint32_t>(shared_ff()));
    }
    w_.set_string(activation_key, activation_name(o_.act));
    w_.set_f32("hotcold.synthetic.active_fraction", static_cast<float>(sparse() ? o_.active : 1.0));
    w_.set_u64("hotcold.synthetic.seed", o_.seed);
    for (const auto& kv_pair : vf_.metadata())
      if (kv_pair.key.starts_with("tokenizer.") && !(kv_pair.key == "tokenizer.chat_template" && !o_.chat_template.empty())) w_.set_value(kv_pair.key, kv_pair.val);
    if (!o_.chat_template.empty()) w_.set_string("tokenizer.chat_template", std::string(chat_template::published(o_.chat_template)));
  }

  // Token embeddings: +A, -A on the constant channels, a unit-RMS zero-mean vector in S, zero in T.
  // As in trained models, hidden states have a low intrinsic dimension: token vectors lie mostly in
  // a subspace of S of rank max(8, embd/32) plus a little isotropic noise, and every layer writes
  // into a subspace of T of rank max(4, embd/64). That is what lets a low-rank predictor tell which
  // neurons fire (docs/synthetic-models.md).
  void token_embeddings() {
    const int64_t token_rank = std::min<int64_t>(s_len_, std::max<int64_t>(8, d_ / 32));
    matrix basis(token_rank, s_len_);
    for (int64_t k = 0; k < token_rank; ++k) fill_normal(g_, basis.row(k), s_len_, 1.0f);
    std::vector<float> coef(static_cast<size_t>(token_rank));
    embd_ = matrix(n_vocab_, d_);
    for (int64_t t = 0; t < n_vocab_; ++t) {
      float* e = embd_.row(t);
      e[0] = bias_level;
      e[1] = -bias_level;
      fill_normal(g_, e + lay_.s_begin, s_len_, token_noise);
      fill_normal(g_, coef.data(), token_rank, 1.0f);
      for (int64_t k = 0; k < token_rank; ++k) kernels::axpy_f32(coef[k], basis.row(k), e + lay_.s_begin, s_len_);
      zero_mean(e, lay_.s_begin, lay_.s_end);
      double ss = 0;
      for (int64_t i = lay_.s_begin; i < lay_.s_end; ++i) ss += e[i] * double(e[i]);
      float scale = static_cast<float>(std::sqrt(s_len_ / std::max(ss, 1e-12)));
      for (int64_t i = lay_.s_begin; i < lay_.s_end; ++i) e[i] *= scale;
    }
    if (!traits_.gemma2) return add("token_embd.weight", types_.token_embd(), embd_);
    // Gemma 2 scales its embeddings by sqrt(n_embd) as it reads them, and its head is the same table:
    // stored 1 / sqrt(n_embd) as large (as its trained ones are small), the residual stream is as
    // designed and the tied head's logits a few units.
    matrix stored = embd_;
    for (float& v : stored.v) v *= in_scale();
    add("token_embd.weight", types_.token_embd(), stored);
  }

  // Tokens used to place each neuron's threshold: a fixed sample of the vocabulary.
  void choose_sample() {
    const int64_t n_sample = std::min<int64_t>(n_vocab_, 512);
    sample_.resize(static_cast<size_t>(n_vocab_));
    std::iota(sample_.begin(), sample_.end(), 0);
    for (int64_t i = 0; i < n_sample; ++i) std::swap(sample_[i], sample_[i + static_cast<int64_t>(g_.next() % static_cast<uint64_t>(n_vocab_ - i))]);
    sample_.resize(static_cast<size_t>(n_sample));
    scores_.resize(static_cast<size_t>(n_sample));
  }

  // The context subspace's written part: rows of T are combinations of ctx_rank random vectors.
  void context_basis() {
    ctx_rank_ = std::min<int64_t>(t_len_, std::max<int64_t>(4, d_ / 64));
    ctx_basis_ = matrix(ctx_rank_, t_len_);
    for (int64_t k = 0; k < ctx_rank_; ++k) fill_normal(g_, ctx_basis_.row(k), t_len_, 1.0f);
  }

  // A neuron row reading the token subspace (and a little of the context subspace), with a bias on
  // the constant channels placing its threshold so that a fraction `p` of sample tokens fire it.
  void neuron_row(float* row, double p) {
    fill_normal(g_, row + lay_.s_begin, s_len_, 1.0f);
    zero_mean(row, lay_.s_begin, lay_.s_end);
    fill_normal(g_, row + lay_.t_begin, t_len_, context_weight);
    zero_mean(row, lay_.t_begin, lay_.t_end);
    float inv = 1.0f / std::sqrt(static_cast<float>(d_));
    for (int64_t i = lay_.s_begin; i < lay_.t_end; ++i) row[i] *= inv;
    if (p < 0) return;  // dense: no bias
    const auto n_sample = static_cast<int64_t>(sample_.size());
    for (int64_t s = 0; s < n_sample; ++s) scores_[s] = kernels::dot_f32(row + lay_.s_begin, embd_.row(sample_[s]) + lay_.s_begin, s_len_);
    auto k = std::min<int64_t>(n_sample - 1, static_cast<int64_t>((1.0 - p) * n_sample));
    std::nth_element(scores_.begin(), scores_.begin() + k, scores_.end());
    float threshold = scores_[k];
    // Fires iff row_S . e_S + 2 b A > 0 (the constant channels cancel in LayerNorm's mean).
    float b = -threshold / (2 * bias_level);
    row[0] = b;
    row[1] = -b;
  }

  matrix random_matrix(int64_t rows, int64_t cols, float scale) {
    matrix m(rows, cols);
    for (int64_t r = 0; r < rows; ++r) fill_normal(g_, m.row(r), cols, scale);
    return m;
  }
  // A d x cols matrix whose output lies in the context subspace's written part (each entry of the
  // result has standard deviation `scale`).
  matrix context_writer(int64_t cols, float scale) {
    matrix coefs = random_matrix(ctx_rank_, cols, scale / std::sqrt(static_cast<float>(ctx_rank_)));
    matrix m(d_, cols);
    for (int64_t t = 0; t < t_len_; ++t)
      for (int64_t k = 0; k < ctx_rank_; ++k) kernels::axpy_f32(ctx_basis_.row(k)[t], coefs.row(k), m.row(lay_.t_begin + t), cols);
    return m;
  }
  // A norm's weight and bias: identity unless norm_spread asks for varied ones (own draws each call).
  matrix norm_weight() {
    matrix m(1, d_);
    if (o_.norm_spread == 0) std::fill(m.v.begin(), m.v.end(), 1.0f);
    else
      for (auto& x : m.v) x = static_cast<float>(1.0 + o_.norm_spread * (2.0 * g_.uniform() - 1.0));
    return m;
  }
  // A norm of a branch's output (gemma2's post-norms): it sets the branch's size in the residual
  // stream, so its weights are the context subspace's scale (0.5 on its channels, small elsewhere:
  // the constant channels and the token subspace stay as embedded), varied by norm_spread.
  matrix post_norm_weight() {
    matrix m = norm_weight();
    for (int64_t i = 0; i < d_; ++i) m.v[static_cast<size_t>(i)] *= i >= lay_.t_begin && i < lay_.t_end ? 0.5f : 0.02f;
    return m;
  }
  matrix norm_bias() {
    matrix m(1, d_);
    if (o_.norm_spread != 0)
      for (auto& x : m.v) x = static_cast<float>(0.5 * o_.norm_spread * (2.0 * g_.uniform() - 1.0));
    return m;
  }

  // Firing probabilities: a power law whose steepness varies by layer, over neurons in random order
  // (-1 each: a dense FFN's neurons have no threshold).
  std::vector<double> firing_probabilities(int64_t il) {
    const int64_t n_ff = o_.n_ff;
    std::vector<double> p(static_cast<size_t>(n_ff), -1.0);
    if (!sparse()) return p;
    double share = 0.66 + 0.14 * std::fmod(0.618034 * static_cast<double>(il + 1), 1.0);
    gen_layer_design design{};
    auto by_rank = power_law_probabilities(n_ff, o_.active, share, &design.alpha);
    design.mean = std::accumulate(by_rank.begin(), by_rank.end(), 0.0) / n_ff;
    design.top20_share = top20(by_rank);
    report_.layers.push_back(design);
    std::vector<int64_t> order(static_cast<size_t>(n_ff));
    std::iota(order.begin(), order.end(), 0);
    for (int64_t i = n_ff - 1; i > 0; --i) std::swap(order[i], order[static_cast<int64_t>(g_.next() % static_cast<uint64_t>(i + 1))]);
    for (int64_t r = 0; r < n_ff; ++r) p[order[r]] = by_rank[r];
    return p;
  }

  void attention(const std::string& blk, int64_t il) {
    const float in = in_scale();
    if (falcon()) {
      add(blk + "attn_norm.weight", tensor_type::f32, norm_weight());
      add(blk + "attn_norm.bias", tensor_type::f32, norm_bias());
      if (o_.n_head_kv > 1) {  // Falcon-40B: a second norm, which feeds the attention (attn_norm then feeds the FFN)
        add(blk + "attn_norm_2.weight", tensor_type::f32, norm_weight());
        add(blk + "attn_norm_2.bias", tensor_type::f32, norm_bias());
      }
      add(blk + "attn_qkv.weight", types_.qkv(), random_matrix(d_ + 2 * kv_, d_, in));
    } else if (fused_up()) {  // (phi3) q, k and v in one tensor, q's rows first
      add(blk + "attn_norm.weight", tensor_type::f32, norm_weight());
      add(blk + "attn_qkv.weight", types_.qkv(), random_matrix(dq_ + 2 * kv_, d_, in));
    } else {
      add(blk + "attn_norm.weight", tensor_type::f32, norm_weight());
      add(blk + "attn_q.weight", o_.type, random_matrix(dq_, d_, in));
      add(blk + "attn_k.weight", o_.type, random_matrix(kv_, d_, in));
      add(blk + "attn_v.weight", types_.attn_v(il), random_matrix(kv_, d_, in));
    }
    if (traits_.qkv_biases) {  // biases as large as the products' values: a path that drops one computes another model
      add(blk + "attn_q.bias", tensor_type::f32, random_matrix(1, dq_, 0.5f));
      add(blk + "attn_k.bias", tensor_type::f32, random_matrix(1, kv_, 0.5f));
      add(blk + "attn_v.bias", tensor_type::f32, random_matrix(1, kv_, 0.5f));
    }
    if (traits_.qk_norms) {  // each head's norm weights for q and k, apart from each other
      for (const char* name : {"attn_q_norm.weight", "attn_k_norm.weight"}) {
        matrix m(1, hd_);
        for (auto& x : m.v) x = static_cast<float>(1.0 + std::max(o_.norm_spread, 0.5) * (2.0 * g_.uniform() - 1.0));
        add(blk + name, tensor_type::f32, m);
      }
    }
    // Attention writes only into the context subspace.
    add(blk + "attn_output.weight", o_.type, context_writer(dq_, 0.5f * std::sqrt(static_cast<float>(d_) / static_cast<float>(dq_)) * in));
    if (has_role(tensor_role::attn_post_norm)) add(blk + "post_attention_norm.weight", tensor_type::f32, post_norm_weight());
  }

  void ffn(const std::string& blk, int64_t il, const std::vector<double>& p) {
    const int64_t n_ff = o_.n_ff;
    matrix gate(n_ff, d_), up(n_ff, d_);
    const double up_fires = 0.9;  // dReLU: the up side fires this often, the gate side p / up_fires
    for (int64_t j = 0; j < n_ff; ++j) {
      double pj = p[j];
      if (o_.act == activation::drelu) {
        neuron_row(gate.row(j), std::min(firing_cap, pj / up_fires));
        neuron_row(up.row(j), up_fires);
      } else if (falcon()) {
        neuron_row(up.row(j), pj);
      } else {
        neuron_row(gate.row(j), pj);
        neuron_row(up.row(j), -1.0);
      }
    }
    if (fused_up()) {  // gate and up in one tensor: the gate's n_ff rows, then up's
      add(blk + "ffn_norm.weight", tensor_type::f32, norm_weight());
      matrix fused(2 * n_ff, d_);
      std::copy(gate.v.begin(), gate.v.end(), fused.v.begin());
      std::copy(up.v.begin(), up.v.end(), fused.v.begin() + static_cast<std::ptrdiff_t>(gate.v.size()));
      add(blk + "ffn_up.weight", o_.type, fused);
    } else {
      if (!falcon()) {
        add(blk + "ffn_norm.weight", tensor_type::f32, norm_weight());
        add(blk + "ffn_gate.weight", o_.type, gate);
      }
      add(blk + "ffn_up.weight", o_.type, up);
    }
    // The FFN writes only into the context subspace too.
    float down_scale = 0.5f / std::sqrt(static_cast<float>(n_ff) * static_cast<float>(sparse() ? o_.active : 0.5));
    add(blk + "ffn_down.weight", types_.ffn_down(il), context_writer(n_ff, down_scale));
    if (has_role(tensor_role::ffn_post_norm)) add(blk + "post_ffw_norm.weight", tensor_type::f32, post_norm_weight());
  }

  void layer(int64_t il) {
    const std::string blk = fmt::format("blk.{}.", il);
    if (moe()) {
      attention(blk, il);
      experts(blk, il);
      return;
    }
    const auto p = firing_probabilities(il);
    attention(blk, il);
    ffn(blk, il, p);
  }

  // n rows x cols matrices one after another, as one tensor of ne {cols, rows, n} (the experts' 3-D
  // tensors: slice e is expert e's matrix).
  void add_experts(const std::string& name, tensor_type t, const std::vector<matrix>& ms) {
    const int64_t rows = ms[0].rows, cols = ms[0].cols;
    matrix all(rows * static_cast<int64_t>(ms.size()), cols);
    for (size_t e = 0; e < ms.size(); ++e) std::copy(ms[e].v.begin(), ms[e].v.end(), all.v.begin() + static_cast<std::ptrdiff_t>(e * ms[e].v.size()));
    storage_.push_back(convert_rows(all.v, cols, t));
    const std::vector<int64_t> ne{cols, rows, static_cast<int64_t>(ms.size())};
    w_.add_tensor(name, t, ne, storage_.back());
  }

  // A dense SiLU FFN of n neurons: gate and up rows reading the token and context subspaces, down
  // writing into the context subspace.
  void dense_expert(int64_t n, matrix& gate, matrix& up, matrix& down) {
    gate = matrix(n, d_), up = matrix(n, d_);
    for (int64_t j = 0; j < n; ++j) {
      neuron_row(gate.row(j), -1.0);
      neuron_row(up.row(j), -1.0);
    }
    down = context_writer(n, 0.5f / std::sqrt(static_cast<float>(n) * 0.5f * static_cast<float>(std::max<int64_t>(1, o_.n_experts_used))));
  }

  // A mixture of experts' layer: the router (F32, as llama.cpp's quantize keeps it), the experts, and
  // qwen2moe's shared expert with its gate vector.
  void experts(const std::string& blk, int64_t il) {
    add(blk + "ffn_norm.weight", tensor_type::f32, norm_weight());
    const int64_t ne = o_.n_experts;
    // Row e: the token subspace with weight 1 - L, the context subspace with weight L (both unit-RMS
    // directions, scaled to give logits of a few units), and a constant 2 b_e A through the constant
    // channels, b_e ~ (rank + 1)^-skew over the experts in a random order.
    matrix router(ne, d_);
    const double loc = o_.expert_locality;
    const float spread = 4.0f;
    std::vector<int64_t> rank(static_cast<size_t>(ne));
    std::iota(rank.begin(), rank.end(), 0);
    for (int64_t i = ne - 1; i > 0; --i) std::swap(rank[static_cast<size_t>(i)], rank[static_cast<size_t>(g_.next() % static_cast<uint64_t>(i + 1))]);
    for (int64_t e = 0; e < ne; ++e) {
      float* r = router.row(e);
      fill_normal(g_, r + lay_.s_begin, s_len_, static_cast<float>((1 - loc) * spread / std::sqrt(static_cast<double>(s_len_))));
      zero_mean(r, lay_.s_begin, lay_.s_end);
      std::vector<float> c(static_cast<size_t>(ctx_rank_));
      fill_normal(g_, c.data(), ctx_rank_, 1.0f);
      for (int64_t k = 0; k < ctx_rank_; ++k)
        kernels::axpy_f32(static_cast<float>(loc * spread * 4.0 / std::sqrt(static_cast<double>(ctx_rank_ * t_len_))) * c[static_cast<size_t>(k)],
                          ctx_basis_.row(k), r + lay_.t_begin, t_len_);
      // Up to 1.5 x the spread of the other parts' logits for the most popular expert.
      const double popular = o_.expert_skew > 0 ? 1.5 * spread * std::pow(static_cast<double>(rank[static_cast<size_t>(e)] + 1), -o_.expert_skew) : 0.0;
      r[0] = static_cast<float>(popular / (2 * bias_level));
      r[1] = -r[0];
    }
    add(blk + "ffn_gate_inp.weight", tensor_type::f32, router);
    std::vector<matrix> gates(static_cast<size_t>(ne), matrix(0, 0)), ups(gates), downs(gates);
    for (int64_t e = 0; e < ne; ++e) dense_expert(o_.n_ff, gates[static_cast<size_t>(e)], ups[static_cast<size_t>(e)], downs[static_cast<size_t>(e)]);
    add_experts(blk + "ffn_gate_exps.weight", o_.type, gates);
    add_experts(blk + "ffn_up_exps.weight", o_.type, ups);
    add_experts(blk + "ffn_down_exps.weight", types_.ffn_down(il), downs);
    if (traits_.shared_expert) {
      add(blk + "ffn_gate_inp_shexp.weight", tensor_type::f32, random_matrix(1, d_, 2.0f * in_scale()));
      matrix g(0, 0), u(0, 0), dn(0, 0);
      dense_expert(shared_ff(), g, u, dn);
      add(blk + "ffn_gate_shexp.weight", o_.type, g);
      add(blk + "ffn_up_shexp.weight", o_.type, u);
      add(blk + "ffn_down_shexp.weight", types_.ffn_down(il), dn);
    }
  }

  // Llama 3.1's rule: pairs whose wavelength is shorter than ctx/4 keep their frequency, longer than
  // ctx turn 8 times slower, and between the two blend smoothly.
  void llama3_rope_factors() {
    const double factor = 8, low = 1, high = 4, ctx = static_cast<double>(o_.llama3_rope_ctx);
    matrix f(1, hd_ / 2);
    for (int64_t i = 0; i < hd_ / 2; ++i) {
      const double wavelen = 2 * M_PI * std::pow(static_cast<double>(o_.rope_freq_base), 2.0 * static_cast<double>(i) / static_cast<double>(hd_));
      double v = 1;
      if (wavelen > ctx / low) v = factor;
      else if (wavelen >= ctx / high) {
        const double smooth = (ctx / wavelen - low) / (high - low);
        v = 1 / ((1 - smooth) / factor + smooth);
      }
      f.row(0)[i] = static_cast<float>(v);
    }
    add("rope_freqs.weight", tensor_type::f32, f);
  }

  // LongRoPE's factors: short ones near 1, long ones up to 8, rising with the pair.
  void phi3_rope_factors() {
    matrix shortf(1, hd_ / 2), longf(1, hd_ / 2);
    for (int64_t i = 0; i < hd_ / 2; ++i) {
      const double rise = static_cast<double>(i) / static_cast<double>(std::max<int64_t>(1, hd_ / 2 - 1));
      shortf.row(0)[i] = static_cast<float>(1.0 + 0.5 * rise + 0.1 * g_.uniform());
      longf.row(0)[i] = static_cast<float>(1.0 + 7.0 * rise * rise + 0.5 * g_.uniform());
    }
    add("rope_factors_long.weight", tensor_type::f32, longf);
    add("rope_factors_short.weight", tensor_type::f32, shortf);
  }

  // The output norm, RoPE's factor tensors, and the head (reading every channel).
  void tail() {
    add("output_norm.weight", tensor_type::f32, norm_weight());
    if (traits_.norm == norm_kind::layer) add("output_norm.bias", tensor_type::f32, norm_bias());
    if (o_.llama3_rope_ctx > 0) llama3_rope_factors();
    if (o_.phi3_rope_orig_ctx > 0) phi3_rope_factors();
    matrix out = random_matrix(n_vocab_, d_, 3.0f * in_scale());
    if (!o_.tied_output && !traits_.gemma2) add("output.weight", types_.output(), out);  // (gemma2's head is its embeddings)
    if (o_.output_bias) add("output.bias", tensor_type::f32, random_matrix(1, n_vocab_, 1.0f));
  }

  const gen_model_options& o_;
  const arch_traits& traits_ = arch_of(o_.arch);
  const gguf::file& vf_;
  const preset_types types_;
  const int64_t n_vocab_, d_, hd_, kv_, dq_;
  const layout lay_;
  const int64_t s_len_, t_len_;
  rng g_;
  const std::string arch_;
  gen_model_report report_;
  gguf::writer w_;
  std::vector<std::vector<uint8_t>> storage_;  // the tensors' bytes, kept until the file is written
  matrix embd_{0, 0};
  std::vector<int64_t> sample_;
  std::vector<float> scores_;
  int64_t ctx_rank_ = 0;
  matrix ctx_basis_{0, 0};
};

}  // namespace

gen_model_report generate_model(const gen_model_options& o, const std::function<void(int64_t, int64_t)>& progress) {
  check_options(o);
  auto vf = gguf::file::open(o.vocab_path);
  auto voc = vocab::from_gguf(vf);
  return model_builder(o, vf, static_cast<int64_t>(voc.size())).build(progress);
}

}  // namespace hotcold::tools
