// hotcold-gpu-check all: the GPU check's stages, each a set of child processes (gpu_check/child_steps: the bundle's own
// hotcold, hotcold-gpu-check and test binaries) run under a deadline, so a hang or a crash on the
// GPU stops one step, not the check; then the table and the JSON (docs/gpu.md, "The bundle").
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "devices/device_info.hpp"
#include "gpu_check/child_steps.hpp"
#include "gpu_check/gpu_check.hpp"

namespace hotcold::gpu_check {
namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;
using json = nlohmann::json;

double since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

std::optional<json> read_json(const fs::path& p) {
  try {
    return json::parse(read_file(p));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

struct stage_record {
  std::string name;
  double share_s = 0, seconds = 0;
  std::string status = "not run";
  std::vector<std::string> notes;
  std::vector<std::string> skipped;  // what the stage left out for lack of time
};

// A generated model: its file, what it is, its size.
struct model_file {
  std::string name, path, shape;
  bool made = false;
  uint64_t bytes = 0;
  double gib(double fraction) const { return fraction * static_cast<double>(bytes) / double(1ull << 30); }
};

class checker {
 public:
  explicit checker(const gpu_check_options& o) : o_(o), work_(o.work) {}

  int run() {
    fs::create_directories(work_);
    json_path_ = o_.json_path.empty() ? (work_ / "gpu-check.json").string() : o_.json_path;
    const double total = o_.minutes * 60;
    const double shares[] = {0.2, 0.45, 0.35};
    const char* names[] = {"1 kernels vs the CPU", "2 hybrid vs model/reference", "3 speed"};
    for (int k = 0; k < 3; ++k) stages_.push_back({names[k], shares[k] * total, 0, "not run", {}, {}});
    std::printf("hotcold gpu-check: %s, %.1f minutes, device %s%s; work folder %s\n", now_text().c_str(), o_.minutes, o_.device.c_str(),
                o_.small ? " (small shapes)" : "", work_.c_str());
    if (o_.device == "cuda") {
      const auto probe = devices::probe_cuda();
      if (probe.devices.empty()) {
        device_ = {{"kind", "cuda"}, {"name", ""}, {"unavailable", probe.unavailable}};
        std::printf("gpu-check: no device: %s\n", probe.unavailable.c_str());
        for (auto& s : stages_) s.status = "skipped: no device";
        return finish(gpu_check_no_device);
      }
      const auto& d = probe.devices.front();
      device_ = {{"kind", "cuda"}, {"name", d.name}, {"memory_mib", d.total_memory >> 20}};
    } else {
      device_ = {{"kind", "sim"}, {"name", "sim (--sim-kernels: a GPU's jobs computed on the CPU)"}};
    }
    const auto t_all = clock_type::now();
    // The generated files are made in the background from the start, while stage 1 checks the
    // kernels (gen-model and prepare use the CPU; the kernel checks the GPU), until stage 2's end.
    const auto files = model_plan();
    const auto making_until = t_all + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>((shares[0] + shares[1]) * total));
    maker_ = std::thread([this, files, making_until] { made_ok_ = make_models(making_, files, making_until); });
    double planned = 0;
    for (int k = 0; k < 3; ++k) {
      planned += stages_[static_cast<size_t>(k)].share_s;
      deadline_ = t_all + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(planned));
      const auto t0 = clock_type::now();
      std::printf("\n== stage %s (until %.0f s of %.0f)\n", names[k], planned, total);
      std::fflush(stdout);
      auto& s = stages_[static_cast<size_t>(k)];
      if (k == 0) kernels(s);
      else if (k == 1) hybrid(s);
      else speed(s);
      s.seconds = since(t0);
    }
    int code = gpu_check_ok;
    for (const auto& s : stages_)
      if (s.status != "passed" && s.status.rfind("skipped", 0) != 0) code = gpu_check_incomplete;
    if (hybrid_wrong_) code = gpu_check_hybrid_wrong;
    if (kernel_wrong_) code = gpu_check_kernel_wrong;
    return finish(code);
  }

 private:
  double left() const { return std::chrono::duration<double>(deadline_ - clock_type::now()).count(); }
  std::string bin(const std::string& name) const { return (fs::path(o_.bin_dir) / name).string(); }
  std::vector<std::string> threads() const {
    return o_.threads > 0 ? std::vector<std::string>{"-t", std::to_string(o_.threads)} : std::vector<std::string>{};
  }
  std::vector<std::string> device_args(double budget_gib) const {
    std::vector<std::string> a{"--device", o_.device};
    if (o_.device == "sim") a.push_back("--sim-kernels");
    if (budget_gib > 0) a.insert(a.end(), {"--vram-budget", fmt::format("{:.4f}", budget_gib)});
    return a;
  }
  static std::string now_text() {
    const std::time_t t = std::time(nullptr);
    char b[32];
    std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
    return b;
  }
  step_spec spec(const std::string& tag, std::vector<std::string> argv) const { return {std::move(argv), work_ / (tag + ".out"), work_ / (tag + ".err")}; }
  step_result step(const std::string& tag, std::vector<std::string> argv, double limit = 1e30) {
    return run_steps({spec(tag, std::move(argv))}, std::min(limit, left())).front();
  }
  static double until(clock_type::time_point t) { return std::chrono::duration<double>(t - clock_type::now()).count(); }
  // Threads for each of n steps run at once.
  std::vector<std::string> threads_of(int n) const {
    const int all = o_.threads > 0 ? o_.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    return {"-t", std::to_string(std::max(1, all / n))};
  }
  // A step that ran out of time marks its stage; the stage goes on to say so, and later stages run.
  void over_time(stage_record& s, const std::string& what) {
    s.status = "over its time share";
    s.notes.push_back(what + ": stopped, over the stage's time share");
  }
  // Left out before it started: the stage had no time for it.
  void skip_for_time(stage_record& s, const std::string& what) {
    if (s.status == "passed") s.status = "over its time share";
    s.skipped.push_back(what);
  }

  // ---- 1: the kernels, then memcheck on small shapes ----
  void kernels(stage_record& s) {
    if (o_.device != "cuda") {
      s.status = "skipped: --device sim (the kernels need a GPU)";
      return;
    }
    // A device error stops a kernels run (the context may keep it); the checks after it run again in a
    // fresh process from where it stopped (its JSON's resume_from), until none is left or the time is.
    const auto kernels_until = clock_type::now() + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(left() * 0.7));
    kernels_ = {{"checks", json::array()}, {"speed", json::array()}, {"failed", 0}};
    step_result r;
    for (int from = 0, run = 0; from >= 0 && until(kernels_until) > 1; ++run) {
      const fs::path out = work_ / fmt::format("kernels-{}.json", run);
      fs::remove(out);  // (an earlier run's)
      r = step(fmt::format("kernels-{}", run), {bin("hotcold-gpu-check"), "kernels", "--json", out.string(), "--from", std::to_string(from)}, until(kernels_until));
      const auto j = read_json(out);
      from = -1;
      if (!j) break;
      for (const char* k : {"checks", "speed"})
        for (const auto& c : j->value(k, json::array())) kernels_[k].push_back(c);
      kernels_["failed"] = kernels_.value("failed", 0) + j->value("failed", 0);
      if (j->contains("copy_gb_per_s")) device_["copy_gb_per_s"] = (*j)["copy_gb_per_s"], device_["published_gb_per_s"] = (*j)["published_gb_per_s"];
      if (j->contains("resume_from")) {
        from = (*j)["resume_from"].get<int>();
        s.notes.push_back(fmt::format("a device error stopped the checks at {}; rerun from {} in a fresh process", from - 1, from));
      }
      if (from >= 0 && until(kernels_until) <= 1) skip_for_time(s, fmt::format("kernel checks from {} on", from));
    }
    const int n = static_cast<int>(kernels_.value("checks", json::array()).size()), failed = kernels_.value("failed", 0);
    double worst = 0;
    for (const auto& c : kernels_.value("checks", json::array()))
      if (c.value("limit", 0.0) > 0) worst = std::max(worst, c.value("error", 0.0) / c.value("limit", 1.0));
    if (r.timed_out) over_time(s, "the kernel checks");
    else if (r.status == 1 || failed > 0) {
      kernel_wrong_ = true;
      s.status = "failed";
      for (const auto& c : kernels_.value("checks", json::array()))
        if (!c.value("passed", false)) s.notes.push_back("wrong: " + c.value("name", std::string()) + fmt::format(" (error {:.3e}, limit {:.0e})", c.value("error", 0.0), c.value("limit", 0.0)));
    } else if (r.status != 0) {
      s.status = "could not run";
      s.notes.push_back(fmt::format("hotcold-gpu-check kernels: exit status {}: {}", r.status, last_lines(r.err + r.out, 2)));
    } else {
      if (s.skipped.empty()) s.status = "passed";
      s.notes.push_back(fmt::format("{} checks passed; the largest error is {:.2g} of its limit", n, worst));
    }
    // Speed judged: each kernel's GB/s against the copy's, below its floor named.
    std::vector<std::string> slow;
    for (const auto& k : kernels_.value("speed", json::array()))
      if (k.value("below_floor", false))
        slow.push_back(fmt::format("{} ({:.0f}% < {:.0f}%)", k.value("kernel", std::string()), 100 * k.value("fraction_of_peak", 0.0), 100 * k.value("floor", 0.0)));
    if (!slow.empty()) s.notes.push_back(fmt::format("{} kernels below their speed floor: {}", slow.size(), fmt::join(slow, "; ")));
    // compute-sanitizer's memcheck over the small shapes, where it exists and can run.
    std::string sanitizer;
    for (const char* p : {"compute-sanitizer", "/usr/local/cuda/bin/compute-sanitizer"}) {
      const std::string probe = std::string("command -v ") + p + " >/dev/null 2>&1";
      if (std::system(probe.c_str()) == 0) {
        sanitizer = p;
        break;
      }
    }
    if (sanitizer.empty()) {
      memcheck_ = {{"ran", false}, {"note", "compute-sanitizer not found"}};
      s.notes.push_back("memcheck: compute-sanitizer not found");
      return;
    }
    const auto m = step("memcheck", {sanitizer, "--tool", "memcheck", "--error-exitcode", "9", "--print-limit", "20", bin("hotcold-gpu-check"), "kernels", "--small"});
    const std::string text = m.out + m.err;
    const auto at = text.rfind("ERROR SUMMARY: ");
    const int errors = at == std::string::npos ? -1 : std::atoi(text.c_str() + at + 15);
    if (m.timed_out) {  // (the checks above stand; memcheck is the stage's extra)
      memcheck_ = {{"ran", false}, {"note", "stopped: the stage's time share ran out"}};
      s.notes.push_back("memcheck: stopped, the stage's time share ran out before it finished");
    } else if (errors > 0 || m.status == 9) {
      memcheck_ = {{"ran", true}, {"errors", errors}};
      kernel_wrong_ = true;
      s.status = "failed";
      s.notes.push_back(fmt::format("memcheck found {} errors (log: {})", errors, (work_ / "memcheck.out").string()));
    } else if (errors == 0 && m.status == 0) {
      memcheck_ = {{"ran", true}, {"errors", 0}};
      s.notes.push_back("memcheck: 0 errors on the small shapes");
    } else {  // the sanitizer itself could not run here (gVisor: "Device not supported")
      memcheck_ = {{"ran", false}, {"note", last_lines(text, 2)}};
      s.notes.push_back("memcheck could not run here: " + last_lines(text, 1));
    }
  }

  // ---- 2: generated models through actors + the device against model/reference ----
  struct to_make {
    model_file* m;
    std::vector<std::string> shape;
    std::string type;
    bool sparse;
    std::string tokens;  // what prepare profiles
    std::vector<std::string> train = {};  // prepare's training options
  };
  // Generates every file not made by an earlier run (at once: gen-model is one thread each), then
  // prepares the sparse ones (at once, the threads shared).
  bool make_models(stage_record& s, const std::vector<to_make>& files, clock_type::time_point deadline) {
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

  // The files the check makes (kept in the work folder: a rerun reuses them). The 7B shape proves the
  // 7B's widths (4096/11008, 32 heads) in two layers; the ~1B file (16 layers) is what the speeds
  // are measured on; a Q4_0 copy; a mixture of experts.
  std::vector<to_make> model_plan() {
    big_ = {"7b-shape", "", o_.small ? "512/2/1376, 8 heads" : "4096/2/11008, 32 heads (7B's layers, 2 of them)"};
    one_ = {"1b-shape", "", o_.small ? "256/4/704, 8 heads, 4 KV heads" : "2048/16/5632, 32 heads, 8 KV heads"};
    one_dense_ = one_;
    one_q4_ = {"1b-shape-q4_0", "", one_.shape + ", Q4_0"};
    moe_ = {"moe-shape", "", o_.small ? "qwen3moe 256/4, 8 experts of 256, 2 used" : "qwen3moe 1024/4, 8 experts of 1024, 2 used"};
    const std::vector<std::string> big_args = o_.small ? std::vector<std::string>{"--embd", "512", "--layers", "2", "--ffn", "1376", "--heads", "8", "--kv-heads", "8"}
                                                       : std::vector<std::string>{"--embd", "4096", "--layers", "2", "--ffn", "11008", "--heads", "32", "--kv-heads", "32"};
    const std::vector<std::string> one_args = o_.small ? std::vector<std::string>{"--embd", "256", "--layers", "4", "--ffn", "704", "--heads", "8", "--kv-heads", "4"}
                                                       : std::vector<std::string>{"--embd", "2048", "--layers", "16", "--ffn", "5632", "--heads", "32", "--kv-heads", "8"};
    // Tokens prepare profiles: enough to rank the neurons for a placement (the check compares with the
    // oracle given the neurons chosen, whatever they are).
    const std::string few = "64", more = "64";
    // A mixture of experts (docs/moe.md): attention, the head and some experts in device slots, the
    // rest on the CPU, the cache refilled as the prompt routes.
    const std::vector<std::string> moe_args{"--arch", "qwen3moe", "--act", "silu", "--embd", o_.small ? "256" : "1024", "--layers", "4",
                                            "--ffn", o_.small ? "256" : "1024", "--heads", "8", "--kv-heads", "4", "--experts", "8", "--experts-used", "2"};
    // Predictors of a fixed rank trained one epoch (prepare's rank search was the slowest step; the
    // check's oracle is given the neurons the run chose, and on these synthetic files rank 256 chooses
    // no more neurons than the search's).
    const std::vector<std::string> quick{"--rank", "256", "--epochs", "1"};
    return {{&one_, one_args, "f16", true, more, quick}, {&one_q4_, one_args, "q4_0", false, ""}, {&big_, big_args, "f16", true, few, quick}, {&moe_, moe_args, "f16", false, ""}};
  }

  void hybrid(stage_record& s) {
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
    };
    const std::vector<check> checks{
        {"7B-shape sparse F16, hybrid at 50%", &big_, 0.5, 1e-4},
        {"1B-shape sparse F16, hybrid at 25%", &one_, 0.25, 1e-4},
        {"1B-shape dense F16, whole layers at 50%", &one_dense_, 0.5, 1e-4},
        {"1B-shape dense Q4_0, whole layers at 50%", &one_q4_, 0.5, 1e-2},
        {"MoE-shape F16, experts split at 40%", &moe_, 0.4, 1e-4},
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
      std::vector<std::string> a{bin("hotcold"), "eval", "-m", c.m->path, "-p", prompt, "--pipeline", "actors", "-c", "256", "--oracle-json", (work_ / (tag + ".json")).string()};
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

  // Steps in waves whose memory (need, per step) fits what this machine has available, in order;
  // a step that needs more than that runs alone. Each wave gets the stage's time left.
  std::vector<step_result> run_in_waves(const std::vector<step_spec>& steps, const std::vector<uint64_t>& need) {
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
  static uint64_t available_memory() {
    std::ifstream in("/proc/meminfo");
    std::string key;
    uint64_t kib = 0;
    std::string unit;
    while (in >> key >> kib >> unit)
      if (key == "MemAvailable:") return kib * 1024;
    return uint64_t{1} << 40;  // (unknown: no limit)
  }

  // The hot neurons of a run's plan (its table's total row on stderr: "| total | ... | hot neurons |
  // hot rows MiB | device MiB |"); -1 without one.
  static int64_t hot_neurons_in(const std::string& err) {
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

  // ---- 3: tokens/s, side by side ----
  void speed(stage_record& s) {
    if (!one_.made || !one_q4_.made) {
      s.status = "skipped: the ~1B files were not made";
      return;
    }
    s.status = "passed";
    // On sim (a dry run) the speeds are not a GPU's: short runs prove the stage's steps and schedule.
    const bool brief = o_.small || o_.device == "sim";
    const int n_prompt = brief ? 16 : 128, n_gen = brief ? 8 : 64;
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

  // ---- 4: the table and the JSON ----
  int finish(int code) {
    if (maker_.joinable()) maker_.join();
    const char* outcome = code == gpu_check_ok ? "ok" : code == gpu_check_no_device ? "no device" : code == gpu_check_kernel_wrong ? "a kernel is wrong"
                        : code == gpu_check_hybrid_wrong ? "the hybrid is wrong" : "incomplete";
    const std::string device_name = device_.value("name", std::string());
    std::printf("\n==================== hotcold gpu-check: %s ====================\n", device_name.empty() ? "no device" : device_name.c_str());
    if (device_.contains("copy_gb_per_s"))
      std::printf("memory bandwidth: published %.0f GB/s, device-to-device copy %.0f GB/s\n", device_.value("published_gb_per_s", 0.0), device_.value("copy_gb_per_s", 0.0));
    std::printf("\n%-30s %8s %8s  %s\n", "stage", "time s", "share s", "result");
    for (const auto& s : stages_) {
      std::printf("%-30s %8.1f %8.0f  %s\n", s.name.c_str(), s.seconds, s.share_s, s.status.c_str());
      for (const auto& n : s.notes) std::printf("%-30s %8s %8s    %s\n", "", "", "", n.c_str());
      if (!s.skipped.empty()) std::printf("%-30s %8s %8s    skipped for time: %s\n", "", "", "", fmt::format("{}", fmt::join(s.skipped, "; ")).c_str());
    }
    if (!hybrid_checks_.empty()) {
      std::printf("\n%-44s %10s %10s %10s %10s %7s  %s\n", "against model/reference (actors)", "budget GiB", "rel RMS", "CPU's", "limit", "top-1", "result");
      for (const auto& c : hybrid_checks_)
        std::printf("%-44s %10.3f %10s %10s %10.1e %7s  %s\n", c.value("name", std::string()).c_str(), c.value("budget_gib", 0.0),
                    c.contains("rel_rms") ? fmt::format("{:.2e}", c.value("rel_rms", 0.0)).c_str() : "-",
                    c.contains("cpu_rel_rms") ? fmt::format("{:.2e}", c.value("cpu_rel_rms", 0.0)).c_str() : "-", c.value("limit", 0.0),
                    c.contains("positions") ? fmt::format("{}/{}", c.value("top1_same", 0), c.value("positions", 0)).c_str() : "-",
                    c.value("passed", false) ? "pass" : c.contains("error") ? ("no answer: " + c.value("error", std::string())).c_str() : "FAIL");
    }
    for (const auto& t : suite_tests_)
      std::printf("suite %-14s %s\n", t.value("binary", std::string()).c_str(), t.value("summary", std::string()).c_str());
    if (!speed_.empty()) {
      std::printf("\nspeed, %s (%s):\n%-28s %12s %12s %12s %12s %10s %10s %18s\n", one_.shape.c_str(),
                  o_.small || o_.device == "sim" ? "16-token prompt, 8 decoded" : "128-token prompt, 64 decoded, 2 repetitions",
                  "configuration", "budget GiB", "decode t/s", "predicted", "prefill t/s", "host MiB/t", "dev MiB/t", "launch/copy/sync");
      for (const auto& r : speed_) {
        auto num = [&](const char* k, double scale, const char* f) {
          return r.contains(k) && r[k].is_number() ? fmt::format(fmt::runtime(f), r[k].get<double>() * scale) : std::string("-");
        };
        const std::string trips = r.contains("launches_per_token") ? fmt::format("{:.0f}/{:.0f}/{:.0f}", r.value("launches_per_token", 0.0),
                                                                                   r.value("copies_per_token", 0.0), r.value("syncs_per_token", 0.0))
                                                                     : "-";
        std::printf("%-28s %12s %12s %12s %12s %10s %10s %18s%s\n", r.value("configuration", std::string()).c_str(),
                    r.contains("budget_gib") && r["budget_gib"].is_string() ? "all" : num("budget_gib", 1, "{:.3f}").c_str(), num("decode_tokens_per_s", 1, "{:.1f}").c_str(),
                    num("predicted_decode_tokens_per_s", 1, "{:.1f}").c_str(), num("prefill_tokens_per_s", 1, "{:.0f}").c_str(),
                    num("host_bytes_per_token", 1.0 / (1 << 20), "{:.1f}").c_str(), num("device_bytes_per_token", 1.0 / (1 << 20), "{:.1f}").c_str(), trips.c_str(),
                    r.value("status", std::string()) == "measured" ? "" : ("  " + r.value("status", std::string())).c_str());
      }
    }
    const auto ks = kernels_.value("speed", json::array());
    if (!ks.empty()) {
      std::printf("\nkernels, decode work (GB/s of the bytes each must read, against the %.0f GB/s copy):\n", device_.value("copy_gb_per_s", 0.0));
      for (const auto& k : ks)
        std::printf("  %-52s %9.1f us %7.0f GB/s %5.1f%% (floor %.0f%%)%s\n", k.value("kernel", std::string()).c_str(), k.value("us", 0.0), k.value("gb_per_s", 0.0),
                    100 * k.value("fraction_of_peak", 0.0), 100 * k.value("floor", 0.0), k.value("below_floor", false) ? " below its floor" : "");
    }
    std::printf("\noutcome: %s (exit status %d)\n", outcome, code);
    json stages = json::array();
    for (const auto& s : stages_)
      stages.push_back({{"name", s.name}, {"share_s", s.share_s}, {"seconds", s.seconds}, {"status", s.status}, {"notes", s.notes}, {"skipped_for_time", s.skipped}});
    const json j{{"tool", "hotcold gpu-check"}, {"time", now_text()}, {"minutes", o_.minutes}, {"small_shapes", o_.small}, {"device", device_},
                 {"outcome", outcome}, {"exit_status", code}, {"stages", stages}, {"kernel_checks", kernels_.value("checks", json::array())},
                 {"kernel_speed", ks}, {"memcheck", memcheck_}, {"hybrid_checks", hybrid_checks_}, {"suite_tests", suite_tests_},
                 {"speed_shape", one_.shape}, {"speed", speed_}, {"plans", plans_}};
    std::ofstream out(json_path_);
    out << j.dump(2) << "\n";
    std::printf("the same as JSON: %s\n", json_path_.c_str());
    return code;
  }

  const gpu_check_options& o_;
  fs::path work_;
  std::string json_path_;
  std::vector<stage_record> stages_;
  clock_type::time_point deadline_;
  json device_ = json::object(), kernels_ = json::object(), memcheck_ = json::object(), plans_ = json::object();
  json hybrid_checks_ = json::array(), suite_tests_ = json::array(), speed_ = json::array();
  bool kernel_wrong_ = false, hybrid_wrong_ = false;
  double cpu_gbs_ = 0;  // the planner's CPU bandwidth, measured by its first call
  model_file big_, one_, one_dense_, one_q4_, moe_;
  // The files made in the background (from the start until stage 2's end) and how that went.
  std::thread maker_;
  stage_record making_{"making the files", 0, 0, "passed", {}, {}};
  bool made_ok_ = false;

 public:
  ~checker() {
    if (maker_.joinable()) maker_.join();
  }
};

}  // namespace

int run_gpu_check(const gpu_check_options& o) { return checker(o).run(); }

}  // namespace hotcold::gpu_check
