#include "gpu_check/child_steps.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

namespace hotcold::gpu_check {
namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

double since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

}  // namespace

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string last_lines(const std::string& text, int n) {
  size_t at = text.size();
  while (at > 0 && (text[at - 1] == '\n' || text[at - 1] == '\r')) --at;
  size_t end = at;
  for (int k = 0; k < n && at > 0; ++k) {
    at = text.rfind('\n', at - 1);
    if (at == std::string::npos) {
      at = 0;
      break;
    }
  }
  return text.substr(at == 0 ? 0 : at + 1, end - (at == 0 ? 0 : at + 1));
}

std::vector<step_result> run_steps(const std::vector<step_spec>& steps, double timeout_s) {
  std::vector<step_result> rs(steps.size());
  if (timeout_s <= 1) {
    for (auto& r : rs) r.timed_out = true;
    return rs;
  }
  const auto t0 = clock_type::now();
  std::vector<pid_t> pids(steps.size(), -1);
  for (size_t i = 0; i < steps.size(); ++i) {
    std::string line;
    for (const auto& a : steps[i].argv) line += (line.empty() ? "" : " ") + (a.find(' ') == std::string::npos ? a : "'" + a + "'");
    std::printf("gpu-check: $ %s%s\n", line.c_str(), steps.size() > 1 ? " &" : "");
    std::fflush(stdout);
    const pid_t pid = fork();
    if (pid < 0) continue;
    if (pid == 0) {
      setpgid(0, 0);
      const int fo = open(steps[i].out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644), fe = open(steps[i].err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fo >= 0) dup2(fo, 1);
      if (fe >= 0) dup2(fe, 2);
      std::vector<char*> args;
      for (const auto& a : steps[i].argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execvp(args[0], args.data());
      std::fprintf(stderr, "cannot start %s\n", args[0]);
      _exit(127);
    }
    setpgid(pid, pid);
    pids[i] = pid;
  }
  std::vector<int> wstatus(steps.size(), 0);
  for (;;) {
    bool running = false;
    for (size_t i = 0; i < steps.size(); ++i) {
      if (pids[i] < 0) continue;
      if (waitpid(pids[i], &wstatus[i], WNOHANG) == pids[i]) {
        rs[i].seconds = since(t0);
        rs[i].status = WIFEXITED(wstatus[i]) ? WEXITSTATUS(wstatus[i]) : WIFSIGNALED(wstatus[i]) ? 128 + WTERMSIG(wstatus[i]) : -1;
        pids[i] = -1;
      } else {
        running = true;
      }
    }
    if (!running) break;
    if (since(t0) > timeout_s) {
      for (size_t i = 0; i < steps.size(); ++i)
        if (pids[i] > 0) kill(-pids[i], SIGTERM), rs[i].timed_out = true;
      std::this_thread::sleep_for(std::chrono::seconds(2));
      for (size_t i = 0; i < steps.size(); ++i)
        if (pids[i] > 0) {
          kill(-pids[i], SIGKILL);
          waitpid(pids[i], &wstatus[i], 0);
          rs[i].seconds = since(t0);
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (size_t i = 0; i < steps.size(); ++i) {
    auto& r = rs[i];
    r.out = read_file(steps[i].out);
    r.err = read_file(steps[i].err);
    const std::string who = steps.size() > 1 ? fs::path(steps[i].out).stem().string() + ": " : "";
    if (r.timed_out) std::printf("gpu-check:   %sstopped after %.0f s: over the time left to its stage\n", who.c_str(), r.seconds);
    else if (r.status != 0) std::printf("gpu-check:   %sexit status %d after %.1f s:\n%s\n", who.c_str(), r.status, r.seconds, last_lines(r.err + r.out, 8).c_str());
    else std::printf("gpu-check:   %sdone in %.1f s\n", who.c_str(), r.seconds);
  }
  std::fflush(stdout);
  return rs;
}

}  // namespace hotcold::gpu_check
