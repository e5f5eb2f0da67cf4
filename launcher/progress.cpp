#include "launcher/progress.hpp"

#include <unistd.h>

#include <cstdio>

#include <fmt/format.h>

namespace hotcold::launcher {

progress_bar::progress_bar(std::string label) : label_(std::move(label)), tty_(isatty(STDERR_FILENO) != 0) {}

void progress_bar::update(int64_t done, int64_t total) {
  int percent = total > 0 ? static_cast<int>(100 * done / total) : 100;
  if (percent == last_percent_) return;
  if (tty_) {
    constexpr int width = 40;
    int filled = percent * width / 100;
    fmt::print(stderr, "\r{} [{}{}] {:3}% ({}/{})", label_, std::string(filled, '#'), std::string(width - filled, '.'), percent, done, total);
    std::fflush(stderr);
  } else if (percent / 10 != last_percent_ / 10) {
    fmt::print(stderr, "{}: {}% ({}/{})\n", label_, percent, done, total);
  }
  last_percent_ = percent;
}

void progress_bar::finish() {
  if (tty_ && last_percent_ >= 0) fmt::print(stderr, "\n");
}

}  // namespace hotcold::launcher
