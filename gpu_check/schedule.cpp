// The GPU check's schedule (checker.hpp): before the stages start, each one's steps with the seconds
// they are estimated to take on the GPU machine, against the stage's share of --minutes, printed and
// kept in the JSON (docs/gpu.md, "The schedule"). The estimates are bytes and operations over rates:
// the steps that run on the CPU at this machine's measured rates a core, the GPU's at half its
// published bandwidth; what cannot be measured without a GPU is an allowance, named as one.
#include "gpu_check/checker.hpp"
#include "loader/placement.hpp"

namespace hotcold::gpu_check::detail {

namespace {

// Measured here (a 2 vCPU Zen 4 machine) on the check's own steps with the ~1B F16 file (1.7 GB):
// gen-model writes 0.035 GB/s (one thread, 48.7 s); prepare (64 profiled tokens, rank 256, one epoch)
// takes 34 core-seconds a GB (29 s on 2 threads); model/reference's double sums run at 1 GFLOP/s a
// thread (22.9 s for 14 positions of the ~1B file). A file is read at 2 GB/s; a step starts in 2 s.
constexpr double gen_gb_per_s = 0.035, prepare_core_s_per_gb = 34, oracle_gflops = 1.0, read_gb_per_s = 2.0, step_start_s = 2.0;
// The CPU's decode: this machine's ~10 GB/s a core for products, 60 GB/s at most (a desktop's memory);
// its prefill at 10 GFLOP/s a core. The GPU's kernels at half its published bandwidth (the speed
// floors'), its prefill re-reading the weights once a prompt chunk (loader::device_prompt_chunk: the
// compute buffers hold 128 tokens of the ~1B files).
constexpr double cpu_gb_per_s_core = 10, cpu_gb_per_s_max = 60, cpu_gflops_core = 10, gpu_efficiency = 0.5;
constexpr double gpu_prefill_chunk = static_cast<double>(loader::device_prompt_chunk);
// Allowances (no GPU has run the check yet): the kernel checks (their random inputs and the CPU's
// double sums), the timed kernels, each compute-sanitizer tool on the small shapes, the suite's GPU tests.
constexpr double kernel_checks_s = 40, kernel_speed_s = 15, sanitizer_tool_s = 20, suite_tests_s = 60;

struct planned {
  int stage;
  std::string step;
  double seconds;
  std::string basis;
};

}  // namespace

void checker::plan_schedule(const std::vector<double>& shares_s) {
  const bool sim = o_.device != "cuda";
  const double gpu_gbs = o_.schedule_gpu_gbs > 0 ? o_.schedule_gpu_gbs : sim ? 3350 : std::max(100.0, published_bandwidth_gbs());
  const int cores = o_.schedule_cores > 0 ? o_.schedule_cores : sim ? 16 : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const double cpu_gbs = std::min(cpu_gb_per_s_max, cpu_gb_per_s_core * cores), gpu = gpu_gbs * gpu_efficiency * 1e9;
  const double gb = 1e9;
  std::vector<planned> rows;
  // 1: the kernels.
  rows.push_back({1, "kernel checks", kernel_checks_s, "an allowance: random inputs and the CPU's double sums"});
  rows.push_back({1, "timed kernels (rotated buffers past L2)", kernel_speed_s, "an allowance"});
  rows.push_back({1, "compute-sanitizer memcheck, racecheck, initcheck", 3 * sanitizer_tool_s, "an allowance each; on what the share leaves"});
  // 2: the files (made from the start, beside stage 1: gen-model a thread each, prepare sharing the
  // cores), then the checks (an eval on the device and one on the CPU each, model/reference a thread
  // each, as many at once as there are cores), then the suite's GPU tests.
  double gen = 0, prep = 0;
  for (const model_file* m : {&one_, &one_q4_, &big_, &moe_, &depth_}) gen = std::max(gen, m->planned_bytes() / gb / gen_gb_per_s);
  for (const model_file* m : {&one_, &big_}) prep += m->planned_bytes() / gb * prepare_core_s_per_gb / cores;
  const double making = gen + prep;
  rows.push_back({2, "making the files (from the start)", making, fmt::format("gen-model {:.0f} s at {} GB/s a thread, prepare {:.0f} s on {} cores", gen,
                                                                                  gen_gb_per_s, prep, cores)});
  struct check_cost {
    const model_file* m;
    double tokens;
    bool sparse;
  };
  double oracle_sum = 0, oracle_max = 0;
  for (const check_cost& c : {check_cost{&big_, 14, true}, {&one_, 14, true}, {&one_dense_, 14, false}, {&one_q4_, 14, false}, {&moe_, 14, false},
                              {&depth_, 330, false}}) {
    // (a mixture's oracle computes the 2 of 8 experts its tokens chose; a sparse file's, the chosen
    // neurons: counted whole, the larger)
    const double work = 2 * c.m->params * (c.m == &moe_ ? 0.4 : 1.0) * c.tokens / (oracle_gflops * 1e9);
    const double one = step_start_s + c.m->planned_bytes() / gb / read_gb_per_s + work;
    oracle_sum += 2 * one, oracle_max = std::max(oracle_max, one);
  }
  rows.push_back({2, "6 checks against model/reference, each on the device and the CPU", std::max(oracle_max, oracle_sum / cores),
                  fmt::format("model/reference at {} GFLOP/s a thread, {} at once", oracle_gflops, cores)});
  rows.push_back({2, "the suite's GPU tests", suite_tests_s, "an allowance"});
  // 3: the speeds on the ~1B files (320-token prompt, 64 decoded, twice), and the planner's predictions.
  const double bytes = one_dense_.planned_bytes(), q4 = one_q4_.planned_bytes(), flops = 2 * one_dense_.params;
  auto bench = [&](double file, double on_gpu) {  // on_gpu: the share of its bytes the device reads
    const double decode = (1 - on_gpu) * file / (cpu_gbs * gb) + on_gpu * file / gpu;
    const double prefill = on_gpu >= 1 ? file / gpu_prefill_chunk / gpu : flops / (cpu_gflops_core * 1e9 * cores);
    return step_start_s + file / gb / read_gb_per_s + 2 * (320 * prefill + 64 * decode);
  };
  double speed = 4 * (step_start_s + bytes / gb / read_gb_per_s + 2.0);  // (4 plans: each loads the file and measures the CPU)
  for (double on_gpu : {0.0, 0.0, 0.25, 0.25, 0.5, 0.25, 0.5, 1.0, 1.0}) speed += bench(bytes, on_gpu);
  speed += bench(q4, 1.0);
  rows.push_back({3, "10 benches and 4 plans on the ~1B files", speed,
                  fmt::format("the CPU's share at {:.0f} GB/s, the GPU's at {:.0f} GB/s", cpu_gbs, gpu / gb)});

  json stages = json::array();
  double total = 0;
  std::printf("\nGPU schedule of a full run (full shapes) in %.0f minutes, estimated for a GPU of %.0f GB/s and %d CPU cores (%s):\n", o_.minutes, gpu_gbs,
              cores, sim ? "the lent machine's; this run is a dry run on sim" : "this machine");
  std::printf("%-62s %9s %9s  %s\n", "stage / step", "estimate", "share", "basis");
  for (int k = 1; k <= 3; ++k) {
    double sum = 0;
    json steps = json::array();
    for (const planned& p : rows)
      if (p.stage == k) sum += p.seconds, steps.push_back({{"step", p.step}, {"seconds", p.seconds}, {"basis", p.basis}});
    // The files are made beside stage 1: stages 1 and 2 share that time.
    const double share = shares_s[static_cast<size_t>(k - 1)];
    std::printf("%-62s %8.0fs %8.0fs  %s\n", stages_[static_cast<size_t>(k - 1)].name.c_str(), sum, share, sum <= share ? "within its share" : "over its share");
    for (const planned& p : rows)
      if (p.stage == k) std::printf("  %-60s %8.0fs %9s  %s\n", p.step.c_str(), p.seconds, "", p.basis.c_str());
    stages.push_back({{"stage", stages_[static_cast<size_t>(k - 1)].name}, {"share_s", share}, {"estimate_s", sum}, {"within_share", sum <= share}, {"steps", steps}});
    total += sum;
  }
  // Making the files overlaps stage 1 (it starts with it): the schedule's length counts the longer.
  const double stage1 = stages[0].value("estimate_s", 0.0);
  const double length = std::max(stage1, making) + (stages[1].value("estimate_s", 0.0) - making) + stages[2].value("estimate_s", 0.0);
  const double limit = o_.minutes * 60;
  std::printf("%-62s %8.0fs %8.0fs  %s\n", "the whole check (the files made beside stage 1)", length, limit,
              length <= limit ? "fits" : "does not fit: the stages will leave out what their shares cannot hold");
  std::fflush(stdout);
  schedule_ = {{"gpu_gb_per_s", gpu_gbs}, {"cpu_cores", cores}, {"estimated_for", sim ? "the lent GPU machine (a dry run on sim)" : "this machine"},
               {"stages", stages}, {"estimate_s", length}, {"sum_of_steps_s", total}, {"limit_s", limit}, {"fits", length <= limit}};
}

std::string checker::long_prompt() {
  // About 320 tokens of plain prose (a llama tokenizer: 19 tokens a sentence).
  std::string p = "Once upon a time, in a land far away, there lived";
  for (int k = 0; k < 16; ++k) p += " a miller who counted the sacks of grain that came down the river each morning.";
  return p;
}

std::string checker::pack_results() {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(work_)) {
    const std::string n = e.path().filename().string(), ext = e.path().extension().string();
    if (e.is_regular_file() && (ext == ".json" || ext == ".out" || ext == ".err")) files.push_back(n);
  }
  std::sort(files.begin(), files.end());
  const fs::path archive = work_ / "gpu-check-results.tar.gz";
  std::vector<std::string> argv{"tar", "-czf", archive.string(), "-C", work_.string()};
  argv.insert(argv.end(), files.begin(), files.end());
  const auto r = run_steps({{argv, work_ / "pack.log", work_ / "pack.err"}}, 60).front();
  if (!r.ok()) {
    std::printf("the results could not be packed (tar: %s); copy back %s\n", last_lines(r.err, 1).c_str(), work_.c_str());
    return {};
  }
  std::printf("the results in one archive: %s (%zu files, %.0f KiB)\n", archive.c_str(), files.size(), static_cast<double>(fs::file_size(archive)) / 1024);
  return archive.string();
}

}  // namespace hotcold::gpu_check::detail
