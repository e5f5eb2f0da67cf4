// The CAF runtime as hotcold configures it: threads as asked, typed request/response works.
#include <gtest/gtest.h>

#include <caf/all.hpp>

#include "actors/runtime.hpp"

namespace hotcold::actors {
namespace {

TEST(Runtime, SetsSchedulerThreads) {
  caf::actor_system_config cfg;
  configure(cfg, {3});
  EXPECT_EQ(caf::get_or(cfg, "scheduler.max-threads", size_t{0}), 3u);
  EXPECT_GE(scheduler_threads({}), 1u);
}

TEST(Runtime, ActorsAnswerRequests) {
  caf::actor_system_config cfg;
  configure(cfg, {2});
  caf::actor_system sys{cfg};
  auto doubler = sys.spawn([]() -> caf::behavior {
    return {[](int x) { return x * 2; }};
  });
  caf::scoped_actor self{sys};
  int got = 0;
  self->request(doubler, std::chrono::seconds(10), 21)
      .receive([&](int r) { got = r; }, [&](caf::error& e) { ADD_FAILURE() << caf::to_string(e); });
  EXPECT_EQ(got, 42);
  self->send_exit(doubler, caf::exit_reason::user_shutdown);
}

}  // namespace
}  // namespace hotcold::actors
