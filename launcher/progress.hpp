#pragma once
// A progress bar on stderr, redrawn in place when stderr is a terminal, a line per 10% otherwise.
#include <cstdint>
#include <string>

namespace hotcold::launcher {

class progress_bar {
 public:
  explicit progress_bar(std::string label);
  void update(int64_t done, int64_t total);
  void finish();

 private:
  std::string label_;
  bool tty_;
  int last_percent_ = -1;
};

}  // namespace hotcold::launcher
