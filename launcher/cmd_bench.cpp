// hotcold bench [-m FILE] [--mode dense|sparse] [-p 128] [-n 64] [-t N] [-r 3] [--json] [--vs-dense]:
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
    int n_prompt = 128, n_gen = 64, reps = 3, parallel = 1;
    bool json = false, vs_dense = false;
  };
  auto a = std::make_shared<args>();
  auto* cmd = app.add_subcommand("bench", "Measure prompt processing and decode speed (tokens/s, mean ± sd over repetitions)");
  add_model_options(cmd, a->m, false);
  cmd->add_option("-p,--n-prompt", a->n_prompt, "Prompt tokens (0: skip)")->capture_default_str();
  cmd->add_option("-n,--n-gen", a->n_gen, "Generated tokens (0: skip)")->capture_default_str();
  cmd->add_option("-r,--repetitions", a->reps, "Repetitions")->capture_default_str();
  cmd->add_option("--parallel", a->parallel, "Sequences decoded at once, one step for all (decode_tokens_per_s is their sum)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_flag("--json", a->json, "Print one JSON object instead of the table");
  cmd->add_flag("--vs-dense", a->vs_dense, "Also measure dense mode on the same file, repetitions interleaved, and print the ratio");
  cmd->callback([a, &exit_code] {
    exit_code = run_guarded("bench", [&] {
      if (a->reps < 1) throw std::invalid_argument("-r must be at least 1");
      auto l = load(a->m, std::max(1, a->n_prompt + a->n_gen), a->parallel);
      const int K = a->parallel;
      inference_context& ctx = *l.ctx;
      const model& m = *l.m;
      const auto& hp = m.hp();
      auto token_at = [&](int i) { return static_cast<token_id>((i * 7919 + 13) % hp.n_vocab); };
      // Decode: one token at a time; prefill: the prompt as batches.
      // With --parallel K, K sequences (slots 0..K-1) advance one step at a time, all in one batch.
      std::vector<int64_t> slots(static_cast<size_t>(K)), positions(static_cast<size_t>(K));
      std::vector<token_id> step_tokens(static_cast<size_t>(K));
      for (int s = 0; s < K; ++s) slots[static_cast<size_t>(s)] = s;
      auto timed = [&](int n) {
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < n; ++i) {
          if (K == 1) {
            ctx.forward(token_at(i), i);
            continue;
          }
          for (int s = 0; s < K; ++s) step_tokens[static_cast<size_t>(s)] = token_at(i + 101 * s), positions[static_cast<size_t>(s)] = i;
          ctx.forward_step(step_tokens, slots, positions);
        }
        return static_cast<double>(n) * K / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      };
      auto timed_prompt = [&](int n) {
        std::vector<token_id> prompt(static_cast<size_t>(n));
        for (int i = 0; i < n; ++i) prompt[static_cast<size_t>(i)] = token_at(i);
        auto t0 = std::chrono::steady_clock::now();
        ctx.forward_batch(prompt, 0);
        return n / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      };
      ctx.forward(1, 0);  // warm-up: first touch of every weight page
      // The modes measured: the chosen one, and with --vs-dense also dense on the same loaded model,
      // repetitions interleaved so both see the same machine.
      std::vector<ffn_mode> modes{ctx.mode()};
      if (a->vs_dense && ctx.mode() != ffn_mode::dense) modes.push_back(ffn_mode::dense);
      struct result {
        rate pp, tg;
        double bpt = 0;
      };
      std::vector<result> results(modes.size());
      std::vector<std::vector<double>> pp_runs(modes.size()), tg_runs(modes.size());
      std::vector<int64_t> tokens_run(modes.size(), 0);
      std::vector<std::vector<int64_t>> computed(modes.size(), std::vector<int64_t>(static_cast<size_t>(hp.n_layer), 0));
      for (int i = 0; i < a->reps; ++i)
        for (size_t k = 0; k < modes.size(); ++k) {
          ctx.set_mode(modes[k]);
          if (a->n_prompt > 0) pp_runs[k].push_back(timed_prompt(a->n_prompt));
          if (a->n_gen > 0) {
            auto before = ctx.read_neurons();
            tg_runs[k].push_back(timed(a->n_gen));
            for (int64_t l = 0; l < hp.n_layer; ++l) computed[k][static_cast<size_t>(l)] += ctx.read_neurons()[static_cast<size_t>(l)] - before[static_cast<size_t>(l)];
            tokens_run[k] += a->n_gen;
          }
        }
      for (size_t k = 0; k < modes.size(); ++k) {
        if (a->n_prompt > 0) results[k].pp = summarize(pp_runs[k]);
        if (a->n_gen > 0) {
          results[k].tg = summarize(tg_runs[k]);
          // Weights read per step (each row of a step's union once), shared by its K tokens.
          results[k].bpt = bytes_per_token(m, std::vector<int64_t>(static_cast<size_t>(hp.n_layer), 0), computed[k], tokens_run[k]) / K;
        }
      }
      auto mode_name = [](ffn_mode md) { return md == ffn_mode::sparse ? "sparse" : "dense"; };
      if (a->json) {
        auto describe = [&](size_t k) {
          return nlohmann::json{{"model", m.path()}, {"mode", mode_name(modes[k])}, {"threads", ctx.pool().size()}, {"model_bytes", m.weight_bytes()},
                                {"prefill_tokens_per_s", results[k].pp.mean}, {"prefill_tokens_per_s_sd", results[k].pp.sd}, {"n_prompt", a->n_prompt},
                                {"decode_tokens_per_s", results[k].tg.mean}, {"decode_tokens_per_s_sd", results[k].tg.sd}, {"n_gen", a->n_gen},
                                {"bytes_per_token", results[k].bpt}, {"repetitions", a->reps}, {"parallel", K}};
        };
        nlohmann::json j = describe(0);
        if (modes.size() > 1) {
          j["dense"] = describe(1);
          if (results[1].tg.mean > 0) j["decode_speedup_vs_dense"] = results[0].tg.mean / results[1].tg.mean;
          if (results[1].pp.mean > 0) j["prefill_speedup_vs_dense"] = results[0].pp.mean / results[1].pp.mean;
        }
        fmt::print("{}\n", j.dump(2));
        l.finish();
        return;
      }
      fmt::print("| model | size | mode | threads | test | t/s | bytes/token |\n| --- | --- | --- | --- | --- | --- | --- |\n");
      std::string name = fmt::format("{} {} {}L {}", architecture_name(hp.arch), activation_name(hp.act), hp.n_layer, hp.n_embd);
      double gib = m.weight_bytes() / double(1ull << 30);
      for (size_t k = 0; k < modes.size(); ++k) {
        const auto& r = results[k];
        if (a->n_prompt > 0)
          fmt::print("| {} | {:.2f} GiB | {} | {} | pp{} | {:.2f} ± {:.2f} | |\n", name, gib, mode_name(modes[k]), ctx.pool().size(), a->n_prompt, r.pp.mean, r.pp.sd);
        if (a->n_gen > 0)
          fmt::print("| {} | {:.2f} GiB | {} | {} | tg{}{} | {:.2f} ± {:.2f} | {:.1f} MiB |\n", name, gib, mode_name(modes[k]), ctx.pool().size(), a->n_gen,
                     K > 1 ? fmt::format(" x{}", K) : "", r.tg.mean, r.tg.sd, r.bpt / double(1 << 20));
      }
      if (modes.size() > 1 && a->n_gen > 0 && results[1].tg.mean > 0)
        fmt::print("\nsparse vs dense, same file, interleaved: decode {:.2f}x{}\n", results[0].tg.mean / results[1].tg.mean,
                   a->n_prompt > 0 && results[1].pp.mean > 0 ? fmt::format(", prefill {:.2f}x", results[0].pp.mean / results[1].pp.mean) : "");
      l.finish();
    });
  });
}

}  // namespace hotcold::launcher
