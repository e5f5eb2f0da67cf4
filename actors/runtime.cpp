#include "actors/runtime.hpp"

#include <algorithm>
#include <thread>

namespace hotcold::actors {

size_t scheduler_threads(const runtime_options& options) {
  if (options.scheduler_threads > 0) return options.scheduler_threads;
  size_t hw = std::max(1u, std::thread::hardware_concurrency());
  return std::max<size_t>(1, hw / 2);
}

void configure(caf::actor_system_config& cfg, const runtime_options& options) {
  cfg.set("scheduler.max-threads", scheduler_threads(options));
}

}  // namespace hotcold::actors
