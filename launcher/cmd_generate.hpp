#pragma once
// The commands that run the model on text: run, eval, perplexity, chat — their options, and each
// command's body that a test can call.
#include <string>

#include "launcher/model_options.hpp"
#include "model/sampler.hpp"

namespace hotcold::launcher {

// --grammar, --grammar-file, -j/--json-schema, --json-schema-file (at most one of them).
struct grammar_args {
  std::string grammar, grammar_file, json_schema, json_schema_file;
};
// The GBNF they name (files read, a schema turned into GBNF, checked), "" for none; throws
// std::invalid_argument naming the flag, the file, the line and column or the schema's keyword.
std::string grammar_of(const grammar_args& g);

struct sampling_args {
  int n_predict = 128;
  sampling_params p;
  bool seed_given = false;  // --seed was given (else a random seed, printed on stderr)
  grammar_args grammar;     // p.grammar, once finalize_sampling has read and checked it
  bool parse_special = false;
};

struct run_args {
  model_args m;
  sampling_args s;
  std::string prompt;  // -p (-: stdin), or the text of -f's file
  std::string file;
  std::string pipeline = "actors";
  // llama.cpp's conversation mode (-cnv, -i, -sys): run becomes chat, with -sys (or, as llama-cli read
  // it, -p) as the system message.
  bool conversation = false;
  std::string system, chat_template;
};

struct eval_args {
  model_args m;
  std::string prompt, file;  // exactly one of the two
  bool from_file = false;    // -f was given
  std::string logits_out, stats_json, oracle_json;
  bool parse_special = false, vs_oracle = false;
  std::string pipeline = "direct";
};

struct perplexity_args {
  model_args m;
  std::string file;
};

struct embed_args {
  model_args m;
  std::string prompt, file;  // exactly one: one text, or a file of texts, one a line
  bool from_file = false;
  std::string pooling;       // mean, last, cls ("" : the file's, else mean)
};

struct chat_args {
  model_args m;
  sampling_args s;
  std::string chat_template, system;
};

// Each throws as load() does, and std::invalid_argument for options that cannot go together.
void run_text(run_args a);  // hotcold run
void run_eval(eval_args a);
void run_perplexity(const perplexity_args& a);
void run_chat(chat_args a);
// hotcold embed: one line a text, each its embedding as a JSON array (engine/embeddings.hpp).
void run_embed(const embed_args& a);

// What the commands share: the prompt must fit the context; the sampling flags checked, a grammar read
// and checked before the model loads, the seed drawn when not given.
void check_fits(int64_t n_prompt, int64_t n_ctx);
void finalize_sampling(sampling_args& s);
// -n as llama.cpp reads it: a count, or -1 for "until the end of the text or a full context" (the
// room the context has after n_prompt tokens).
int64_t tokens_to_generate(int64_t n_predict, int64_t n_ctx, int64_t n_prompt, bool context_shift = false);
double seconds_since(std::chrono::steady_clock::time_point t0);

}  // namespace hotcold::launcher
