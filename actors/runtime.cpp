#include "actors/runtime.hpp"

#include <algorithm>
#include <thread>

#include <caf/atom.hpp>
#include <caf/config_value.hpp>

namespace hotcold::actors {

bool deterministic(const caf::actor_system& sys) {
  return caf::get_or(sys.config(), "scheduler.policy", caf::atom("stealing")) == caf::atom("testing");
}

size_t scheduler_threads(const runtime_options& options) {
  if (options.scheduler_threads > 0) return options.scheduler_threads;
  size_t hw = std::max(1u, std::thread::hardware_concurrency());
  return std::max<size_t>(1, hw / 2);
}

void configure(caf::actor_system_config& cfg, const runtime_options& options) {
  cfg.set("scheduler.max-threads", scheduler_threads(options));
  // Work sharing: an idle scheduler thread sleeps on a condition variable and is woken by the next
  // message. CAF's default work stealing polls, and after a few milliseconds idle sleeps 10 ms at a
  // time — a step's reply could wait that long.
  cfg.set("scheduler.policy", caf::atom("sharing"));
}

}  // namespace hotcold::actors
