// hotcold bench [-m FILE] [--mode dense|sparse] [-p 128] [-n 64] [-t N] [-r 3] [--json]:
// prompt and decode speed, llama-bench style, with the bytes of weights read per decoded token.
#include <chrono>
#include <cmath>
#include <numeric>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "launcher/commands.hpp"
#include "launcher/model_options.hpp"

namespace hotcold::launcher {
namespace {

// Bytes of weights one decoded token reads: everything but the embedding table (one row of it),
// with each layer's FFN rows scaled by the fraction of neurons the FFN computed.
double bytes_per_token(const model& m, const std::vector<int64_t>& computed_before, const std::vector<int64_t>& computed_after, int64_t tokens) {
  const auto& w = m.weights();
  double bytes = static_cast<double>(m.weight_bytes()) - static_cast<double>(w.token_embd.bytes()) + static_cast<double>(w.token_embd.row_bytes);
  if (m.tied_output()) bytes += static_cast<double>(w.output.bytes());  // the head reads the whole table
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const auto& L = w.layers[l];
    double ffn = static_cast<double>(L.ffn_gate.bytes() + L.ffn_up.bytes() + L.ffn_down.bytes() + L.ffn_down_t.bytes());
    double fraction = static_cast<double>(computed_after[l] - computed_before[l]) / static_cast<double>(tokens * m.hp().n_ff);
    bytes -= ffn * (1.0 - fraction);
  }
  return bytes;
}

struct rate {
  double mean = 0, sd = 0;
};

rate summarize(const std::vector<double>& r) {
  rate s;
  s.mean = std::accumulate(r.begin(), r.end(), 0.0) / static_cast<double>(r.size());
  double var = 0;
  for (double x : r) var += (x - s.mean) * (x - s.mean);
  s.sd = r.size() > 1 ? std::sqrt(var / static_cast<double>(r.size() - 1)) : 0.0;
  return s;
}

}  // namespace

void add_bench_command(CLI::App& app, int& exit_code) {
  struct args {
    model_args m;
    int n_prompt = 128, n_gen = 64, reps = 3;
    bool json = false;
  };
  auto a = std::make_shared<args>();
  auto* cmd = app.add_subcommand("bench", "Measure prompt processing and decode speed (tokens/s, mean ± sd over repetitions)");
  add_model_options(cmd, a->m, false);
  cmd->add_option("-p,--n-prompt", a->n_prompt, "Prompt tokens (0: skip)")->capture_default_str();
  cmd->add_option("-n,--n-gen", a->n_gen, "Generated tokens (0: skip)")->capture_default_str();
  cmd->add_option("-r,--repetitions", a->reps, "Repetitions")->capture_default_str();
  cmd->add_flag("--json", a->json, "Print one JSON object instead of the table");
  cmd->callback([a, &exit_code] {
    exit_code = run_guarded("bench", [&] {
      if (a->reps < 1) throw std::invalid_argument("-r must be at least 1");
      auto l = load(a->m, std::max(1, a->n_prompt + a->n_gen));
      inference_context& ctx = *l.ctx;
      const model& m = *l.m;
      const auto& hp = m.hp();
      auto token_at = [&](int i) { return static_cast<token_id>((i * 7919 + 13) % hp.n_vocab); };
      // Decode: one token at a time; prefill: the prompt as batches.
      auto timed = [&](int n) {
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < n; ++i) ctx.forward(token_at(i), i);
        return n / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      };
      auto timed_prompt = [&](int n) {
        std::vector<token_id> prompt(static_cast<size_t>(n));
        for (int i = 0; i < n; ++i) prompt[static_cast<size_t>(i)] = token_at(i);
        auto t0 = std::chrono::steady_clock::now();
        ctx.forward_batch(prompt, 0);
        return n / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      };
      ctx.forward(1, 0);  // warm-up: first touch of every weight page
      rate pp, tg;
      double bpt = 0;
      if (a->n_prompt > 0) {
        std::vector<double> r;
        for (int i = 0; i < a->reps; ++i) r.push_back(timed_prompt(a->n_prompt));
        pp = summarize(r);
      }
      if (a->n_gen > 0) {
        std::vector<double> r;
        auto before = ctx.computed_neurons();
        for (int i = 0; i < a->reps; ++i) r.push_back(timed(a->n_gen));
        bpt = bytes_per_token(m, before, ctx.computed_neurons(), static_cast<int64_t>(a->n_gen) * a->reps);
        tg = summarize(r);
      }
      std::string mode = ctx.mode() == ffn_mode::sparse ? "sparse" : "dense";
      if (a->json) {
        nlohmann::json j{{"model", m.path()}, {"mode", mode}, {"threads", ctx.pool().size()}, {"model_bytes", m.weight_bytes()},
                         {"prefill_tokens_per_s", pp.mean}, {"prefill_tokens_per_s_sd", pp.sd}, {"n_prompt", a->n_prompt},
                         {"decode_tokens_per_s", tg.mean}, {"decode_tokens_per_s_sd", tg.sd}, {"n_gen", a->n_gen},
                         {"bytes_per_token", bpt}, {"repetitions", a->reps}};
        fmt::print("{}\n", j.dump(2));
        return;
      }
      fmt::print("| model | size | mode | threads | test | t/s | bytes/token |\n| --- | --- | --- | --- | --- | --- | --- |\n");
      std::string name = fmt::format("{} {} {}L {}", architecture_name(hp.arch), activation_name(hp.act), hp.n_layer, hp.n_embd);
      double gib = m.weight_bytes() / double(1ull << 30);
      if (a->n_prompt > 0)
        fmt::print("| {} | {:.2f} GiB | {} | {} | pp{} | {:.2f} ± {:.2f} | |\n", name, gib, mode, ctx.pool().size(), a->n_prompt, pp.mean, pp.sd);
      if (a->n_gen > 0)
        fmt::print("| {} | {:.2f} GiB | {} | {} | tg{} | {:.2f} ± {:.2f} | {:.1f} MiB |\n", name, gib, mode, ctx.pool().size(), a->n_gen, tg.mean,
                   tg.sd, bpt / double(1 << 20));
    });
  });
}

}  // namespace hotcold::launcher
