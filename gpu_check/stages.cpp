// The GPU check's generated files and its second and third stages (checker.hpp): the hybrid against
// model/reference and the suite's GPU tests, then the speed side by side with the planner's predictions.
#include "gpu_check/checker.hpp"

namespace hotcold::gpu_check::detail {

bool checker::make_models(stage_record& s, const std::vector<to_make>& files, clock_type::time_point deadline) {
  std::vector<step_spec> gens, preps;
  std::vector<const to_make*> gen_of, prep_of;
  for (const auto& f : files) {
    const fs::path dense = work_ / (f.m->name + ".gguf"), prepared = work_ / (f.m->name + ".sparse.gguf");
    f.m->path = (f.sparse ? prepared : dense).string();
    if (fs::exists(f.m->path + ".done")) continue;
    std::vector<std::string> g{bin("hotcold"), "gen-model", "--vocab", o_.vocab, "--type", f.type, "--seed", "7", "-o", dense.string()};
    g.insert(g.end(), f.shape.begin(), f.shape.end());
    if (!fs::exists(dense.string() + ".done")) gens.push_back(spec("gen-" + f.m->name, g)), gen_of.push_back(&f);
    if (f.sparse) {
      std::vector<std::string> p{bin("hotcold"), "prepare", "-m", dense.string(), "-o", prepared.string(), "--tokens", f.tokens};
      p.insert(p.end(), f.train.begin(), f.train.end());
      preps.push_back(spec("prepare-" + f.m->name, p)), prep_of.push_back(&f);
    }
  }
  auto settle = [&](const std::vector<step_result>& rs, const std::vector<const to_make*>& of, bool prepared) {
    bool all = true;
    for (size_t i = 0; i < rs.size(); ++i) {
      const auto& name = of[i]->m->name;
      if (rs[i].ok()) {
        std::ofstream((work_ / (name + (prepared ? ".sparse.gguf" : ".gguf"))).string() + ".done") << "made\n";
        continue;
      }
      all = false;
      if (rs[i].timed_out) over_time(s, "making " + name);
      else s.status = "could not run", s.notes.push_back("making " + name + ": " + last_lines(rs[i].err, 2));
    }
    return all;
  };
  if (!gens.empty() && !settle(run_steps(gens, until(deadline)), gen_of, false)) return false;
  for (auto& p : preps) {
    const auto t = threads_of(static_cast<int>(preps.size()));
    p.argv.insert(p.argv.end(), t.begin(), t.end());
  }
  if (!preps.empty() && !settle(run_steps(preps, until(deadline)), prep_of, true)) return false;
  for (const auto& f : files) {
    f.m->made = true;
    f.m->bytes = fs::file_size(f.m->path);
  }
  return true;
}

namespace {
// The weights of a gen-model shape (--embd, --layers, --ffn, --heads, --kv-heads, --experts), with a
// 32,000-token vocabulary's embeddings and head: what the schedule estimates a file's bytes by.
double shape_params(const std::vector<std::string>& args) {
  auto arg = [&](const char* flag, double otherwise) {
    for (size_t i = 0; i + 1 < args.size(); ++i)
      if (args[i] == flag) return std::stod(args[i + 1]);
    return otherwise;
  };
  const double d = arg("--embd", 256), layers = arg("--layers", 4), ff = arg("--ffn", 1024), heads = arg("--heads", 8);
  const double kv = d / heads * arg("--kv-heads", heads), experts = std::max(1.0, arg("--experts", 1));
  return layers * (2 * d * d + 2 * d * kv + 3 * d * ff * experts) + 2 * 32000 * d;
}
}  // namespace

std::vector<checker::to_make> checker::model_plan() {
  big_ = {"7b-shape", "", o_.small ? "512/2/1376, 8 heads" : "4096/2/11008, 32 heads (7B's layers, 2 of them)"};
  one_ = {"1b-shape", "", o_.small ? "256/4/704, 8 heads, 4 KV heads" : "2048/16/5632, 32 heads, 8 KV heads"};
  one_dense_ = one_;
  one_q4_ = {"1b-shape-q4_0", "", one_.shape + ", Q4_0"};
  moe_ = {"moe-shape", "", o_.small ? "qwen3moe 256/4, 8 experts of 256, 2 used" : "qwen3moe 1024/4, 8 experts of 1024, 2 used"};
  // Each shape full (a GPU run's, and what the schedule estimates whatever this run's) and small.
  const std::vector<std::string> full_big{"--embd", "4096", "--layers", "2", "--ffn", "11008", "--heads", "32", "--kv-heads", "32"},
      small_big{"--embd", "512", "--layers", "2", "--ffn", "1376", "--heads", "8", "--kv-heads", "8"},
      full_one{"--embd", "2048", "--layers", "16", "--ffn", "5632", "--heads", "32", "--kv-heads", "8"},
      small_one{"--embd", "256", "--layers", "4", "--ffn", "704", "--heads", "8", "--kv-heads", "4"};
  const std::vector<std::string>& big_args = o_.small ? small_big : full_big;
  const std::vector<std::string>& one_args = o_.small ? small_one : full_one;
  // Tokens prepare profiles: enough to rank the neurons for a placement (the check compares with the
  // oracle given the neurons chosen, whatever they are).
  const std::string few = "64", more = "64";
  // A mixture of experts (docs/moe.md): attention, the head and some experts in device slots, the
  // rest on the CPU, the cache refilled as the prompt routes.
  auto moe_of = [](const char* width) {
    return std::vector<std::string>{"--arch", "qwen3moe", "--act", "silu", "--embd", width, "--layers", "4",
                                    "--ffn", width, "--heads", "8", "--kv-heads", "4", "--experts", "8", "--experts-used", "2"};
  };
  const std::vector<std::string> full_moe = moe_of("1024"), moe_args = o_.small ? moe_of("256") : full_moe;
  // Predictors of a fixed rank trained one epoch (prepare's rank search was the slowest step; the
  // check's oracle is given the neurons the run chose, and on these synthetic files rank 256 chooses
  // no more neurons than the search's).
  const std::vector<std::string> quick{"--rank", "256", "--epochs", "1"};
  // A small dense file for the check at depth (a 300-token prompt a token at a time: the oracle's
  // double sums over 300 positions of the ~1B file would take minutes).
  depth_ = {"depth-shape", "", "256/4/704, 8 heads, 4 KV heads"};
  const std::vector<std::string> depth_args{"--embd", "256", "--layers", "4", "--ffn", "704", "--heads", "8", "--kv-heads", "4"};
  // The schedule is the GPU run's (full shapes) whatever this run's: its files' weights.
  for (auto [m, a, per] : {std::tuple{&one_, &full_one, 2.0}, {&one_dense_, &full_one, 2.0}, {&one_q4_, &full_one, 18.0 / 32}, {&big_, &full_big, 2.0},
                           {&moe_, &full_moe, 2.0}, {&depth_, &depth_args, 2.0}})
    m->params = shape_params(*a), m->bytes_per_param = per;
  return {{&one_, one_args, "f16", true, more, quick}, {&one_q4_, one_args, "q4_0", false, ""}, {&big_, big_args, "f16", true, few, quick},
          {&moe_, moe_args, "f16", false, ""}, {&depth_, depth_args, "f16", false, ""}};
}

void checker::hybrid(stage_record& s) {
  s.status = "passed";
  if (maker_.joinable()) maker_.join();
  for (const auto& n : making_.notes) s.notes.push_back(n);
  if (!made_ok_) {
    s.status = making_.status;
    return;
  }
  one_dense_.path = (work_ / (one_.name + ".gguf")).string(), one_dense_.bytes = fs::file_size(one_dense_.path), one_dense_.made = true;

  struct check {
    std::string name;
    const model_file* m;
    double fraction, floor;  // the limit: five times the CPU's own distance, at least `floor`
    bool deep = false;       // the long prompt, a token a step (decode's attention past 128 positions: split)
  };
  const std::vector<check> checks{
      {"7B-shape sparse F16, hybrid at 50%", &big_, 0.5, 1e-4},
      {"1B-shape sparse F16, hybrid at 25%", &one_, 0.25, 1e-4},
      {"1B-shape dense F16, whole layers at 50%", &one_dense_, 0.5, 1e-4},
      {"1B-shape dense Q4_0, whole layers at 50%", &one_q4_, 0.5, 1e-2},
      {"MoE-shape F16, experts split at 40%", &moe_, 0.4, 1e-4},
      {"depth: 300+ tokens a step each, all in VRAM", &depth_, 2.0, 1e-4, true},
  };
  // Each file on the device and on the CPU alone, all at once (model/reference is one thread each):
  // the CPU's own distance from the oracle says how far float sums of these weights stray at this
  // depth, and the device's may not stray much further.
  const std::string prompt = "Once upon a time, in a land far away, there lived";
  std::vector<step_spec> evals;
  for (size_t k = 0; k < 2 * checks.size(); ++k) {
    const auto& c = checks[k / 2];
    const bool on_cpu = k % 2;
    const std::string tag = "check-" + std::to_string(k / 2) + (on_cpu ? "-cpu" : "");
    std::vector<std::string> a{bin("hotcold"), "eval", "-m", c.m->path, "-p", c.deep ? long_prompt() : prompt, "--pipeline", "actors", "-c", c.deep ? "512" : "256",
                               "--oracle-json", (work_ / (tag + ".json")).string()};
    if (c.deep) a.insert(a.end(), {"--ubatch-size", "1"});
    const auto d = on_cpu ? std::vector<std::string>{"--device", "cpu"} : device_args(c.m->gib(c.fraction));
    a.insert(a.end(), d.begin(), d.end());
    const auto t = threads_of(static_cast<int>(2 * checks.size()));
    a.insert(a.end(), t.begin(), t.end());
    evals.push_back(spec(tag, a));
  }
  if (left() < 20) {  // (an eval loads its file and runs a prompt: not in less)
    for (const auto& c : checks) skip_for_time(s, c.name);
    return;
  }
  // In waves that fit this machine's memory (an eval holds its file, the device's copy and
  // model/reference's reading of it: about three times the file), all at once where they fit.
  std::vector<uint64_t> need;
  for (size_t k = 0; k < evals.size(); ++k) need.push_back(3 * checks[k / 2].m->bytes);
  const auto results = run_in_waves(evals, need);
  for (size_t k = 0; k < checks.size(); ++k) {
    const auto& c = checks[k];
    const auto& r = results[2 * k];
    json row{{"name", c.name}, {"file", c.m->path}, {"budget_gib", c.m->gib(c.fraction)}};
    const auto cpu = results[2 * k + 1].ok() ? read_json(work_ / ("check-" + std::to_string(k) + "-cpu.json")) : std::nullopt;
    double limit = 10 * c.floor;  // without the CPU's figure
    if (cpu) row["cpu_rel_rms"] = cpu->value("rel_rms", 0.0), limit = std::max(c.floor, 5 * cpu->value("rel_rms", 0.0));
    row["limit"] = limit;
    const auto j = r.ok() ? read_json(work_ / ("check-" + std::to_string(k) + ".json")) : std::nullopt;
    // A sparse file's hybrid must hold hot rows (else it checks attention alone): the plan's total row.
    const int64_t hot = c.m == &one_ || c.m == &big_ ? hot_neurons_in(r.err) : -1;
    if (hot >= 0) row["hot_neurons"] = hot;
    if (j && hot == 0) {
      hybrid_wrong_ = true;
      s.status = "failed";
      s.notes.push_back(fmt::format("{}: the plan held no hot rows, so the check proves attention alone", c.name));
    }
    if (j) {
      const double rel = j->value("rel_rms", 1.0);
      row["rel_rms"] = rel, row["top1_same"] = (*j)["top1_same"], row["positions"] = (*j)["positions"], row["seconds"] = r.seconds;
      row["passed"] = rel <= limit;
      if (rel > limit) {
        hybrid_wrong_ = true;
        s.status = "failed";
        s.notes.push_back(fmt::format("wrong: {}: relative RMS {:.3e} > {:.1e}", c.name, rel, limit));
      }
    } else {
      row["passed"] = false;
      row["error"] = r.timed_out ? "over the stage's time share" : last_lines(r.err, 2);
      if (r.timed_out) {
        if (s.status == "passed") over_time(s, c.name);
      } else {  // a run that fails on the GPU (an error, a crash) is a wrong hybrid: it gave no answer
        hybrid_wrong_ = true;
        s.status = "failed";
        s.notes.push_back(fmt::format("{}: exit status {}: {}", c.name, r.status, last_lines(r.err, 1)));
      }
    }
    hybrid_checks_.push_back(row);
  }
  // The suite's own GPU tests (they skip without a CUDA device).
  if (o_.device != "cuda") return;
  const std::vector<std::pair<std::string, std::string>> suites{
      {"test_devices", "GpuKernels.*:GpuDevice.*"},
      // (qwen2's biases, qwen3's per-head norms and wide queries, phi3's long RoPE; every architecture's
      // hybrid with attention and predictors on the GPU, a Q4_0 sparse file's among them.)
      // Each with three sequences at once and prompts in chunks of 3 (expect_matches_reference); a
      // thresholded SiLU file's predictor jobs among the architectures.
      {"test_actors", "Pipeline.SparseFileSplitWithCuda*:Pipeline.DenseFileWithALayerOnGpuLike*:Pipeline.Qwen2Qwen3Phi3*:Pipeline.GpuJobsOnSim*:"
                      "Pipeline.RoundTripsAreCounted*:Models/DeviceLayers.AttentionOnAGpuLike*"}};
  for (const auto& [b, filter] : suites) {
    if (left() < 5) {
      skip_for_time(s, b + " " + filter);
      continue;
    }
    const auto r = step(b, {bin(b), "--gtest_filter=" + filter, "--gtest_brief=1"});
    json row{{"binary", b}, {"filter", filter}, {"exit_status", r.status}, {"timed_out", r.timed_out}};
    const auto at = r.out.rfind("[  PASSED  ]");
    row["summary"] = at == std::string::npos ? last_lines(r.out, 1) : last_lines(r.out.substr(at), 1);
    suite_tests_.push_back(row);
    if (r.timed_out) over_time(s, b);
    else if (r.status != 0) {
      hybrid_wrong_ = true;
      s.status = "failed";
      s.notes.push_back(b + " failed: " + last_lines(r.out, 3));
    }
  }
}

std::vector<step_result> checker::run_in_waves(const std::vector<step_spec>& steps, const std::vector<uint64_t>& need) {
  const uint64_t have = available_memory() / 10 * 8;
  std::vector<step_result> out;
  for (size_t i = 0; i < steps.size();) {
    size_t j = i;
    uint64_t sum = 0;
    while (j < steps.size() && (j == i || sum + need[j] <= have)) sum += need[j++];
    const auto rs = run_steps(std::vector<step_spec>(steps.begin() + static_cast<int64_t>(i), steps.begin() + static_cast<int64_t>(j)), left());
    out.insert(out.end(), rs.begin(), rs.end());
    i = j;
  }
  return out;
}

uint64_t checker::available_memory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return uint64_t{1} << 40;  // (unknown: no limit)
}

int64_t checker::hot_neurons_in(const std::string& err) {
  const auto at = err.rfind("| total |");
  if (at == std::string::npos) return -1;
  std::vector<std::string> cells;
  std::string cell;
  for (size_t i = at + 1; i < err.size() && err[i] != '\n'; ++i) {
    if (err[i] == '|') cells.push_back(cell), cell.clear();
    else cell += err[i];
  }
  if (cells.size() < 6) return -1;
  try {
    return std::stoll(cells[5]);
  } catch (const std::exception&) {
    return -1;
  }
}

void checker::speed(stage_record& s) {
  if (!one_.made || !one_q4_.made) {
    s.status = "skipped: the ~1B files were not made";
    return;
  }
  s.status = "passed";
  // On sim (a dry run) the speeds are not a GPU's: short runs prove the stage's steps and schedule.
  // A prompt of 320 tokens on a GPU, so each decoded token's attention reads past 128 positions (the
  // flash-decoding split) as it will in use.
  const bool brief = o_.small || o_.device == "sim";
  const int n_prompt = brief ? 16 : 320, n_gen = brief ? 8 : 64;
  const std::string reps = brief ? "1" : "2", ctx = std::to_string(n_prompt + n_gen);
  // The planner's predictions for this device, per budget.
  std::string gpu_name = device_.value("name", std::string());
  if (gpu_name.rfind("NVIDIA ", 0) == 0) gpu_name = gpu_name.substr(7);
  auto predict = [&](const model_file& m, double fraction) -> json {
    std::vector<std::string> a{bin("hotcold"), "plan", "-m", m.path, "--vram-budget", fmt::format("{:.4f}", m.gib(fraction)), "-c", ctx, "--json"};
    const auto t = threads();
    a.insert(a.end(), t.begin(), t.end());
    if (cpu_gbs_ > 0) a.insert(a.end(), {"--cpu-bandwidth", fmt::format("{:.3f}", cpu_gbs_)});  // one measurement for every prediction
    auto named = a;
    named.insert(named.end(), {"--gpu", gpu_name});
    auto r = o_.device == "cuda" ? step("plan", named, 60) : step_result{};
    if (!r.ok()) {  // not a GPU the planner knows: its measured copy bandwidth, PCIe 4.0 x16
      const double bw = device_.value("copy_gb_per_s", 0.0) > 0 ? device_.value("copy_gb_per_s", 0.0) * 0.5 : 100.0;
      a.insert(a.end(), {"--gpu-bandwidth", fmt::format("{:.0f}", bw), "--pcie", "32"});
      r = step("plan", a, 60);
    }
    auto j = r.ok() ? json::parse(r.out, nullptr, false) : json();
    if (j.is_object() && cpu_gbs_ <= 0) cpu_gbs_ = j.value("cpu_bandwidth_gbs", 0.0);
    return j;
  };
  struct config {
    std::string name;
    const model_file* m;
    double fraction;  // of the file in the device's budget; 0: the CPU alone; < 0: the whole device
    std::string predicted;  // which of the plan's figures predicts it
    std::string wait = {};  // --device-wait (empty: the default, auto)
  };
  const std::vector<config> configs{
      {"CPU only, sparse", &one_, 0, "cpu_only_tokens_per_s"},
      {"CPU only, dense", &one_dense_, 0, ""},
      {"hybrid, 25% in VRAM", &one_, 0.25, "hybrid_tokens_per_s"},
      // The waits' choice measured (auto blocks where the cold pool takes every core): the same run spinning.
      {"hybrid, 25%, spinning waits", &one_, 0.25, "hybrid_tokens_per_s", "spin"},
      {"hybrid, 50% in VRAM", &one_, 0.5, "hybrid_tokens_per_s"},
      {"whole layers, 25% in VRAM", &one_dense_, 0.25, "layer_offload_tokens_per_s"},
      {"whole layers, 50% in VRAM", &one_dense_, 0.5, "layer_offload_tokens_per_s"},
      {"all in VRAM, dense", &one_dense_, -1, ""},
      {"all in VRAM, sparse", &one_, -1, ""},
      {"all in VRAM, dense Q4_0", &one_q4_, -1, ""},
  };
  int k = 0;
  for (const auto& c : configs) {
    json row{{"configuration", c.name}, {"file", c.m->path}};
    if (left() < 5) {
      row["status"] = "skipped for time";
      speed_.push_back(row);
      skip_for_time(s, c.name);
      continue;
    }
    std::vector<std::string> a{bin("hotcold"), "bench", "-m", c.m->path, "-p", std::to_string(n_prompt), "-n", std::to_string(n_gen), "-r", reps, "-c", ctx, "--json"};
    double budget = c.fraction > 0 ? c.m->gib(c.fraction) : 0;
    if (c.fraction < 0 && o_.device == "sim") budget = c.m->gib(2.0);  // sim needs a budget; a GPU offers its free memory
    if (c.fraction == 0) a.insert(a.end(), {"--device", "cpu"});
    else {
      const auto d = device_args(budget);
      a.insert(a.end(), d.begin(), d.end());
    }
    const auto t = threads();
    a.insert(a.end(), t.begin(), t.end());
    if (!c.wait.empty()) a.insert(a.end(), {"--device-wait", c.wait});
    row["budget_gib"] = c.fraction < 0 && o_.device == "cuda" ? json("all free memory") : json(budget);
    if (!c.predicted.empty()) {
      const std::string key = fmt::format("{:.2f}", c.fraction);
      if (!plans_.contains(key)) plans_[key] = predict(one_, c.fraction > 0 ? c.fraction : 0.25);
      if (plans_[key].contains(c.predicted)) row["predicted_decode_tokens_per_s"] = plans_[key][c.predicted];
    }
    const auto r = step("bench-" + std::to_string(k++), a);
    const auto j = r.ok() ? json::parse(r.out, nullptr, false) : json();
    if (j.is_object() && j.contains("decode_tokens_per_s")) {
      for (const char* f : {"decode_tokens_per_s", "prefill_tokens_per_s", "host_bytes_per_token", "device_bytes_per_token", "launches_per_token",
                            "copies_per_token", "syncs_per_token", "device_job_ms_per_token", "device_wait"})
        if (j.contains(f)) row[f] = j[f];
      row["status"] = "measured";
    } else {
      row["status"] = r.timed_out ? "stopped: over the stage's time share" : "failed: " + last_lines(r.err, 1);
      if (r.timed_out) over_time(s, c.name);
      else s.status = "could not run", s.notes.push_back(c.name + ": " + last_lines(r.err, 1));
    }
    speed_.push_back(row);
  }
}

}  // namespace hotcold::gpu_check::detail
