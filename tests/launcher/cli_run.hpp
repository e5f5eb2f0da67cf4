#pragma once
// The `hotcold` command run as a user runs it (stdout, stderr, exit code), and a small model made by
// gen-model once a test binary: the command-line suites' shared tools.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace hotcold::test {

struct result {
  int code;
  std::string out, err;
};

inline std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

inline result run(const std::vector<std::string>& args, const std::string& env = "") {
  auto err_path = std::filesystem::temp_directory_path() / ("hotcold-cli-" + std::to_string(getpid()) + ".err");
  std::string cmd = env;
  cmd += ' ';
  cmd += quote(HOTCOLD_BIN);
  for (const auto& a : args) {
    cmd += ' ';
    cmd += quote(a);
  }
  cmd += " 2>";
  cmd += quote(err_path.string());
  FILE* p = popen(cmd.c_str(), "r");
  result r{};
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) r.out.append(buf, n);
  int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream e(err_path);
  std::stringstream ss;
  ss << e.rdbuf();
  r.err = ss.str();
  std::filesystem::remove(err_path);
  return r;
}

inline const std::string llama = HOTCOLD_FIXTURES_DIR "/vocab/ggml-vocab-llama-spm.gguf";
inline const std::string falcon = HOTCOLD_FIXTURES_DIR "/vocab/ggml-vocab-falcon.gguf";

// A llama ReLU file of 2 layers (embd 64, F16), made once a process.
inline const std::string& small_model() {
  struct made_model {
    std::string path = (std::filesystem::temp_directory_path() / ("hotcold-cli-model-" + std::to_string(getpid()) + ".gguf")).string();
    made_model() {
      auto r = run({"gen-model", "--arch", "llama", "--act", "relu", "--embd", "64", "--layers", "2", "--ffn", "128", "--heads", "4",
                    "--kv-heads", "2", "--active", "0.2", "--vocab", llama, "--type", "f16", "--seed", "3", "-o", path});
      EXPECT_EQ(r.code, 0) << r.err;
    }
    ~made_model() { std::filesystem::remove(path); }
  };
  static const made_model m;
  return m.path;
}

}  // namespace hotcold::test
