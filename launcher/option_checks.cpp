#include "launcher/option_checks.hpp"

#include <charconv>
#include <cmath>
#include <thread>

#include <fmt/format.h>

#include "protocol/messages.hpp"
#include "server/sampling_map.hpp"

namespace hotcold::launcher {

int max_threads() { return std::max(8, 4 * static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))); }

CLI::Validator thread_count() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        long long v = 0;
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec != std::errc() || end != s.data() + s.size()) return fmt::format("'{}' is not a whole number", s);
        if (v > max_threads())
          return fmt::format("{} threads is more than this machine can use: at most {} (4 per hardware thread; 0 or less: every hardware thread)", s,
                             max_threads());
        return {};
      },
      "THREADS", "thread_count");
}

CLI::Validator finite_in(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        double v = 0;
        try {
          size_t used = 0;
          v = std::stod(s, &used);
          if (used != s.size()) return fmt::format("'{}' is not a number", s);
        } catch (const std::out_of_range&) {
          return fmt::format("'{:.40}' is out of range: from {:g} to {:g}", s, lo, hi);
        } catch (...) {
          return fmt::format("'{:.40}' is not a number", s);
        }
        if (!std::isfinite(v) || v < lo || v > hi) return fmt::format("{:.40} is not a finite number from {:g} to {:g}", s, lo, hi);
        return {};
      },
      fmt::format("FLOAT in [{:g}, {:g}]", lo, hi), "finite_in");
}

CLI::Validator whole_in(long long lo, long long hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        long long v = 0;
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec != std::errc() || end != s.data() + s.size() || v < lo || v > hi) return fmt::format("'{:.40}' is not a whole number from {} to {}", s, lo, hi);
        return {};
      },
      fmt::format("INT in [{}, {}]", lo, hi), "whole_in");
}

void check_sampling_flags(const sampling_params& p) {
  try {
    protocol::check_sampling(server::wire_sampling_of(p, std::nullopt));
  } catch (const std::invalid_argument& e) {
    // The protocol's field names, as the flags are spelt.
    std::string m = e.what();
    for (auto [field, flag] : {std::pair{"\"temperature\"", "--temp"}, std::pair{"\"top_p\"", "--top-p"}, std::pair{"\"min_p\"", "--min-p"},
                               std::pair{"\"repeat_penalty\"", "--repeat-penalty"}, std::pair{"\"repeat_last_n\"", "--repeat-last-n"},
                               std::pair{"\"frequency_penalty\"", "--frequency-penalty"}, std::pair{"\"presence_penalty\"", "--presence-penalty"}})
      if (m.rfind(field, 0) == 0) m = flag + m.substr(std::string(field).size());
    throw std::invalid_argument(m);
  }
}

}  // namespace hotcold::launcher
