#pragma once
// The CAF actor system hotcold runs its pipeline on. CAF 0.17 (Debian) sizes its scheduler from
// the core count; on a 2-core machine the compute workers need cores too, so the scheduler's
// thread count is set explicitly.
#include <cstddef>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

namespace hotcold::actors {

struct runtime_options {
  size_t scheduler_threads = 0;  // 0: half the hardware threads, at least 1
};

// Applies the options to a CAF configuration before the actor_system is built from it.
void configure(caf::actor_system_config& cfg, const runtime_options& options);

size_t scheduler_threads(const runtime_options& options);

// Whether `sys` runs on CAF's deterministic test coordinator (scheduler.policy "testing"). The
// compute actors are detached (threads of their own) except there: scheduled like every other
// actor, so that a test runs each message in the order it chooses, on its own thread.
bool deterministic(const caf::actor_system& sys);

}  // namespace hotcold::actors
