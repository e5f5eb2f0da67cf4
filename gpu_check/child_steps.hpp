#pragma once
// Child processes with a deadline, for the GPU check (gpu_check/run.cpp): each runs in its own
// process group with its stdout and stderr in files (kept, and read back), and is killed, with
// whatever it started, when it outlives the time it was given; several run at once.
#include <filesystem>
#include <string>
#include <vector>

namespace hotcold::gpu_check {

struct step_spec {
  std::vector<std::string> argv;  // argv[0]: the program (looked up in PATH when it has no slash)
  std::filesystem::path out, err;
};

struct step_result {
  int status = -1;  // exit status; 128 + signal when a signal ended it; -1 when it could not start
  bool timed_out = false;
  double seconds = 0;
  std::string out, err;
  bool ok() const { return status == 0 && !timed_out; }
};

// Runs the steps at the same time and waits for all of them, or until timeout_s (the rest are then
// killed and marked timed_out; at 1 s or less none starts). Prints each command line and how it ended.
std::vector<step_result> run_steps(const std::vector<step_spec>& steps, double timeout_s);

// A file's whole contents ("" when it cannot be read).
std::string read_file(const std::filesystem::path& p);
// The last n lines of text, without the final newline.
std::string last_lines(const std::string& text, int n);

}  // namespace hotcold::gpu_check
