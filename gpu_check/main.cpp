// hotcold-gpu-check: `kernels` checks every GPU kernel against the CPU; `all` runs the whole GPU
// check (gpu_check/gpu_check.hpp, docs/gpu.md "The bundle"). No subcommand: `kernels`.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include <CLI/CLI.hpp>

#include "gpu_check/gpu_check.hpp"

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  CLI::App app{"hotcold-gpu-check: prove hotcold's GPU side on a machine with a GPU"};
  app.require_subcommand(0, 1);
  bool small = false;
  std::string json_path;
  auto* k = app.add_subcommand("kernels", "Every GPU kernel against the CPU on random inputs, then their speed (exit 0 passed, 1 a kernel is wrong, 77 no device)");
  k->add_flag("--small", small, "Small shapes only, no timing (for a run under compute-sanitizer)");
  k->add_option("--json", json_path, "Write the checks and speeds as JSON");
  int from = 0;
  k->add_option("--from", from, "Start at this check (a fresh process after a device error: the JSON's resume_from)")->check(CLI::NonNegativeNumber);
  hotcold::gpu_check::gpu_check_options o;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  o.bin_dir = ec ? "." : self.parent_path().string();
  auto* all = app.add_subcommand("all", "The whole check: kernels (and memcheck), generated models on the GPU against model/reference, tokens/s side by side; "
                                        "a table on stdout, JSON and one archive of the results (exit 0 ok, 1 a kernel is wrong, 2 the hybrid is wrong, 3 incomplete, "
                                        "4 a kernel below its speed floor, 77 no device)");
  all->add_option("--minutes", o.minutes, "Time for the whole check; each stage gets a share and what earlier ones left")->check(CLI::Range(0.05, 600.0))->capture_default_str();
  all->add_option("--bin", o.bin_dir, "Folder of hotcold, hotcold-gpu-check, test_actors and test_devices (default: this program's)");
  all->add_option("--vocab", o.vocab, "Tokenizer GGUF the generated models copy (default: BIN/../share/ggml-vocab-llama-spm.gguf)");
  all->add_option("--work", o.work, "Folder for the generated models (kept: a rerun reuses them), logs and the JSON")->capture_default_str();
  all->add_option("--device", o.device, "cuda; or sim: stages 2 and 3 on sim's GPU-like kernels, a dry run on a machine without a GPU")
      ->check(CLI::IsMember({"cuda", "sim"}))
      ->capture_default_str();
  all->add_flag("--small", o.small, "Small model shapes (a dry run's)");
  all->add_option("-t,--threads", o.threads, "CPU threads (default: all)");
  all->add_option("--json", o.json_path, "The final JSON (default: WORK/gpu-check.json)");
  all->add_option("--schedule-gpu-gbs", o.schedule_gpu_gbs, "Estimate the printed schedule for a GPU of this memory bandwidth, GB/s (default: the device's; sim: 3350, an H100)")
      ->check(CLI::NonNegativeNumber);
  all->add_option("--schedule-cores", o.schedule_cores, "... and this many CPU cores (default: this machine's; sim: 16)")->check(CLI::NonNegativeNumber);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {  // --help: 0; a bad option: the check did not run
    return app.exit(e) == 0 ? 0 : hotcold::gpu_check::gpu_check_incomplete;
  }
  if (*all) {
    if (o.vocab.empty()) o.vocab = (fs::path(o.bin_dir) / ".." / "share" / "ggml-vocab-llama-spm.gguf").lexically_normal().string();
    if (!fs::exists(o.vocab)) {
      std::fprintf(stderr, "hotcold-gpu-check: no tokenizer at %s (give --vocab FILE)\n", o.vocab.c_str());
      return hotcold::gpu_check::gpu_check_incomplete;
    }
    for (const char* b : {"hotcold", "hotcold-gpu-check"})
      if (!fs::exists(fs::path(o.bin_dir) / b)) {
        std::fprintf(stderr, "hotcold-gpu-check: no %s in %s (give --bin DIR)\n", b, o.bin_dir.c_str());
        return hotcold::gpu_check::gpu_check_incomplete;
      }
    return hotcold::gpu_check::run_gpu_check(o);
  }
  return hotcold::gpu_check::check_gpu_kernels(small, json_path, from);
}
