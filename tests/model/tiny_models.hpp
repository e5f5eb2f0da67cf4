#pragma once
// Small generated models for tests: a tiny SentencePiece vocabulary and gen-model files in a
// temporary folder, made once per test binary.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <random>
#include <string>

#include "engine/forward.hpp"
#include "model/gguf_writer.hpp"
#include "model/placement_file.hpp"
#include "tools/gen_model.hpp"
#include "tools/sparse_file.hpp"

namespace hotcold::test {

inline std::filesystem::path scratch_dir() {
  struct owned_dir {
    std::filesystem::path path;
    owned_dir() : path(std::filesystem::temp_directory_path() / ("hotcold-test-" + std::to_string(::getpid()))) {
      std::filesystem::create_directories(path);
    }
    ~owned_dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static const owned_dir dir;
  return dir.path;
}

// A SentencePiece vocabulary's first 259 entries: <unk> <s> </s> and the byte tokens <0x00>..<0xFF>.
inline void spm_base_tokens(std::vector<std::string>& tokens, std::vector<float>& scores, std::vector<int32_t>& types) {
  tokens = {"<unk>", "<s>", "</s>"};
  scores = {0, 0, 0};
  types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    tokens.push_back(buf);
    scores.push_back(0);
    types.push_back(6);
  }
}

// The base tokens and a few scored pieces: 300 tokens.
inline std::string tiny_vocab() {
  auto path = (scratch_dir() / "tiny-vocab.gguf").string();
  if (std::filesystem::exists(path)) return path;
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  spm_base_tokens(tokens, scores, types);
  const char* pieces[] = {"▁", "e", "t", "a", "o", "n", "▁t", "he", "▁the", "▁a", "in", "er", "an", "▁o", "re", "on",
                          "▁s", "at", "en", "▁w", "is", "it", "▁c", "es", "or", "▁b", "▁f", "ed", "▁m", "nd", "▁p", "ing",
                          "▁in", "ar", "al", "le", "▁d", "ou", "ic", "▁to", "▁h"};
  float s = -1;
  for (const char* p : pieces) {
    tokens.push_back(p);
    scores.push_back(s -= 0.25f);
    types.push_back(1);
  }
  gguf::writer w;
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_strings("tokenizer.ggml.tokens", tokens);
  w.set_array("tokenizer.ggml.scores", std::span<const float>(scores));
  w.set_array("tokenizer.ggml.token_type", std::span<const int32_t>(types));
  w.set_u32("tokenizer.ggml.bos_token_id", 1);
  w.set_u32("tokenizer.ggml.eos_token_id", 2);
  w.write(path);
  return path;
}

// The smallest useful llama: embd 64, 4 heads, ffn 128 (callers change what their test is about).
inline tools::gen_model_options small_options(int64_t n_layer, int64_t n_head_kv = 4) {
  tools::gen_model_options o;
  o.n_embd = 64;
  o.n_ff = 128;
  o.n_layer = n_layer;
  o.n_head = 4;
  o.n_head_kv = n_head_kv;
  return o;
}

// The small two-layer model the sparse-path suites turn into sparse files (embd 64, ffn 256, 15% active).
inline tools::gen_model_options sparse_test_options(architecture arch, activation act, tensor_type type) {
  tools::gen_model_options o;
  o.arch = arch;
  o.act = act;
  o.type = type;
  o.n_embd = 64;
  o.n_ff = 256;
  o.n_layer = 2;
  o.n_head = 4;
  o.n_head_kv = arch == architecture::falcon ? 1 : 2;
  o.active = 0.15;
  return o;
}

inline std::string make_model(const std::string& name, tools::gen_model_options o) {
  auto path = (scratch_dir() / (name + ".gguf")).string();
  if (std::filesystem::exists(path)) return path;
  if (o.vocab_path.empty()) o.vocab_path = tiny_vocab();
  o.out_path = path;
  tools::generate_model(o);
  return path;
}

// Random low-rank predictors (entries N(0, 0.3^2)) with one threshold for every layer.
inline std::vector<tools::layer_predictor> random_predictors(int64_t n_layer, int64_t n_embd, int64_t n_ff, int64_t rank, float threshold,
                                                      uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.3f);
  std::vector<tools::layer_predictor> ps(static_cast<size_t>(n_layer));
  for (auto& p : ps) {
    p.rank = rank;
    p.threshold = threshold;
    p.fc1.resize(static_cast<size_t>(rank * n_embd));
    p.fc2.resize(static_cast<size_t>(n_ff * rank));
    for (auto& x : p.fc1) x = d(rng);
    for (auto& x : p.fc2) x = d(rng);
  }
  return ps;
}

// Logits of six fixed tokens, one forward() each (optionally through an FFN executor). The KV cache
// is F32: paths that sum in different orders are compared within 1e-5, and a half's rounding that
// flips between them would be larger than that.
inline std::vector<std::vector<float>> logits_of(std::shared_ptr<const model> m, ffn_mode mode, int threads = 2,
                                                 std::shared_ptr<ffn_executor> executor = nullptr) {
  inference_context ctx(m, 16, threads, 1, tensor_type::f32);
  ctx.set_mode(mode);
  ctx.set_ffn_executor(std::move(executor));
  std::vector<std::vector<float>> out;
  const token_id tokens[] = {1, 250, 17, 299, 3, 120};
  for (int i = 0; i < 6; ++i) {
    auto l = ctx.forward(tokens[i], i);
    out.emplace_back(l.begin(), l.end());
  }
  return out;
}

// Every position's logits of `tokens` run through ctx from position 0: one forward() a token, or
// (batch) one forward_batch for all of them.
inline std::vector<std::vector<float>> run_tokens(inference_context& ctx, const std::vector<token_id>& tokens, bool batch) {
  std::vector<std::vector<float>> out;
  if (batch) {
    auto all = ctx.forward_batch(tokens, 0, true);
    const size_t nv = all.size() / tokens.size();
    for (size_t t = 0; t < tokens.size(); ++t) out.emplace_back(all.begin() + static_cast<std::ptrdiff_t>(t * nv), all.begin() + static_cast<std::ptrdiff_t>((t + 1) * nv));
  } else {
    for (size_t t = 0; t < tokens.size(); ++t) {
      auto l = ctx.forward(tokens[t], static_cast<int64_t>(t));
      out.emplace_back(l.begin(), l.end());
    }
  }
  return out;
}

// The tokens logits_of runs.
inline const std::vector<token_id>& logits_of_tokens() {
  static const std::vector<token_id> t = {1, 250, 17, 299, 3, 120};
  return t;
}

// From now on, the neurons each token's FFN computes with a nonzero value as `ctx` runs `tokens`
// tokens, into `mask` ([token][layer][neuron], tokens in the order they run): model/reference's
// neuron mask for what a sparse path chose (a chosen neuron that did not fire adds nothing either
// way). `chosen` (when given) counts them. `mask` (and `chosen`) must outlive the runs.
inline void record_neuron_mask(inference_context& ctx, size_t tokens, std::vector<std::vector<std::vector<bool>>>& mask, int64_t* chosen = nullptr) {
  const auto n_layer = static_cast<size_t>(ctx.get_model().hp().n_layer);
  mask.assign(tokens, std::vector<std::vector<bool>>(n_layer));
  auto seen = std::make_shared<std::vector<size_t>>(n_layer, 0);  // ffn_act calls per layer come in token order
  ctx.set_observer([&mask, seen, chosen](std::string_view name, int64_t layer, std::span<const float> v) {
    if (name != "ffn_act") return;
    auto& row = mask[(*seen)[static_cast<size_t>(layer)]++][static_cast<size_t>(layer)];
    for (float x : v) {
      row.push_back(x != 0.0f);
      if (chosen) *chosen += x != 0.0f;
    }
  });
}

// logits_of, and record_neuron_mask's mask of those tokens.
inline std::vector<std::vector<float>> logits_and_mask_of(std::shared_ptr<const model> m, ffn_mode mode, std::shared_ptr<ffn_executor> executor,
                                                          std::vector<std::vector<std::vector<bool>>>& mask) {
  inference_context ctx(m, 16, 2);
  ctx.set_mode(mode);
  ctx.set_ffn_executor(std::move(executor));
  const auto& tokens = logits_of_tokens();
  record_neuron_mask(ctx, tokens.size(), mask);
  std::vector<std::vector<float>> out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    auto l = ctx.forward(tokens[i], static_cast<int64_t>(i));
    out.emplace_back(l.begin(), l.end());
  }
  return out;
}

// A placement that splits every layer: every third neuron hot (offset by the layer).
inline placement_data every_third_hot(int64_t n_layer, int64_t n_ff) {
  placement_data p;
  for (int64_t l = 0; l < n_layer; ++l) {
    p.hot.emplace_back();
    for (int64_t i = l % 3; i < n_ff; i += 3) p.hot.back().push_back(static_cast<int32_t>(i));
  }
  return p;
}

// How far float-row logits may be from model/reference's when both keep an F16 KV cache: a key
// computed in float and in double now and then rounds to neighbouring halves (2.5e-5; without the
// cache's rounding, 1e-5 holds, and the two references are further apart than this).
inline constexpr double f16_kv_tolerance = 2.5e-5;

// sqrt(sum (a - b)^2 / sum b^2) over all rows (float or double rows: model/reference's are double).
template <class A, class B>
double rel_diff(const std::vector<std::vector<A>>& a, const std::vector<std::vector<B>>& b) {
  double num = 0, den = 0;
  for (size_t t = 0; t < a.size(); ++t)
    for (size_t i = 0; i < a[t].size(); ++i) {
      const double d = static_cast<double>(a[t][i]) - static_cast<double>(b[t][i]);
      num += d * d;
      den += static_cast<double>(b[t][i]) * static_cast<double>(b[t][i]);
    }
  return std::sqrt(num / den);
}
inline double rel_diff(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) { return rel_diff<float, float>(a, b); }

}  // namespace hotcold::test
