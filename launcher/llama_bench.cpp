#include "launcher/llama_bench.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

extern char** environ;

namespace hotcold::launcher {

llama_bench_run parse_llama_bench_json(const std::string& text) {
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_array()) throw std::runtime_error("llama-bench's output is not a JSON array (was it run with -o json?)");
  llama_bench_run r;
  for (const auto& test : j) {
    if (!test.is_object() || !test.contains("n_prompt") || !test.contains("n_gen") || !test.contains("avg_ts") || !test["avg_ts"].is_number())
      throw std::runtime_error("a test in llama-bench's output lacks n_prompt, n_gen or avg_ts");
    const int64_t n_prompt = test["n_prompt"].get<int64_t>(), n_gen = test["n_gen"].get<int64_t>();
    const double ts = test["avg_ts"].get<double>();
    if (n_prompt > 0 && n_gen == 0) r.prefill_tokens_per_s = ts;
    else if (n_gen > 0 && n_prompt == 0) r.decode_tokens_per_s = ts;
    if (test.contains("build_commit") && test["build_commit"].is_string()) r.build = test["build_commit"].get<std::string>();
  }
  return r;
}

void check_llama_bench(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || ::access(path.c_str(), X_OK) != 0)
    throw std::invalid_argument(fmt::format("--vs-llama-bench {}: not an executable file (give the path of llama.cpp's llama-bench)", path));
}

llama_bench_run run_llama_bench(const std::string& path, const std::string& model, int threads, int n_prompt, int n_gen, int depth) {
  std::vector<std::string> args{path, "-m", model, "-t", std::to_string(threads), "-p", std::to_string(n_prompt), "-n", std::to_string(n_gen),
                                "-r", "1", "-o", "json", "--mmap", "0", "-ngl", "0"};
  if (depth > 0) args.insert(args.end(), {"-d", std::to_string(depth)});  // (builds before -d existed: only when asked)
  std::string command;
  for (const auto& a : args) command += (command.empty() ? "" : " ") + a;
  const auto dir = std::filesystem::temp_directory_path();
  const std::string out_path = (dir / fmt::format("hotcold-llama-bench-{}.out", ::getpid())).string();
  const std::string err_path = (dir / fmt::format("hotcold-llama-bench-{}.err", ::getpid())).string();
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, path.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (spawned != 0) throw std::runtime_error(fmt::format("cannot run {}: {}", command, std::strerror(spawned)));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  auto slurp = [](const std::string& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  const std::string out = slurp(out_path), err = slurp(err_path);
  std::filesystem::remove(out_path);
  std::filesystem::remove(err_path);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    const std::string tail = err.size() > 600 ? err.substr(err.size() - 600) : err;
    throw std::runtime_error(fmt::format("{} failed ({}){}{}", command,
                                         WIFEXITED(status) ? fmt::format("exit {}", WEXITSTATUS(status)) : fmt::format("signal {}", WTERMSIG(status)),
                                         tail.empty() ? "" : ": ", tail));
  }
  try {
    return parse_llama_bench_json(out);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(fmt::format("{}: {}", command, e.what()));
  }
}

}  // namespace hotcold::launcher
