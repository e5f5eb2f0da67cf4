// hotcold-gpu-check all: the GPU check's stages, each a set of child processes (gpu_check/child_steps: the bundle's own
// hotcold, hotcold-gpu-check and test binaries) run under a deadline, so a hang or a crash on the
// GPU stops one step, not the check; then the table and the JSON (docs/gpu.md, "The bundle").
#include "gpu_check/checker.hpp"

namespace hotcold::gpu_check {
namespace detail {

int checker::run() {
  fs::create_directories(work_);
  json_path_ = o_.json_path.empty() ? (work_ / "gpu-check.json").string() : o_.json_path;
  const double total = o_.minutes * 60;
  const double shares[] = {0.25, 0.4, 0.35};
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
  // The generated files are made in the background from the start, while stage 1 checks the
  // kernels (gen-model and prepare use the CPU; the kernel checks the GPU), until stage 2's end.
  const auto files = model_plan();
  plan_schedule({shares[0] * total, shares[1] * total, shares[2] * total});
  const auto t_all = clock_type::now();
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
  if (code == gpu_check_ok && speed_slow_) code = gpu_check_slow;
  if (hybrid_wrong_) code = gpu_check_hybrid_wrong;
  if (kernel_wrong_) code = gpu_check_kernel_wrong;
  return finish(code);
}

std::vector<std::string> checker::threads() const {
  return o_.threads > 0 ? std::vector<std::string>{"-t", std::to_string(o_.threads)} : std::vector<std::string>{};
}

std::vector<std::string> checker::device_args(double budget_gib) const {
  std::vector<std::string> a{"--device", o_.device};
  if (o_.device == "sim") a.push_back("--sim-kernels");
  if (budget_gib > 0) a.insert(a.end(), {"--vram-budget", fmt::format("{:.4f}", budget_gib)});
  return a;
}

std::string checker::now_text() {
  const std::time_t t = std::time(nullptr);
  char b[32];
  std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return b;
}

step_result checker::step(const std::string& tag, std::vector<std::string> argv, double limit) {
  return run_steps({spec(tag, std::move(argv))}, std::min(limit, left())).front();
}

std::vector<std::string> checker::threads_of(int n) const {
  const int all = o_.threads > 0 ? o_.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return {"-t", std::to_string(std::max(1, all / n))};
}

void checker::over_time(stage_record& s, const std::string& what) {
  s.status = "over its time share";
  s.notes.push_back(what + ": stopped, over the stage's time share");
}

void checker::skip_for_time(stage_record& s, const std::string& what) {
  if (s.status == "passed") s.status = "over its time share";
  s.skipped.push_back(what);
}

void checker::kernels(stage_record& s) {
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
  if (!slow.empty()) {  // (the speed's own verdict: exit status 4 where all else passed)
    speed_slow_ = true;
    s.notes.push_back(fmt::format("{} kernels below their speed floor: {}", slow.size(), fmt::join(slow, "; ")));
  }
  // compute-sanitizer's tools over the small shapes, where it exists and can run: memcheck (out of
  // bounds, misaligned), racecheck (shared memory races), initcheck (device memory read before written).
  std::string sanitizer;
  for (const char* p : {"compute-sanitizer", "/usr/local/cuda/bin/compute-sanitizer"}) {
    const std::string probe = std::string("command -v ") + p + " >/dev/null 2>&1";
    if (std::system(probe.c_str()) == 0) {
      sanitizer = p;
      break;
    }
  }
  for (const char* tool : {"memcheck", "racecheck", "initcheck"}) {
    json& out = sanitizers_[tool];
    if (sanitizer.empty()) {
      out = {{"ran", false}, {"note", "compute-sanitizer not found"}};
      s.notes.push_back(fmt::format("{}: compute-sanitizer not found", tool));
      continue;
    }
    if (left() < 5) {
      out = {{"ran", false}, {"note", "no time left in the stage's share"}};
      skip_for_time(s, tool);
      continue;
    }
    const auto m = step(tool, {sanitizer, "--tool", tool, "--error-exitcode", "9", "--print-limit", "20", bin("hotcold-gpu-check"), "kernels", "--small"});
    const std::string text = m.out + m.err;
    const auto at = text.rfind("ERROR SUMMARY: ");
    const int errors = at == std::string::npos ? -1 : std::atoi(text.c_str() + at + 15);
    if (m.timed_out) {  // (the checks above stand; the sanitizers are the stage's extra)
      out = {{"ran", false}, {"note", "stopped: the stage's time share ran out"}};
      s.notes.push_back(fmt::format("{}: stopped, the stage's time share ran out before it finished", tool));
    } else if (errors > 0 || m.status == 9) {
      out = {{"ran", true}, {"errors", errors}};
      kernel_wrong_ = true;
      s.status = "failed";
      s.notes.push_back(fmt::format("{} found {} errors (log: {})", tool, errors, (work_ / (std::string(tool) + ".out")).string()));
    } else if (errors == 0 && m.status == 0) {
      out = {{"ran", true}, {"errors", 0}};
      s.notes.push_back(fmt::format("{}: 0 errors on the small shapes", tool));
    } else {  // the sanitizer itself could not run here (gVisor: "Device not supported")
      out = {{"ran", false}, {"note", last_lines(text, 2)}};
      s.notes.push_back(fmt::format("{} could not run here: {}", tool, last_lines(text, 1)));
    }
  }
}

int checker::finish(int code) {
  if (maker_.joinable()) maker_.join();
  const char* outcome = code == gpu_check_ok ? "ok" : code == gpu_check_no_device ? "no device" : code == gpu_check_kernel_wrong ? "a kernel is wrong"
                      : code == gpu_check_hybrid_wrong ? "the hybrid is wrong" : code == gpu_check_slow ? "slow: a kernel below its speed floor" : "incomplete";
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
                o_.small || o_.device == "sim" ? "16-token prompt, 8 decoded" : "320-token prompt, 64 decoded, 2 repetitions",
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
  std::printf("\nspeed: %s\noutcome: %s (exit status %d)\n", speed_slow_ ? "a kernel below its floor" : "no timed kernel below its floor", outcome, code);
  json stages = json::array();
  for (const auto& s : stages_)
    stages.push_back({{"name", s.name}, {"share_s", s.share_s}, {"seconds", s.seconds}, {"status", s.status}, {"notes", s.notes}, {"skipped_for_time", s.skipped}});
  const json j{{"tool", "hotcold gpu-check"}, {"time", now_text()}, {"minutes", o_.minutes}, {"small_shapes", o_.small}, {"device", device_},
               {"outcome", outcome}, {"exit_status", code}, {"stages", stages}, {"kernel_checks", kernels_.value("checks", json::array())},
               {"kernel_speed", ks}, {"speed_verdict", speed_slow_ ? "below a floor" : "ok"}, {"sanitizers", sanitizers_},
               {"hybrid_checks", hybrid_checks_}, {"suite_tests", suite_tests_}, {"speed_shape", one_.shape}, {"speed", speed_}, {"plans", plans_},
               {"schedule", schedule_}, {"archive", (work_ / "gpu-check-results.tar.gz").string()}};
  {
    std::ofstream out(json_path_);
    out << j.dump(2) << "\n";
  }
  std::printf("the same as JSON: %s\n", json_path_.c_str());
  if (fs::path(json_path_).parent_path() != work_) fs::copy_file(json_path_, work_ / "gpu-check.json", fs::copy_options::overwrite_existing);
  pack_results();
  return code;
}

}  // namespace detail

int run_gpu_check(const gpu_check_options& o) { return detail::checker(o).run(); }

}  // namespace hotcold::gpu_check
