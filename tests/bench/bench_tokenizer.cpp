// Tokenizer throughput on 1 MB of mixed text (English, code, numbers, Cyrillic, CJK, emoji...), one
// thread, for each fixture vocabulary. Reports MB/s as bytes_per_second. Not a test: run
//   build/bin/bench_tokenizer [--benchmark_repetitions=5]
#include <benchmark/benchmark.h>

#include <string>

#include "model/gguf.hpp"
#include "model/vocab.hpp"
#include "loader/text_corpus.hpp"

namespace {

const std::string& corpus() {
  static const std::string text = hotcold::loader::mixed_text(1 << 20, 2026);
  return text;
}

void tokenize_corpus(benchmark::State& state, const char* vocab_file) {
  auto f = hotcold::gguf::file::open(std::string(HOTCOLD_FIXTURES_DIR "/vocab/") + vocab_file);
  auto v = hotcold::vocab::from_gguf(f);
  const auto& text = corpus();
  size_t tokens = 0;
  for (auto _ : state) {
    auto ids = v.tokenize(text);
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["tokens"] = static_cast<double>(tokens);
  state.counters["bytes_per_token"] = static_cast<double>(text.size()) / static_cast<double>(tokens);
}

void detokenize_corpus(benchmark::State& state, const char* vocab_file) {
  auto f = hotcold::gguf::file::open(std::string(HOTCOLD_FIXTURES_DIR "/vocab/") + vocab_file);
  auto v = hotcold::vocab::from_gguf(f);
  auto ids = v.tokenize(corpus());
  for (auto _ : state) {
    auto text = v.detokenize(ids);
    benchmark::DoNotOptimize(text.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * corpus().size()));
}

BENCHMARK_CAPTURE(tokenize_corpus, llama_spm, "ggml-vocab-llama-spm.gguf")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(tokenize_corpus, falcon_bpe, "ggml-vocab-falcon.gguf")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(detokenize_corpus, llama_spm, "ggml-vocab-llama-spm.gguf")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(detokenize_corpus, falcon_bpe, "ggml-vocab-falcon.gguf")->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
