#pragma once
// `hotcold bench --vs-llama-bench PATH`: llama.cpp's llama-bench, a binary the user brings (none of
// llama.cpp's code is in hotcold), run on the same file between hotcold's repetitions, one repetition
// a call, and its JSON output read (`-o json`: an array of tests, each with n_prompt, n_gen, avg_ts).
#include <optional>
#include <string>
#include <vector>

namespace hotcold::launcher {

// What one call of llama-bench measured: its prompt test's tokens/s (n_prompt > 0, n_gen 0) and its
// generation test's (n_gen > 0, n_prompt 0), each absent when it ran none; its build.
struct llama_bench_run {
  std::optional<double> prefill_tokens_per_s, decode_tokens_per_s;
  std::string build;
};

// Reads llama-bench's `-o json` output. Throws std::runtime_error naming what is not as expected.
llama_bench_run parse_llama_bench_json(const std::string& text);

// Whether `path` can be run (an executable file); throws std::invalid_argument naming the option.
void check_llama_bench(const std::string& path);

// Runs `path -m model -t threads -p n_prompt -n n_gen -r 1 -o json --mmap 0 -ngl 0` (and `-d depth`
// when depth > 0) and reads its output. Throws std::runtime_error with the command and the end of its
// stderr when it fails.
llama_bench_run run_llama_bench(const std::string& path, const std::string& model, int threads, int n_prompt, int n_gen, int depth = 0);

}  // namespace hotcold::launcher
