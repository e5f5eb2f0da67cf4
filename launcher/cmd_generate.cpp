// hotcold run and hotcold chat: text after a prompt, and a conversation; and the options of run,
// eval, perplexity and chat.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <random>

#include <fmt/format.h>

#include "actors/pipeline.hpp"
#include "launcher/cmd_generate.hpp"
#include "launcher/commands.hpp"
#include "launcher/direct_generation.hpp"
#include "launcher/option_checks.hpp"
#include "model/chat_template.hpp"
#include "model/grammar.hpp"
#include "model/json_schema.hpp"

namespace hotcold::launcher {

double seconds_since(std::chrono::steady_clock::time_point t0) { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); }

void check_fits(int64_t n_prompt, int64_t n_ctx) {
  if (n_prompt > n_ctx)
    throw std::length_error(fmt::format("the prompt has {} tokens, more than the context of {} (raise -c)", n_prompt, n_ctx));
}

int64_t tokens_to_generate(int64_t n_predict, int64_t n_ctx, int64_t n_prompt, bool context_shift) {
  if (n_predict >= 0) return n_predict;
  return context_shift ? std::numeric_limits<int32_t>::max() : std::max<int64_t>(0, n_ctx - n_prompt);  // (shifting: until the end of the text)
}

std::string grammar_of(const grammar_args& g) {
  auto read = [](const std::string& path, const char* flag) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::invalid_argument(fmt::format("{} {}: cannot be read", flag, path));
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  const std::string gbnf = g.grammar_file.empty() ? g.grammar : read(g.grammar_file, "--grammar-file");
  const std::string schema = g.json_schema_file.empty() ? g.json_schema : read(g.json_schema_file, "--json-schema-file");
  const std::string where = !g.grammar_file.empty() ? "--grammar-file " + g.grammar_file
                            : !g.json_schema_file.empty() ? "--json-schema-file " + g.json_schema_file
                            : !schema.empty() ? std::string("--json-schema") : std::string("--grammar");
  try {
    return checked_grammar(gbnf, schema);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(fmt::format("{}: {}", where, e.what()));
  }
}

void finalize_sampling(sampling_args& s) {
  check_sampling_flags(s.p);
  s.p.grammar = grammar_of(s.grammar);  // a grammar that cannot be followed, refused before the model loads
  if (!s.seed_given) {
    s.p.seed = std::random_device{}();
    fmt::print(stderr, "hotcold: seed {}\n", s.p.seed);
  }
}

void write_piece(const std::string& piece) {
  std::fwrite(piece.data(), 1, piece.size(), stdout);
  std::fflush(stdout);
}

std::span<const float> feed(inference_context& ctx, const std::vector<token_id>& tokens, int64_t& pos) {
  auto logits = ctx.forward_batch(tokens, pos);
  pos += static_cast<int64_t>(tokens.size());
  return logits;
}

int generate(inference_context& ctx, sampler& smp, std::span<const float> logits, int64_t& pos, int n, shift_rule& shift,
             std::vector<token_id>* out, const std::atomic<bool>* stop) {
  const vocab& v = ctx.get_model().vocabulary();
  int produced = 0;
  while (produced < n && (pos < ctx.n_ctx() || shift.on)) {
    if (stop && stop->load()) return produced;  // (chat's Ctrl-C: the reply so far)
    token_id next;
    {
      trace_scope span(ctx.trace(), step_part::sample, ctx.steps() - 1, ctx.get_model().hp().n_layer);
      next = smp.sample(logits);
    }
    if (v.is_end_of_generation(next)) return produced;
    smp.accept(next);
    write_piece(v.piece(next));
    if (out) out->push_back(next);
    ++produced;
    if (pos >= ctx.n_ctx() && !shift.make(ctx, pos)) break;  // (shift.on)
    logits = ctx.forward(next, pos++);
  }
  if (produced < n) fmt::print(stderr, "\nhotcold: the context is full ({} tokens){}\n", ctx.n_ctx(), shift.on ? "" : "; --context-shift goes on past it");
  return produced;
}

namespace {

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

// run on the actors: the request streamed as the pipeline samples it.
void run_on_actors(loaded& l, const run_args& a, const std::vector<token_id>& tokens) {
  auto p = l.make_pipeline();
  actors::generation_request r;
  r.prompt = tokens;
  r.n_predict = static_cast<int32_t>(tokens_to_generate(a.s.n_predict, l.ctx->n_ctx(), static_cast<int64_t>(tokens.size()), l.context_shift));
  r.sampling = a.s.p;
  p->submit(std::move(r));
  const auto d = stream_until_done(*p, l.m->vocabulary());
  fmt::print("\n");
  if (d.finish == "context") fmt::print(stderr, "hotcold: the context is full ({} tokens); --context-shift goes on past it\n", l.ctx->n_ctx());
  const double t_gen = d.total_s - d.time_to_first_token_s;
  fmt::print(stderr, "hotcold: prompt {} tokens, first token after {:.0f} ms; generated {} tokens in {:.0f} ms ({:.1f} tok/s after the first)\n",
             d.prompt_tokens, 1000 * d.time_to_first_token_s, d.generated_tokens, 1000 * d.total_s,
             d.generated_tokens > 1 ? (d.generated_tokens - 1) / std::max(t_gen, 1e-9) : 0.0);
}

// run on the forward pass called directly.
void run_direct(loaded& l, const run_args& a, const std::vector<token_id>& tokens) {
  sampler smp(a.s.p, a.s.p.grammar.empty() ? nullptr : &l.m->grammar_tokens());
  for (token_id t : tokens) smp.accept(t);
  int64_t pos = 0;
  const auto t0 = std::chrono::steady_clock::now();
  auto logits = feed(*l.ctx, tokens, pos);
  const double t_prompt = seconds_since(t0);
  const auto t1 = std::chrono::steady_clock::now();
  const token_id bos = l.m->vocabulary().bos();
  shift_rule shift{l.context_shift, l.keep, static_cast<int64_t>(tokens.size()), bos >= 0 && tokens.front() == bos};
  const int n = generate(*l.ctx, smp, logits, pos, static_cast<int>(tokens_to_generate(a.s.n_predict, l.ctx->n_ctx(), pos, shift.on)), shift);
  const double t_gen = seconds_since(t1);
  fmt::print("\n");
  fmt::print(stderr, "hotcold: prompt {} tokens in {:.0f} ms ({:.1f} tok/s); generated {} tokens in {:.0f} ms ({:.1f} tok/s)\n", tokens.size(),
             1000 * t_prompt, tokens.size() / std::max(t_prompt, 1e-9), n, 1000 * t_gen, n / std::max(t_gen, 1e-9));
}

}  // namespace

void run_text(run_args a) {
  finalize_sampling(a.s);
  auto l = load(a.m);
  auto tokens = l.m->vocabulary().tokenize(a.prompt, true, a.s.parse_special);
  if (tokens.empty()) throw std::invalid_argument("the prompt is empty and the model adds no BOS token");
  check_fits(static_cast<int64_t>(tokens.size()), l.ctx->n_ctx());
  if (a.pipeline == "actors") run_on_actors(l, a, tokens);
  else run_direct(l, a, tokens);
  l.finish();
}

}  // namespace hotcold::launcher
