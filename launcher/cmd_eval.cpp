// hotcold eval and hotcold perplexity: the logits of a text's positions, and its perplexity.
#include <algorithm>
#include <cmath>
#include <fstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "actors/pipeline.hpp"
#include "engine/embeddings.hpp"
#include "launcher/cmd_generate.hpp"
#include "launcher/commands.hpp"
#include "model/gguf.hpp"
#include "model/reference.hpp"

namespace hotcold::launcher {
namespace {

void write_stats_json(const std::string& path, const inference_context& ctx) {
  auto ratio = [](int64_t a, int64_t b) { return b > 0 ? static_cast<double>(a) / static_cast<double>(b) : 1.0; };
  auto fields = [&](const ffn_layer_stats& s) {
    return nlohmann::json{{"predictor_recall", ratio(s.active_computed, s.truly_active)},
                          {"predictor_precision", ratio(s.active_computed, s.computed)},
                          {"active_fraction", ratio(s.computed, s.neurons)},
                          {"true_active_fraction", ratio(s.truly_active, s.neurons)},
                          {"tokens", s.tokens}};
  };
  ffn_layer_stats all;
  nlohmann::json layers = nlohmann::json::array();
  for (size_t l = 0; l < ctx.stats().size(); ++l) {
    const auto& s = ctx.stats()[l];
    auto j = fields(s);
    j["layer"] = l;
    layers.push_back(j);
    all.neurons += s.neurons, all.computed += s.computed, all.truly_active += s.truly_active, all.active_computed += s.active_computed;
    all.tokens = s.tokens;
  }
  auto j = fields(all);
  j["mode"] = ffn_mode_name(ctx.mode());
  // A mixture of experts: how many of each layer's chosen experts the guess from the layer before had
  // (the zero-training expert predictor, docs/moe.md).
  const bool moe = ctx.get_model().hp().moe();
  int64_t chosen = 0, guessed = 0;
  for (size_t l = 0; moe && l < layers.size(); ++l) {
    const int64_t c = ctx.totals().experts_chosen[l], g = ctx.totals().experts_guessed[l];
    if (c > 0) layers[l]["expert_guess_recall"] = ratio(g, c);
    chosen += c, guessed += g;
  }
  if (moe) j["expert_guess_recall"] = ratio(guessed, chosen);
  j["layers"] = layers;
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out) throw std::system_error(errno, std::generic_category(), "cannot write " + path);
  if (moe)
    fmt::print(stderr, "hotcold: the next layer's router on this layer's output had {:.4f} of the experts each layer chose -> {}\n",
               j["expert_guess_recall"].get<double>(), path);
  else
    fmt::print(stderr, "hotcold: predictor recall {:.4f}, precision {:.4f}, active fraction {:.4f} -> {}\n", j["predictor_recall"].get<double>(),
               j["predictor_precision"].get<double>(), j["active_fraction"].get<double>(), path);
}

// eval --vs-oracle: the prompt's logits from model/reference (given the neurons this run chose, in
// sparse mode) against `got`, one row per position: relative RMS over all of them, the largest
// difference, and at how many positions the best token is the same (or ties the oracle's best).
void compare_with_oracle(const loaded& l, const std::vector<token_id>& tokens, const std::vector<std::vector<float>>& got, const std::string& json_path) {
  const auto& hp = l.m->hp();
  const int64_t T = static_cast<int64_t>(tokens.size());
  if (static_cast<int64_t>(got.size()) != T) throw std::runtime_error(fmt::format("{} positions of logits came back for {} tokens", got.size(), T));
  const auto t0 = std::chrono::steady_clock::now();
  const bool sparse = l.ctx->mode() == ffn_mode::sparse;
  std::vector<std::vector<std::vector<bool>>> mask;
  // A mixture of experts: the reference held to the experts this run's routers chose (a rounding
  // that tipped a near tie picks another expert, which is not an error).
  if (sparse) mask = l.trace->sequence_mask(T, hp.n_layer, hp.n_ff);
  else if (hp.moe()) mask = l.trace->sequence_mask(T, hp.n_layer, hp.n_expert);
  const auto file = gguf::file::open(l.m->path());
  const auto want = reference_model(file, l.ctx->cache_types(), l.ctx->n_ctx()).logits(tokens, sparse || hp.moe() ? &mask : nullptr);
  double num = 0, den = 0, max_abs = 0;
  int64_t same = 0;
  for (int64_t t = 0; t < T; ++t) {
    const auto& g = got[static_cast<size_t>(t)];
    const auto& w = want[static_cast<size_t>(t)];
    for (size_t i = 0; i < w.size(); ++i) {
      const double d = static_cast<double>(g[i]) - w[i];
      num += d * d, den += w[i] * w[i], max_abs = std::max(max_abs, std::fabs(d));
    }
    const double best = *std::max_element(w.begin(), w.end());
    const auto pick = static_cast<size_t>(std::max_element(g.begin(), g.end()) - g.begin());
    same += w[pick] >= best - 1e-6 * (1 + std::fabs(best));
  }
  const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  fmt::print(stderr, "hotcold: vs model/reference (double precision{}): relative RMS {:.3e} over {} positions x {} logits, largest difference {:.3e}; the same best "
                     "token at {} of {} positions ({:.1f} s)\n",
             sparse ? ", the neurons this run chose" : "", rel, T, hp.n_vocab, max_abs, same, T, seconds_since(t0));
  if (json_path.empty()) return;
  const nlohmann::json j{{"positions", T}, {"n_vocab", hp.n_vocab}, {"rel_rms", rel}, {"max_abs_diff", max_abs}, {"top1_same", same},
                         {"top1_agreement", static_cast<double>(same) / static_cast<double>(T)}, {"mode", sparse ? "sparse" : "dense"},
                         {"oracle_seconds", seconds_since(t0)}};
  std::ofstream out(json_path);
  out << j.dump(2) << "\n";
  if (!out) throw std::system_error(errno, std::generic_category(), "cannot write " + json_path);
}

// The prompt's logits, on the actors or the forward pass called directly, each row to `row` in
// position order.
void prompt_logits(loaded& l, const std::vector<token_id>& tokens, bool actors_pipeline, const std::function<void(std::span<const float>)>& row) {
  if (tokens.empty()) return;
  if (!actors_pipeline) {
    row(l.ctx->forward_batch(tokens, 0, true));
    return;
  }
  auto p = l.make_pipeline();
  actors::generation_request r;
  r.prompt = tokens;
  r.all_logits = true;
  r.cache_prompt = false;  // every position's logits, computed
  p->submit(std::move(r));
  for (;;) {  // logits arrive in position order
    auto ev = p->next();
    if (!ev) throw std::runtime_error("the pipeline stopped answering");
    if (auto* le = std::get_if<actors::logits_event>(&*ev)) row(std::span<const float>(le->logits.data(), static_cast<size_t>(le->logits.rows * le->logits.cols)));
    if (auto* d = std::get_if<actors::done_event>(&*ev)) {
      if (d->finish == "error") throw std::runtime_error(d->error);
      return;
    }
  }
}

}  // namespace

void run_eval(eval_args a) {
  const std::string text = a.from_file ? read_text_file(a.file) : a.prompt;
  const bool vs_oracle = a.vs_oracle || !a.oracle_json.empty();
  if (a.logits_out.empty() && a.stats_json.empty() && !vs_oracle)
    throw std::invalid_argument("give --logits-out FILE, --stats-json FILE or --vs-oracle (any of them, or several)");
  if (!a.stats_json.empty() && a.pipeline == "actors") throw std::invalid_argument("--stats-json counts on the direct pipeline: use --pipeline direct");
  a.m.record_choices = vs_oracle;
  auto l = load(a.m);
  if (!a.stats_json.empty()) l.ctx->enable_stats(true);
  auto tokens = l.m->vocabulary().tokenize(text, true, a.parse_special);
  check_fits(static_cast<int64_t>(tokens.size()), l.ctx->n_ctx());
  std::ofstream out;  // without --logits-out the logits are computed for the statistics only
  if (!a.logits_out.empty()) {
    out.open(a.logits_out, std::ios::binary | std::ios::trunc);
    if (!out) throw std::system_error(errno, std::generic_category(), "cannot write " + a.logits_out);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const auto n_vocab = static_cast<size_t>(l.m->hp().n_vocab);
  std::vector<std::vector<float>> kept;  // with --vs-oracle: every position's logits
  prompt_logits(l, tokens, a.pipeline == "actors", [&](std::span<const float> rows) {
    out.write(reinterpret_cast<const char*>(rows.data()), static_cast<std::streamsize>(rows.size_bytes()));
    if (vs_oracle)
      for (size_t at = 0; at + n_vocab <= rows.size(); at += n_vocab) kept.emplace_back(rows.begin() + static_cast<std::ptrdiff_t>(at), rows.begin() + static_cast<std::ptrdiff_t>(at + n_vocab));
  });
  if (!a.logits_out.empty()) {
    out.close();
    if (!out) throw std::system_error(errno, std::generic_category(), "cannot write " + a.logits_out);
  }
  fmt::print("{}\n", fmt::join(tokens, " "));
  fmt::print(stderr, "hotcold: {} positions x {} logits -> {} in {:.2f} s\n", tokens.size(), n_vocab, a.logits_out.empty() ? "(not written)" : a.logits_out,
             seconds_since(t0));
  if (!a.stats_json.empty()) write_stats_json(a.stats_json, *l.ctx);
  if (vs_oracle && !tokens.empty()) compare_with_oracle(l, tokens, kept, a.oracle_json);
  l.finish();
}

void run_embed(const embed_args& a) {
  const std::string text = a.from_file ? read_text_file(a.file) : a.prompt;
  auto l = load(a.m);
  const auto how = a.pooling.empty() ? default_pooling(*l.m) : pooling_from_name(a.pooling);
  if (!how) throw std::invalid_argument(fmt::format("--pooling {}: mean, last or cls", a.pooling));
  l.ctx->set_mode(ffn_mode::dense);  // every neuron: the model as its file means it
  std::vector<std::string> lines;
  if (!a.from_file) lines.push_back(text);
  for (size_t at = 0; a.from_file && at < text.size();) {
    const size_t end = std::min(text.find('\n', at), text.size());
    if (end > at) lines.push_back(text.substr(at, end - at));  // (empty lines: none)
    at = end + 1;
  }
  for (size_t i = 0; i < lines.size(); ++i) {
    const auto tokens = l.m->vocabulary().tokenize(lines[i], true, false);
    if (static_cast<int64_t>(tokens.size()) > l.ctx->n_ctx())
      throw std::invalid_argument(fmt::format("line {} is {} tokens; the context holds {} (-c)", i + 1, tokens.size(), l.ctx->n_ctx()));
    const auto e = pooled(l.ctx->hidden_states(tokens), static_cast<int64_t>(tokens.size()), l.m->hp().n_embd, *how);
    fmt::print("[{}]\n", fmt::join(e, ","));
  }
  fmt::print(stderr, "hotcold embed: {} texts, {} pooling, {} dimensions\n", lines.size(), pooling_name(*how), l.m->hp().n_embd);
  l.finish();
}

void run_perplexity(const perplexity_args& a) {
  const std::string text = read_text_file(a.file);
  auto l = load(a.m);
  const vocab& v = l.m->vocabulary();
  auto tokens = v.tokenize(text, false, false);
  const int64_t n_ctx = l.ctx->n_ctx();
  if (n_ctx < 4) throw std::invalid_argument("-c must be at least 4 for perplexity");
  const int64_t n_chunks = static_cast<int64_t>(tokens.size()) / n_ctx;
  if (n_chunks == 0) throw std::length_error(fmt::format("the text has {} tokens, fewer than one chunk of {} (lower -c)", tokens.size(), n_ctx));
  double nll = 0, nll2 = 0;
  int64_t count = 0;
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t n_vocab = l.m->hp().n_vocab;
  for (int64_t c = 0; c < n_chunks; ++c) {
    std::vector<token_id> chunk(tokens.begin() + c * n_ctx, tokens.begin() + (c + 1) * n_ctx);
    if (v.add_bos() && v.bos() != no_token) chunk[0] = v.bos();  // as llama.cpp's perplexity does
    auto all = l.ctx->forward_batch(std::span<const token_id>(chunk.data(), static_cast<size_t>(n_ctx - 1)), 0, true);
    for (int64_t i = n_ctx / 2; i + 1 < n_ctx; ++i) {  // the second half of each chunk is scored
      auto logits = all.subspan(static_cast<size_t>(i * n_vocab), static_cast<size_t>(n_vocab));
      const float max_l = *std::max_element(logits.begin(), logits.end());
      double sum = 0;
      for (float x : logits) sum += std::exp(double(x) - max_l);
      const double lp = double(logits[chunk[i + 1]]) - max_l - std::log(sum);
      nll -= lp;
      nll2 += lp * lp;
      ++count;
    }
    fmt::print("[{}]{:.4f}{}", c + 1, std::exp(nll / count), c + 1 < n_chunks ? "," : "\n");
    std::fflush(stdout);
  }
  const double mean = nll / count;
  const double var = nll2 / count - mean * mean;
  const double err = std::sqrt(std::max(var, 0.0) / std::max<int64_t>(1, count - 1));
  fmt::print("Final estimate: PPL = {:.4f} +/- {:.5f}\n", std::exp(mean), std::exp(mean) * err);
  fmt::print(stderr, "hotcold: {} chunks of {} tokens in {:.1f} s\n", n_chunks, n_ctx, seconds_since(t0));
  l.finish();
}

}  // namespace hotcold::launcher
