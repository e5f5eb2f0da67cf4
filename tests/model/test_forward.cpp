// The reference forward pass against an independent computation written here: double precision,
// per element, no KV cache (every position recomputed from the start), weights dequantized from
// the file's blocks. One case per architecture x activation x weight type.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "kernels/cpu/fp16.hpp"
#include "kernels/cpu/quants.hpp"
#include "model/forward.hpp"
#include "model/gguf.hpp"
#include "tests/model/tiny_models.hpp"
#include "tools/sparse_file.hpp"

namespace hotcold {
namespace {

using mat = std::vector<std::vector<double>>;  // [rows][cols]
using vec = std::vector<double>;

// Dequantizes a whole tensor (rows of ne[0]) straight from the file's bytes.
mat load_matrix(const gguf::file& f, const std::string& name) {
  const auto* t = f.find_tensor(name);
  if (!t) throw std::runtime_error("test: missing " + name);
  int64_t cols = t->ne[0], rows = t->n_elements / cols;
  size_t row_bytes = t->n_bytes / rows;
  mat m(rows, vec(cols));
  std::vector<float> tmp(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* p = t->data + r * row_bytes;
    switch (t->type) {
      case tensor_type::f32: std::memcpy(tmp.data(), p, cols * 4); break;
      case tensor_type::f16:
        for (int64_t c = 0; c < cols; ++c) tmp[c] = kernels::fp16_to_fp32(reinterpret_cast<const uint16_t*>(p)[c]);
        break;
      case tensor_type::bf16:
        for (int64_t c = 0; c < cols; ++c) tmp[c] = kernels::bf16_to_fp32(reinterpret_cast<const uint16_t*>(p)[c]);
        break;
      case tensor_type::q8_0: kernels::dequantize_row_q8_0(reinterpret_cast<const kernels::block_q8_0*>(p), tmp.data(), cols); break;
      case tensor_type::q4_0: kernels::dequantize_row_q4_0(reinterpret_cast<const kernels::block_q4_0*>(p), tmp.data(), cols); break;
      case tensor_type::q6_k: kernels::dequantize_row_q6_k(reinterpret_cast<const kernels::block_q6_k*>(p), tmp.data(), cols); break;
      default: throw std::runtime_error("test: type");
    }
    for (int64_t c = 0; c < cols; ++c) m[r][c] = tmp[c];
  }
  return m;
}

vec times(const mat& w, const vec& x) {
  vec y(w.size(), 0.0);
  for (size_t r = 0; r < w.size(); ++r)
    for (size_t c = 0; c < x.size(); ++c) y[r] += w[r][c] * x[c];
  return y;
}

struct naive {
  const gguf::file& f;
  std::string arch;
  int64_t d, n_layer, n_head, n_kv_head, n_ff, n_rot;
  double eps, base;
  std::string act;
  bool falcon;

  explicit naive(const gguf::file& file) : f(file) {
    arch = std::string(*f.get_string("general.architecture"));
    auto k = [&](const char* s) { return arch + "." + s; };
    d = *f.get_int(k("embedding_length"));
    n_layer = *f.get_int(k("block_count"));
    n_head = *f.get_int(k("attention.head_count"));
    n_kv_head = *f.get_int(k("attention.head_count_kv"));
    n_ff = *f.get_int(k("feed_forward_length"));
    n_rot = *f.get_int(k("rope.dimension_count"));
    base = *f.get_float(k("rope.freq_base"));
    falcon = arch == "falcon";
    eps = falcon ? *f.get_float(k("attention.layer_norm_epsilon")) : *f.get_float(k("attention.layer_norm_rms_epsilon"));
    act = std::string(*f.get_string("hotcold.activation"));
  }

  vec vector(const std::string& name) { return load_matrix(f, name)[0]; }

  vec rms(const vec& x, const vec& w) {
    double ss = 0;
    for (double v : x) ss += v * v;
    double s = 1 / std::sqrt(ss / x.size() + eps);
    vec y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * s * w[i];
    return y;
  }
  vec layer_norm(const vec& x, const vec& w, const vec& b) {
    double m = 0, v = 0;
    for (double a : x) m += a;
    m /= x.size();
    for (double a : x) v += (a - m) * (a - m);
    v /= x.size();
    vec y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = (x[i] - m) / std::sqrt(v + eps) * w[i] + b[i];
    return y;
  }
  void rope(vec& x, int64_t heads, int64_t pos) {
    int64_t hd = d / n_head;
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < n_rot / 2; ++i) {
        double theta = pos * std::pow(base, -2.0 * i / n_rot);
        int64_t a = falcon ? h * hd + i : h * hd + 2 * i;
        int64_t b = falcon ? h * hd + i + n_rot / 2 : h * hd + 2 * i + 1;
        double x0 = x[a], x1 = x[b];
        x[a] = x0 * std::cos(theta) - x1 * std::sin(theta);
        x[b] = x0 * std::sin(theta) + x1 * std::cos(theta);
      }
  }
  double activate(double g) {
    if (act == "silu") return g / (1 + std::exp(-g));
    if (act == "gelu") return 0.5 * g * (1 + std::tanh(std::sqrt(2 / M_PI) * (g + 0.044715 * g * g * g)));
    return g > 0 ? g : 0;
  }

  // Logits of every position of `tokens`; with a mask ([token][layer][neuron]), only the neurons it
  // holds contribute to each FFN (what a sparse path computed).
  std::vector<vec> logits(const std::vector<token_id>& tokens, const std::vector<std::vector<std::vector<bool>>>* mask = nullptr) {
    const int64_t T = tokens.size(), hd = d / n_head, kv = hd * n_kv_head;
    mat embd = load_matrix(f, "token_embd.weight");
    std::vector<vec> x(T);
    for (int64_t t = 0; t < T; ++t) x[t] = embd[tokens[t]];
    for (int64_t l = 0; l < n_layer; ++l) {
      std::string b = "blk." + std::to_string(l) + ".";
      std::vector<vec> q(T), k(T), v(T), attn_in(T);
      for (int64_t t = 0; t < T; ++t) {
        if (falcon) {
          // Falcon-40B (attn_norm_2 present): attention reads attn_norm_2(x), the FFN attn_norm(x).
          attn_in[t] = layer_norm(x[t], vector(b + "attn_norm.weight"), vector(b + "attn_norm.bias"));
          vec qkv_in = f.find_tensor(b + "attn_norm_2.weight") ? layer_norm(x[t], vector(b + "attn_norm_2.weight"), vector(b + "attn_norm_2.bias")) : attn_in[t];
          vec qkv = times(load_matrix(f, b + "attn_qkv.weight"), qkv_in);
          q[t] = vec(qkv.begin(), qkv.begin() + d);
          k[t] = vec(qkv.begin() + d, qkv.begin() + d + kv);
          v[t] = vec(qkv.begin() + d + kv, qkv.end());
        } else {
          attn_in[t] = rms(x[t], vector(b + "attn_norm.weight"));
          q[t] = times(load_matrix(f, b + "attn_q.weight"), attn_in[t]);
          k[t] = times(load_matrix(f, b + "attn_k.weight"), attn_in[t]);
          v[t] = times(load_matrix(f, b + "attn_v.weight"), attn_in[t]);
        }
        rope(q[t], n_head, t);
        rope(k[t], n_kv_head, t);
      }
      mat wo = load_matrix(f, b + "attn_output.weight");
      std::vector<vec> attn(T, vec(d, 0.0));
      for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < n_head; ++h) {
          int64_t g = h / (n_head / n_kv_head);
          vec s(t + 1);
          double mx = -1e300, sum = 0;
          for (int64_t u = 0; u <= t; ++u) {
            s[u] = 0;
            for (int64_t i = 0; i < hd; ++i) s[u] += q[t][h * hd + i] * k[u][g * hd + i];
            s[u] /= std::sqrt(double(hd));
            mx = std::max(mx, s[u]);
          }
          for (auto& e : s) sum += (e = std::exp(e - mx));
          for (int64_t u = 0; u <= t; ++u)
            for (int64_t i = 0; i < hd; ++i) attn[t][h * hd + i] += s[u] / sum * v[u][g * hd + i];
        }
      bool gated = !falcon;
      mat up = load_matrix(f, b + "ffn_up.weight"), down = load_matrix(f, b + "ffn_down.weight");
      mat gate = gated ? load_matrix(f, b + "ffn_gate.weight") : mat{};
      for (int64_t t = 0; t < T; ++t) {
        vec o = times(wo, attn[t]);
        vec ffn_in;
        if (falcon) {
          ffn_in = attn_in[t];
        } else {
          for (int64_t i = 0; i < d; ++i) x[t][i] += o[i];
          ffn_in = rms(x[t], vector(b + "ffn_norm.weight"));
        }
        vec u = times(up, ffn_in), hidden(n_ff);
        vec gv = gated ? times(gate, ffn_in) : vec{};
        for (int64_t j = 0; j < n_ff; ++j) {
          if (mask && !(*mask)[t][l][j]) continue;  // a neuron the sparse path left out
          if (!gated) hidden[j] = activate(u[j]);
          else if (act == "drelu") hidden[j] = std::max(gv[j], 0.0) * std::max(u[j], 0.0);
          else hidden[j] = activate(gv[j]) * u[j];
        }
        vec fo = times(down, hidden);
        for (int64_t i = 0; i < d; ++i) x[t][i] += fo[i] + (falcon ? o[i] : 0.0);
      }
    }
    mat out = f.find_tensor("output.weight") ? load_matrix(f, "output.weight") : embd;
    std::vector<vec> result;
    for (int64_t t = 0; t < T; ++t) {
      vec n = falcon ? layer_norm(x[t], vector("output_norm.weight"), vector("output_norm.bias")) : rms(x[t], vector("output_norm.weight"));
      result.push_back(times(out, n));
    }
    return result;
  }
};

struct forward_case {
  std::string name;
  architecture arch;
  activation act;
  tensor_type type;
  int64_t n_head_kv;
  double tolerance;  // relative RMS of the logits
};

std::ostream& operator<<(std::ostream& os, const forward_case& c) { return os << c.name; }

class ForwardPass : public testing::TestWithParam<forward_case> {};

TEST_P(ForwardPass, MatchesTheIndependentComputation) {
  const auto& c = GetParam();
  tools::gen_model_options o;
  o.arch = c.arch;
  o.act = c.act;
  o.type = c.type;
  bool q4 = c.type == tensor_type::q4_0;
  o.n_embd = q4 ? 256 : 64;  // Q4_0 files store the output head as Q6_K, which needs rows of 256
  o.n_ff = q4 ? 256 : 128;
  o.n_layer = 2;
  o.n_head = 4;
  o.n_head_kv = c.n_head_kv;
  o.n_ctx = 64;
  o.active = 0.25;
  o.seed = 7;
  o.norm_spread = 0.3;  // every norm its own weights and biases: a norm read in the wrong place shows
  auto path = test::make_model(c.name, o);

  auto m = model::load(path);
  if (q4) {
    EXPECT_EQ(m->weights().output.type, tensor_type::q6_k);
  }
  inference_context ctx(m, 16, 2);
  std::vector<token_id> tokens{1, 299, 42, 7, 290, 123, 5};
  std::vector<std::vector<float>> got;
  for (size_t i = 0; i < tokens.size(); ++i) {
    auto l = ctx.forward(tokens[i], static_cast<int64_t>(i));
    got.emplace_back(l.begin(), l.end());
  }
  auto file = gguf::file::open(path);
  auto want = naive(file).logits(tokens);
  double num = 0, den = 0;
  for (size_t t = 0; t < tokens.size(); ++t)
    for (size_t i = 0; i < want[t].size(); ++i) {
      num += (got[t][i] - want[t][i]) * (got[t][i] - want[t][i]);
      den += want[t][i] * want[t][i];
    }
  double rel = std::sqrt(num / den);
  EXPECT_LT(rel, c.tolerance) << c.name;
  RecordProperty("relative_rms", testing::PrintToString(rel));

  // The prompt as one batch (the stages' path) computes the same logits.
  inference_context batch_ctx(m, 16, 2);
  auto all = batch_ctx.forward_batch(tokens, 0, true);
  const size_t nv = want[0].size();
  ASSERT_EQ(all.size(), tokens.size() * nv);
  num = den = 0;
  for (size_t t = 0; t < tokens.size(); ++t)
    for (size_t i = 0; i < nv; ++i) {
      num += (all[t * nv + i] - want[t][i]) * (all[t * nv + i] - want[t][i]);
      den += want[t][i] * want[t][i];
    }
  EXPECT_LT(std::sqrt(num / den), c.tolerance) << c.name << " as one batch";
}

std::vector<forward_case> cases() {
  std::vector<forward_case> out;
  struct type_tol { tensor_type t; const char* name; double tol; };
  // Float weights: only float-vs-double rounding separates the two. Q8_0 / Q4_0 rows are multiplied
  // with activations quantized to Q8_0 (as llama.cpp does), which the double computation does not do.
  std::vector<type_tol> types{{tensor_type::f32, "f32", 1e-5}, {tensor_type::f16, "f16", 1e-5}, {tensor_type::bf16, "bf16", 1e-5},
                              {tensor_type::q8_0, "q8_0", 1.5e-2}, {tensor_type::q4_0, "q4_0", 1.5e-2}};
  struct arch_act { architecture a; activation act; int64_t kv; const char* name; };
  std::vector<arch_act> combos{
      {architecture::llama, activation::silu, 2, "llama_silu"},   {architecture::llama, activation::relu, 2, "llama_relu"},
      {architecture::llama, activation::drelu, 4, "llama_drelu"}, {architecture::bamboo, activation::drelu, 2, "bamboo_drelu"},
      {architecture::falcon, activation::gelu, 1, "falcon7b_gelu"}, {architecture::falcon, activation::relu, 1, "falcon7b_relu"},
      {architecture::falcon, activation::relu, 2, "falcon40b_relu"},
  };
  for (const auto& c : combos)
    for (const auto& t : types) out.push_back({std::string(c.name) + "_" + t.name, c.a, c.act, t.t, c.kv, t.tol});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Models, ForwardPass, testing::ValuesIn(cases()),
                         [](const testing::TestParamInfo<forward_case>& i) { return i.param.name; });

}  // namespace
}  // namespace hotcold

namespace hotcold {
namespace {

// Dense Q4_0 files: model::load interleaves attention, gate, up and down sixteen rows at a time in its
// private copy. Every path over them — prompt batches of every size (the matrix products from 8
// tokens, the per-neuron path below), single tokens — must give the logits of the file's own row
// layout (load_options::interleave off), up to float summation order.
TEST(Forward, InterleavedDenseQ4_0GivesTheFileLayoutsLogits) {
  auto path = test::make_model("interleave_parity_q4_0", test::sparse_test_options(architecture::llama, activation::relu, tensor_type::q4_0));
  load_options plain_opts;
  plain_opts.interleave = false;
  auto interleaved = model::load(path);
  auto plain = model::load(path, plain_opts);
  ASSERT_TRUE(interleaved->weights().layers[0].ffn_gate.interleaved16);
  ASSERT_FALSE(plain->weights().layers[0].ffn_gate.interleaved16);
  const int64_t n_vocab = plain->hp().n_vocab;
  for (int64_t n : {1, 3, 9}) {
    std::vector<token_id> tokens;
    for (int64_t t = 0; t < n; ++t) tokens.push_back(static_cast<token_id>((5 + 7 * t) % n_vocab));
    inference_context a(interleaved, 64, 2), b(plain, 64, 2);
    const auto la = a.forward_batch(tokens, 0, true);
    const std::vector<float> got(la.begin(), la.end());
    const auto lb = b.forward_batch(tokens, 0, true);
    ASSERT_EQ(got.size(), lb.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], lb[i], 1e-3 * (1 + std::abs(lb[i]))) << n << " tokens, logit " << i;
    // And a token after the prompt, one at a time.
    const auto da = a.forward(11, n);
    const std::vector<float> next(da.begin(), da.end());
    const auto db = b.forward(11, n);
    for (size_t i = 0; i < next.size(); ++i) ASSERT_NEAR(next[i], db[i], 1e-3 * (1 + std::abs(db[i]))) << "after " << n << " tokens, logit " << i;
  }
}

}  // namespace
}  // namespace hotcold

namespace hotcold {
namespace {

double rel_rms(const std::vector<std::vector<float>>& got, const std::vector<vec>& want) {
  double num = 0, den = 0;
  for (size_t t = 0; t < want.size(); ++t)
    for (size_t i = 0; i < want[t].size(); ++i) {
      num += (got[t][i] - want[t][i]) * (got[t][i] - want[t][i]);
      den += want[t][i] * want[t][i];
    }
  return std::sqrt(num / den);
}

// Falcon-40B's layout: each layer has attn_norm and attn_norm_2, here with different weights and
// non-zero biases. llama.cpp and PowerInfer feed the attention from attn_norm_2 and the FFN from
// attn_norm; the dense file and its PowerInfer sparse file (predictor on the layer input) must
// compute that model, one token at a time and as a batch. Feeding the branches the other way
// round moves the logits by tens of percent.
TEST(Falcon40B, TwoNormsFeedTheirOwnBranches) {
  auto o = test::sparse_test_options(architecture::falcon, activation::relu, tensor_type::f32);
  o.n_head_kv = 2;  // grouped KV: gen-model writes the 40B layout
  o.norm_spread = 0.4;
  auto dense_path = test::make_model("falcon40b_two_norms", o);
  auto file = gguf::file::open(dense_path);
  ASSERT_TRUE(file.find_tensor("blk.0.attn_norm_2.weight"));
  const std::vector<token_id> tokens{1, 250, 17, 299, 3, 120};
  const auto want = naive(file).logits(tokens);

  auto dense = model::load(dense_path);
  {
    inference_context ctx(dense, 16, 2);
    std::vector<std::vector<float>> got;
    for (size_t i = 0; i < tokens.size(); ++i) {
      auto l = ctx.forward(tokens[i], static_cast<int64_t>(i));
      got.emplace_back(l.begin(), l.end());
    }
    EXPECT_LT(rel_rms(got, want), 1e-5) << "dense, one token at a time";
  }

  // PowerInfer's file: predictors read the layer's input; the mask each token's FFN ran with is
  // read back through the observer and given to the double computation.
  auto sparse_path = (test::scratch_dir() / "falcon40b_two_norms_pwri.gguf").string();
  tools::sparse_file_options so;
  so.kind = gguf::file_kind::powerinfer;
  tools::write_sparse_model(dense_path, sparse_path, test::random_predictors(o.n_layer, o.n_embd, o.n_ff, 32, 0.0f, 9), so);
  auto sparse = model::load(sparse_path);
  ASSERT_TRUE(sparse->has_predictors());
  EXPECT_EQ(sparse->hp().pred_input, predictor_input::layer_input);
  for (bool batch : {false, true}) {
    inference_context ctx(sparse, 16, 2);
    ctx.set_mode(ffn_mode::sparse);
    std::vector<std::vector<std::vector<bool>>> mask(tokens.size(), std::vector<std::vector<bool>>(static_cast<size_t>(o.n_layer)));
    std::vector<int64_t> seen(static_cast<size_t>(o.n_layer), 0);  // ffn_act calls per layer: token order
    int64_t chosen = 0;
    ctx.set_observer([&](std::string_view name, int64_t layer, std::span<const float> v) {
      if (name != "ffn_act") return;
      auto& m = mask[static_cast<size_t>(seen[static_cast<size_t>(layer)]++)][static_cast<size_t>(layer)];
      for (float x : v) m.push_back(x != 0.0f), chosen += x != 0.0f;
    });
    std::vector<std::vector<float>> got;
    if (batch) {
      auto all = ctx.forward_batch(tokens, 0, true);
      const size_t nv = all.size() / tokens.size();
      for (size_t t = 0; t < tokens.size(); ++t) got.emplace_back(all.begin() + t * nv, all.begin() + (t + 1) * nv);
    } else {
      for (size_t i = 0; i < tokens.size(); ++i) {
        auto l = ctx.forward(tokens[i], static_cast<int64_t>(i));
        got.emplace_back(l.begin(), l.end());
      }
    }
    const int64_t fired_dense = [&] {
      int64_t n = 0;
      inference_context d(dense, 16, 2);
      d.set_observer([&](std::string_view name, int64_t, std::span<const float> v) {
        if (name == "ffn_act") for (float x : v) n += x != 0.0f;
      });
      for (size_t i = 0; i < tokens.size(); ++i) d.forward(tokens[i], static_cast<int64_t>(i));
      return n;
    }();
    ASSERT_GT(chosen, 0);
    ASSERT_LT(chosen, fired_dense) << "the predictor left no neuron out: the sparse case would be the dense one";
    EXPECT_LT(rel_rms(got, naive(file).logits(tokens, &mask)), 1e-5) << (batch ? "sparse, as a batch" : "sparse, one token at a time");
  }
}

}  // namespace
}  // namespace hotcold
