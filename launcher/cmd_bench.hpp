#pragma once
// hotcold bench: prompt and decode speed, llama-bench style, with the bytes of weights read per decoded
// token; its options, and the command's body that a test can call.
#include <string>
#include <vector>

#include "launcher/cmd_generate.hpp"
#include "launcher/model_options.hpp"

namespace hotcold::launcher {

struct bench_args {
  model_args m;
  int n_prompt = 128, n_gen = 64, reps = 3;       // the test being measured (one of the lists' values)
  std::vector<int> n_prompts, n_gens;             // -p and -n as given: comma lists, as llama-bench's (empty: n_prompt, n_gen)
  std::string output;                             // -o md|csv|json|jsonl (empty: the table)
  std::vector<int> n_depth{0};  // -d: tokens already in the cache before each test (llama-bench's; each depth its own tests)
  int parallel = 1, vs_parallel = 0;            // sequences decoded at once (and the comparison's)
  int micro_batches = 1, vs_micro_batches = 0;  // micro-batches of a step (and the comparison's)
  int vs_depth = -1;                            // a depth measured beside each of -d's, interleaved (-1: none)
  bool json = false, vs_dense = false, vs_direct = false, roofline = false, no_warmup = false;
  std::string pipeline = "actors";
  std::string vs_llama_bench;  // llama.cpp's llama-bench, run on the same file between the repetitions
  grammar_args grammar;        // what every decode follows (the actors' sampler, greedy), and
  bool vs_unconstrained = false;  // the same decodes without it, interleaved
};

// Measures and prints (a table, or one JSON object with json); throws as load() does.
void run_bench(const bench_args& a);

}  // namespace hotcold::launcher
