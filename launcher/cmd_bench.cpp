// hotcold bench -m FILE [-t N] [-p 128] [-n 64] [-r 3]: prompt and decode speed, llama-bench style.
#include <chrono>
#include <cmath>
#include <numeric>
#include <thread>

#include <fmt/format.h>

#include "launcher/commands.hpp"
#include "launcher/default_model.hpp"
#include "model/forward.hpp"

namespace hotcold::launcher {

void add_bench_command(CLI::App& app, int& exit_code) {
  struct args {
    std::string model;
    int threads = 0, n_prompt = 128, n_gen = 64, reps = 3;
    bool mmap = false;
  };
  auto a = std::make_shared<args>();
  auto* cmd = app.add_subcommand("bench", "Measure prompt processing and decode speed (tokens/s, mean ± sd over repetitions)");
  cmd->add_option("-m,--model", a->model, "GGUF model (default: the embedded default model)");
  cmd->add_option("-t,--threads", a->threads, "Threads (default: all hardware threads)");
  cmd->add_option("-p,--n-prompt", a->n_prompt, "Prompt tokens (0: skip)")->capture_default_str();
  cmd->add_option("-n,--n-gen", a->n_gen, "Generated tokens (0: skip)")->capture_default_str();
  cmd->add_option("-r,--repetitions", a->reps, "Repetitions")->capture_default_str();
  cmd->add_flag("--mmap", a->mmap, "Compute from the file's mmap'd pages");
  cmd->callback([a, &exit_code] {
    exit_code = run_guarded("bench", [&] {
      std::string path = a->model.empty() ? ensure_default_model() : a->model;
      auto m = model::load(path, {a->mmap});
      int threads = a->threads > 0 ? a->threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
      int64_t ctx_len = std::max(1, a->n_prompt + a->n_gen);
      inference_context ctx(m, ctx_len, threads);
      const auto& hp = m->hp();
      fmt::print("| model | size | threads | test | t/s |\n| --- | --- | --- | --- | --- |\n");
      auto report = [&](const std::string& test, const std::vector<double>& rates) {
        double mean = std::accumulate(rates.begin(), rates.end(), 0.0) / rates.size();
        double var = 0;
        for (double r : rates) var += (r - mean) * (r - mean);
        double sd = rates.size() > 1 ? std::sqrt(var / (rates.size() - 1)) : 0.0;
        fmt::print("| {} {} {}L {} | {:.2f} GiB | {} | {} | {:.2f} ± {:.2f} |\n", architecture_name(hp.arch), activation_name(hp.act),
                   hp.n_layer, hp.n_embd, m->weight_bytes() / double(1ull << 30), threads, test, mean, sd);
        std::fflush(stdout);
      };
      auto timed = [&](int n, int64_t start) {
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < n; ++i) ctx.forward(static_cast<token_id>((i * 7919 + 13) % hp.n_vocab), start + i);
        return n / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      };
      ctx.forward(1, 0);  // warm-up: first touch of every weight page
      if (a->n_prompt > 0) {
        std::vector<double> rates;
        for (int r = 0; r < a->reps; ++r) rates.push_back(timed(a->n_prompt, 0));
        report(fmt::format("pp{}", a->n_prompt), rates);
      }
      if (a->n_gen > 0) {
        std::vector<double> rates;
        for (int r = 0; r < a->reps; ++r) rates.push_back(timed(a->n_gen, 0));
        report(fmt::format("tg{}", a->n_gen), rates);
      }
    });
  });
}

}  // namespace hotcold::launcher
