// Commands that run the model: run, eval, perplexity, chat.
#include <editline/readline.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "launcher/commands.hpp"
#include "launcher/default_model.hpp"
#include "launcher/model_options.hpp"
#include "launcher/option_checks.hpp"
#include "engine/forward.hpp"
#include "model/chat_template.hpp"
#include "model/gguf.hpp"
#include "model/reference.hpp"
#include "model/sampler.hpp"

namespace hotcold::launcher {
namespace {

using clock_type = std::chrono::steady_clock;
double seconds_since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

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
  j["mode"] = ctx.mode() == ffn_mode::sparse ? "sparse" : "dense";
  j["layers"] = layers;
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out) throw std::system_error(errno, std::generic_category(), "cannot write " + path);
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
  const auto t0 = clock_type::now();
  const bool sparse = l.ctx->mode() == ffn_mode::sparse;
  std::vector<std::vector<std::vector<bool>>> mask;
  if (sparse) mask = l.trace->sequence_mask(T, hp.n_layer, hp.n_ff);
  const auto file = gguf::file::open(l.m->path());
  const auto want = reference_model(file, l.ctx->kv_type(), l.ctx->n_ctx()).logits(tokens, sparse ? &mask : nullptr);
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

void check_fits(int64_t n_prompt, int64_t n_ctx) {
  if (n_prompt > n_ctx)
    throw std::length_error(fmt::format("the prompt has {} tokens, more than the context of {} (raise -c)", n_prompt, n_ctx));
}

struct sampling_args {
  int n_predict = 128;
  sampling_params p;
  bool seed_given = false;
  bool parse_special = false;
};

void add_sampling_options(CLI::App* cmd, sampling_args& s) {
  cmd->add_option("-n,--n-predict", s.n_predict, "Tokens to generate")->capture_default_str();
  cmd->add_option("--temp", s.p.temperature, "Temperature (<= 0: greedy; at most 100)")->capture_default_str();
  cmd->add_option("--top-k", s.p.top_k, "Top-k (<= 0: off)")->capture_default_str();
  cmd->add_option("--top-p", s.p.top_p, "Top-p (>= 1: off)")->capture_default_str();
  cmd->add_option("--min-p", s.p.min_p, "Min-p, 0..1 (0: off)")->capture_default_str();
  cmd->add_option("--repeat-penalty", s.p.repeat_penalty, "Repetition penalty, 0..100 (1: off)")->capture_default_str();
  cmd->add_option("--repeat-last-n", s.p.penalty_last_n, "Tokens the penalties look back on (-1: the whole context)")->capture_default_str();
  cmd->add_option("--frequency-penalty", s.p.frequency_penalty, "Frequency penalty (0: off)")->capture_default_str();
  cmd->add_option("--presence-penalty", s.p.presence_penalty, "Presence penalty (0: off)")->capture_default_str();
  cmd->add_option("--seed", s.p.seed, "Random seed (default: random, printed on stderr)");
  cmd->add_flag("--parse-special", s.parse_special, "Text of control tokens in the prompt (\"<s>\") becomes those tokens");
}

void finalize_seed(sampling_args& s, CLI::App* cmd) {
  check_sampling_flags(s.p);
  if (cmd->count("--seed") == 0) {
    s.p.seed = std::random_device{}();
    fmt::print(stderr, "hotcold: seed {}\n", s.p.seed);
  }
}

void write_piece(const std::string& piece) {
  std::fwrite(piece.data(), 1, piece.size(), stdout);
  std::fflush(stdout);
}

// Feeds `tokens` from position `pos`, returns the logits after the last one.
std::span<const float> feed(inference_context& ctx, const std::vector<token_id>& tokens, int64_t& pos) {
  auto logits = ctx.forward_batch(tokens, pos);
  pos += static_cast<int64_t>(tokens.size());
  return logits;
}

// Generates up to n tokens after `logits`, streaming their text; returns how many were generated
// (their ids appended to `out` when given).
int generate(inference_context& ctx, sampler& smp, std::span<const float> logits, int64_t& pos, int n, std::vector<token_id>* out = nullptr) {
  const vocab& v = ctx.get_model().vocabulary();
  int produced = 0;
  while (produced < n && pos < ctx.n_ctx()) {
    token_id next;
    {
      trace_scope span(ctx.trace(), stage::sample, ctx.steps() - 1, ctx.get_model().hp().n_layer);
      next = smp.sample(logits);
    }
    if (v.is_end_of_generation(next)) break;
    smp.accept(next);
    write_piece(v.piece(next));
    if (out) out->push_back(next);
    ++produced;
    if (pos >= ctx.n_ctx()) break;
    logits = ctx.forward(next, pos++);
  }
  return produced;
}

// Prints each token's text as the pipeline streams it; returns the request's end.
actors::done_event stream_until_done(actors::pipeline& p, const vocab& v) {
  for (;;) {
    auto ev = p.next();
    if (!ev) throw std::runtime_error("the pipeline stopped answering");
    if (auto* t = std::get_if<actors::token_event>(&*ev)) write_piece(v.piece(t->token));
    if (auto* d = std::get_if<actors::done_event>(&*ev)) {
      if (d->finish == "error") throw std::runtime_error(d->error);
      return *d;
    }
  }
}

}  // namespace

void add_generate_commands(CLI::App& app, int& exit_code) {
  // ---- run ----
  {
    struct args {
      model_args m;
      sampling_args s;
      std::string prompt;
      std::string pipeline = "actors";
    };
    auto a = std::make_shared<args>();
    auto* cmd = app.add_subcommand("run", "Generate text after a prompt, streaming only the generated text to stdout");
    add_model_options(cmd, a->m, false);
    add_pipeline_option(cmd, a->pipeline);
    cmd->add_option("-p,--prompt", a->prompt, "Prompt text")->required();
    add_sampling_options(cmd, a->s);
    cmd->callback([a, cmd, &exit_code] {
      exit_code = run_guarded("run", [&] {
        finalize_seed(a->s, cmd);
        auto l = load(a->m);
        const vocab& v = l.m->vocabulary();
        auto tokens = v.tokenize(a->prompt, true, a->s.parse_special);
        if (tokens.empty()) throw std::invalid_argument("the prompt is empty and the model adds no BOS token");
        check_fits(static_cast<int64_t>(tokens.size()), l.ctx->n_ctx());
        if (a->pipeline == "actors") {
          auto p = l.make_pipeline();
          actors::generation_request r;
          r.prompt = tokens;
          r.n_predict = a->s.n_predict;
          r.sampling = a->s.p;
          p->submit(std::move(r));
          auto d = stream_until_done(*p, v);
          fmt::print("\n");
          const double t_gen = d.total_s - d.time_to_first_token_s;
          fmt::print(stderr, "hotcold: prompt {} tokens, first token after {:.0f} ms; generated {} tokens in {:.0f} ms ({:.1f} tok/s after the first)\n",
                     d.prompt_tokens, 1000 * d.time_to_first_token_s, d.generated_tokens, 1000 * d.total_s,
                     d.generated_tokens > 1 ? (d.generated_tokens - 1) / std::max(t_gen, 1e-9) : 0.0);
          p.reset();
          l.finish();
          return;
        }
        sampler smp(a->s.p);
        for (token_id t : tokens) smp.accept(t);
        int64_t pos = 0;
        auto t0 = clock_type::now();
        auto logits = feed(*l.ctx, tokens, pos);
        double t_prompt = seconds_since(t0);
        auto t1 = clock_type::now();
        int n = generate(*l.ctx, smp, logits, pos, a->s.n_predict);
        double t_gen = seconds_since(t1);
        fmt::print("\n");
        fmt::print(stderr, "hotcold: prompt {} tokens in {:.0f} ms ({:.1f} tok/s); generated {} tokens in {:.0f} ms ({:.1f} tok/s)\n",
                   tokens.size(), 1000 * t_prompt, tokens.size() / std::max(t_prompt, 1e-9), n, 1000 * t_gen,
                   n / std::max(t_gen, 1e-9));
        l.finish();
      });
    });
  }

  // ---- eval ----
  {
    struct args {
      model_args m;
      std::string prompt, file, logits_out, stats_json, oracle_json;
      bool parse_special = false, vs_oracle = false;
      std::string pipeline = "reference";
    };
    auto a = std::make_shared<args>();
    auto* cmd = app.add_subcommand("eval", "Write the logits of every prompt position as float32 [n_tokens x n_vocab]; print the prompt's ids");
    add_model_options(cmd, a->m, true);
    add_pipeline_option(cmd, a->pipeline);
    auto* p = cmd->add_option("-p,--prompt", a->prompt, "Prompt text");
    auto* f = cmd->add_option("-f,--file", a->file, "File whose text is the prompt");
    p->excludes(f);
    cmd->add_option("--logits-out", a->logits_out, "Output file of float32 little-endian logits (needed unless --stats-json)");
    cmd->add_flag("--parse-special", a->parse_special, "Text of control tokens becomes those tokens");
    cmd->add_option("--stats-json", a->stats_json, "Write predictor recall, precision and active fraction (overall and per layer)");
    cmd->add_flag("--vs-oracle", a->vs_oracle,
                  "Also compute the prompt's logits with model/reference (double precision, single-threaded: slow on large files), given the "
                  "neurons this run chose, and print how far apart they are (relative RMS, largest difference, top-1 agreement)");
    cmd->add_option("--oracle-json", a->oracle_json, "With --vs-oracle: write those figures as JSON (implies --vs-oracle)");
    cmd->callback([a, p, f, &exit_code] {
      exit_code = run_guarded("eval", [&] {
        if (p->count() + f->count() != 1) throw std::invalid_argument("give the text with exactly one of -p TEXT or -f FILE");
        std::string text = f->count() ? read_text_file(a->file) : a->prompt;
        const bool vs_oracle = a->vs_oracle || !a->oracle_json.empty();
        if (a->logits_out.empty() && a->stats_json.empty() && !vs_oracle)
          throw std::invalid_argument("give --logits-out FILE, --stats-json FILE or --vs-oracle (any of them, or several)");
        if (!a->stats_json.empty() && a->pipeline == "actors")
          throw std::invalid_argument("--stats-json counts on the reference pipeline: use --pipeline reference");
        a->m.record_choices = vs_oracle;
        auto l = load(a->m);
        if (!a->stats_json.empty()) l.ctx->enable_stats(true);
        auto tokens = l.m->vocabulary().tokenize(text, true, a->parse_special);
        check_fits(static_cast<int64_t>(tokens.size()), l.ctx->n_ctx());
        std::ofstream out;  // without --logits-out the logits are computed for the statistics only
        if (!a->logits_out.empty()) {
          out.open(a->logits_out, std::ios::binary | std::ios::trunc);
          if (!out) throw std::system_error(errno, std::generic_category(), "cannot write " + a->logits_out);
        }
        auto t0 = clock_type::now();
        const int64_t n_vocab = l.m->hp().n_vocab;
        std::vector<std::vector<float>> kept;  // with --vs-oracle: every position's logits
        auto keep = [&](std::span<const float> rows) {
          if (!vs_oracle) return;
          for (size_t at = 0; at + static_cast<size_t>(n_vocab) <= rows.size(); at += static_cast<size_t>(n_vocab))
            kept.emplace_back(rows.begin() + static_cast<std::ptrdiff_t>(at), rows.begin() + static_cast<std::ptrdiff_t>(at) + n_vocab);
        };
        if (!tokens.empty() && a->pipeline == "actors") {
          auto p = l.make_pipeline();
          actors::generation_request r;
          r.prompt = tokens;
          r.all_logits = true;
          p->submit(std::move(r));
          for (;;) {  // logits arrive in position order
            auto ev = p->next();
            if (!ev) throw std::runtime_error("the pipeline stopped answering");
            if (auto* le = std::get_if<actors::logits_event>(&*ev)) {
              out.write(reinterpret_cast<const char*>(le->logits.data()), static_cast<std::streamsize>(le->logits.rows * le->logits.cols * 4));
              keep(std::span<const float>(le->logits.data(), static_cast<size_t>(le->logits.rows * le->logits.cols)));
            }
            if (auto* d = std::get_if<actors::done_event>(&*ev)) {
              if (d->finish == "error") throw std::runtime_error(d->error);
              break;
            }
          }
        } else if (!tokens.empty()) {
          auto logits = l.ctx->forward_batch(tokens, 0, true);
          out.write(reinterpret_cast<const char*>(logits.data()), static_cast<std::streamsize>(logits.size_bytes()));
          keep(logits);
        }
        if (!a->logits_out.empty()) {
          out.close();
          if (!out) throw std::system_error(errno, std::generic_category(), "cannot write " + a->logits_out);
        }
        std::string ids;
        for (size_t i = 0; i < tokens.size(); ++i) ids += (i ? " " : "") + std::to_string(tokens[i]);
        fmt::print("{}\n", ids);
        fmt::print(stderr, "hotcold: {} positions x {} logits -> {} in {:.2f} s\n", tokens.size(), l.m->hp().n_vocab,
                   a->logits_out.empty() ? "(not written)" : a->logits_out, seconds_since(t0));
        if (!a->stats_json.empty()) write_stats_json(a->stats_json, *l.ctx);
        if (vs_oracle && !tokens.empty()) compare_with_oracle(l, tokens, kept, a->oracle_json);
        l.finish();
      });
    });
  }

  // ---- perplexity ----
  {
    struct args {
      model_args m;
      std::string file;
    };
    auto a = std::make_shared<args>();
    a->m.ctx = 256;
    auto* cmd = app.add_subcommand("perplexity", "Perplexity of a text, in chunks of the context length (second half of each chunk scored)");
    add_model_options(cmd, a->m, true);
    cmd->add_option("-f,--file", a->file, "Text file")->required();
    cmd->callback([a, &exit_code] {
      exit_code = run_guarded("perplexity", [&] {
        std::string text = read_text_file(a->file);
        auto l = load(a->m);
        const vocab& v = l.m->vocabulary();
        auto tokens = v.tokenize(text, false, false);
        const int64_t n_ctx = l.ctx->n_ctx();
        if (n_ctx < 4) throw std::invalid_argument("-c must be at least 4 for perplexity");
        int64_t n_chunks = static_cast<int64_t>(tokens.size()) / n_ctx;
        if (n_chunks == 0)
          throw std::length_error(fmt::format("the text has {} tokens, fewer than one chunk of {} (lower -c)", tokens.size(), n_ctx));
        double nll = 0, nll2 = 0;
        int64_t count = 0;
        auto t0 = clock_type::now();
        for (int64_t c = 0; c < n_chunks; ++c) {
          std::vector<token_id> chunk(tokens.begin() + c * n_ctx, tokens.begin() + (c + 1) * n_ctx);
          if (v.add_bos() && v.bos() != no_token) chunk[0] = v.bos();  // as llama.cpp's perplexity does
          auto all = l.ctx->forward_batch(std::span<const token_id>(chunk.data(), static_cast<size_t>(n_ctx - 1)), 0, true);
          const int64_t n_vocab = l.m->hp().n_vocab;
          for (int64_t i = n_ctx / 2; i + 1 < n_ctx; ++i) {
            auto logits = all.subspan(static_cast<size_t>(i * n_vocab), static_cast<size_t>(n_vocab));
            float max_l = *std::max_element(logits.begin(), logits.end());
            double sum = 0;
            for (float x : logits) sum += std::exp(double(x) - max_l);
            double lp = double(logits[chunk[i + 1]]) - max_l - std::log(sum);
            nll -= lp;
            nll2 += lp * lp;
            ++count;
          }
          fmt::print("[{}]{:.4f}{}", c + 1, std::exp(nll / count), c + 1 < n_chunks ? "," : "\n");
          std::fflush(stdout);
        }
        double mean = nll / count;
        double var = nll2 / count - mean * mean;
        double err = std::sqrt(std::max(var, 0.0) / std::max<int64_t>(1, count - 1));
        fmt::print("Final estimate: PPL = {:.4f} +/- {:.5f}\n", std::exp(mean), std::exp(mean) * err);
        fmt::print(stderr, "hotcold: {} chunks of {} tokens in {:.1f} s\n", n_chunks, n_ctx, seconds_since(t0));
        l.finish();
      });
    });
  }

  // ---- chat ----
  {
    struct args {
      model_args m;
      sampling_args s;
      std::string chat_template, system;
    };
    auto a = std::make_shared<args>();
    auto* cmd = app.add_subcommand("chat", "Interactive: each line you type is a user turn of the conversation, written with the model's chat template, and the model answers it");
    add_model_options(cmd, a->m, false);
    add_sampling_options(cmd, a->s);
    cmd->add_option("--chat-template", a->chat_template, "Chat template family instead of the model's own (" + chat_template::names() + ")");
    cmd->add_option("--system", a->system, "A system message to start the conversation with");
    cmd->callback([a, cmd, &exit_code] {
      exit_code = run_guarded("chat", [&] {
        finalize_seed(a->s, cmd);
        auto l = load(a->m);
        const vocab& v = l.m->vocabulary();
        std::string note;
        const chat_template tmpl = chat_template::choose(l.m->chat_template_text(), a->chat_template, &note);
        if (!note.empty()) fmt::print(stderr, "hotcold chat: {}\n", note);
        sampler smp(a->s.p);
        std::vector<chat_message> conversation;
        if (!a->system.empty()) conversation.push_back({"system", a->system});
        // The tokens the context holds: each turn the whole conversation is written again with the
        // template and only what differs from them is computed (the new user turn, and whatever the
        // template writes around the last reply).
        std::vector<token_id> held;
        fmt::print(stderr, "hotcold chat: {} template; type a line and press Enter; Ctrl-D ends.\n", tmpl.name());
        for (;;) {
          char* line = readline("> ");
          if (!line) break;
          std::string text = line;
          std::free(line);
          if (!text.empty()) add_history(text.c_str());
          conversation.push_back({"user", text});
          const std::vector<token_id> tokens = tmpl.tokenize(v, conversation, true);
          if (static_cast<int64_t>(tokens.size()) >= l.ctx->n_ctx()) {
            fmt::print(stderr, "hotcold chat: the context is full ({} tokens); start a new chat\n", l.ctx->n_ctx());
            break;
          }
          // (At least the last token is computed again: its logits start the reply.)
          const size_t same = std::min<size_t>(std::mismatch(held.begin(), held.end(), tokens.begin(), tokens.end()).first - held.begin(), tokens.size() - 1);
          const std::vector<token_id> fresh(tokens.begin() + static_cast<std::ptrdiff_t>(same), tokens.end());
          for (token_id t : fresh) smp.accept(t);
          int64_t pos = static_cast<int64_t>(same);
          auto logits = feed(*l.ctx, fresh, pos);
          std::vector<token_id> reply;
          generate(*l.ctx, smp, logits, pos, a->s.n_predict, &reply);
          held = tokens;
          held.insert(held.end(), reply.begin(), reply.end());
          conversation.push_back({"assistant", v.detokenize(reply)});
          fmt::print("\n");
        }
        l.finish();
      });
    });
  }
}

}  // namespace hotcold::launcher
