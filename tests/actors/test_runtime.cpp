// The CAF runtime as hotcold configures it: threads as asked, typed request/response works.
#include <gtest/gtest.h>

#include <caf/all.hpp>

#include "actors/messages.hpp"
#include "actors/runtime.hpp"

namespace hotcold::actors {
namespace {

TEST(Runtime, SetsSchedulerThreads) {
  caf::actor_system_config cfg;
  configure(cfg, {3});
  EXPECT_EQ(caf::get_or(cfg, "scheduler.max-threads", size_t{0}), 3u);
  // Work sharing: idle scheduler threads are woken by messages, not polled with 10 ms sleeps.
  EXPECT_EQ(caf::get_or(cfg, "scheduler.policy", caf::atom("stealing")), caf::atom("sharing"));
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

// An activation sent to another actor arrives as the sender's buffer: same address, one more owner
// while the receiver holds it, and the values untouched.
TEST(Runtime, ActivationsTravelAsPointers) {
  caf::actor_system_config cfg;
  configure(cfg, {2});
  caf::actor_system sys{cfg};
  auto keeper = std::make_shared<shared_tensor>();
  auto receiver = sys.spawn([keeper]() -> caf::behavior {
    return {[keeper](const shared_tensor& a) {
      *keeper = a;  // hold it, as a pipeline stage holds its input
      return reinterpret_cast<uintptr_t>(a.data());
    }};
  });
  std::vector<float> v(1 << 20);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  auto a = shared_tensor::wrap(std::move(v), 256, 4096, 7, 3);
  caf::scoped_actor self{sys};
  uintptr_t seen = 0;
  self->request(receiver, std::chrono::seconds(10), a)
      .receive([&](uintptr_t p) { seen = p; }, [&](caf::error& e) { ADD_FAILURE() << caf::to_string(e); });
  EXPECT_EQ(seen, reinterpret_cast<uintptr_t>(a.data()));
  EXPECT_EQ(keeper->values.get(), a.values.get());
  EXPECT_GE(a.values.use_count(), 2);
  EXPECT_EQ(keeper->step, 7);
  EXPECT_EQ(keeper->layer, 3);
  EXPECT_EQ(keeper->data()[12345], 12345.0f);
  self->send_exit(receiver, caf::exit_reason::user_shutdown);
}

}  // namespace
}  // namespace hotcold::actors
