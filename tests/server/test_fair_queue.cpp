// The queue's shares: a flooding client beside a polite one, limits in all and per client, requests
// leaving it before their turn.
#include <gtest/gtest.h>

#include <string>

#include "server/fair_queue.hpp"

namespace {

using hotcold::server::fair_queue;

// A client that sends one request while another has hundreds waiting is next; then they alternate;
// each client's own requests go in the order they came.
TEST(FairQueue, APoliteClientIsNextBesideAFlood) {
  fair_queue q(1000, 1000);
  for (int64_t t = 0; t < 300; ++t) ASSERT_EQ(q.push("flood", t), fair_queue::refusal::none);
  EXPECT_EQ(q.pop(), 0);  // the flood's first starts while it is alone
  EXPECT_EQ(q.pop(), 1);
  ASSERT_EQ(q.push("polite", 1000), fair_queue::refusal::none);
  EXPECT_EQ(q.pop(), 1000);  // next, before the flood's 298 others
  ASSERT_EQ(q.push("polite", 1001), fair_queue::refusal::none);
  ASSERT_EQ(q.push("polite", 1002), fair_queue::refusal::none);
  EXPECT_EQ(q.pop(), 2);  // then in turn
  EXPECT_EQ(q.pop(), 1001);
  EXPECT_EQ(q.pop(), 3);
  EXPECT_EQ(q.pop(), 1002);
  EXPECT_EQ(q.pop(), 4);
  EXPECT_EQ(q.pop(), 5);
  EXPECT_EQ(q.size(), 300 - 6);
  EXPECT_EQ(q.depths(), (std::map<std::string, int64_t>{{"flood", 294}}));
}

// Three clients with work waiting are served round-robin, in the order they first came.
TEST(FairQueue, ClientsTakeTurns) {
  fair_queue q(100, 100);
  for (int64_t i = 0; i < 3; ++i)
    for (const char* c : {"a", "b", "c"}) ASSERT_EQ(q.push(c, (c[0] - 'a') * 10 + i), fair_queue::refusal::none);
  std::vector<int64_t> order;
  while (auto t = q.pop()) order.push_back(*t);
  EXPECT_EQ(order, (std::vector<int64_t>{0, 10, 20, 1, 11, 21, 2, 12, 22}));
  EXPECT_FALSE(q.pop());
}

TEST(FairQueue, SharesAndLimits) {
  fair_queue q(10, 4);
  for (int64_t t = 0; t < 4; ++t) ASSERT_EQ(q.push("flood", t), fair_queue::refusal::none);
  EXPECT_EQ(q.push("flood", 4), fair_queue::refusal::client_full);  // its share
  EXPECT_EQ(q.waiting_of("flood"), 4);
  for (int64_t t = 0; t < 4; ++t) ASSERT_EQ(q.push("b", 10 + t), fair_queue::refusal::none);
  ASSERT_EQ(q.push("c", 20), fair_queue::refusal::none);
  ASSERT_EQ(q.push("d", 30), fair_queue::refusal::none);
  EXPECT_EQ(q.push("e", 40), fair_queue::refusal::full);  // the whole queue
  EXPECT_EQ(q.pop(), 0);
  EXPECT_EQ(q.push("flood", 5), fair_queue::refusal::none);  // room in its share again
  fair_queue none(0, 0);
  EXPECT_EQ(none.push("a", 1), fair_queue::refusal::full);
}

// A request cancelled (or whose client left) before its turn leaves the queue; the rest keep their order.
TEST(FairQueue, RemovedRequestsNeverStart) {
  fair_queue q(10, 10);
  for (int64_t t = 0; t < 4; ++t) q.push("a", t);
  q.push("b", 9);
  EXPECT_TRUE(q.remove(1));
  EXPECT_FALSE(q.remove(1));
  EXPECT_TRUE(q.remove(9));
  EXPECT_FALSE(q.remove(77));
  EXPECT_EQ(q.size(), 3);
  std::vector<int64_t> order;
  while (auto t = q.pop()) order.push_back(*t);
  EXPECT_EQ(order, (std::vector<int64_t>{0, 2, 3}));
}

// However many clients come and go, what is remembered of the idle ones stays bounded, and a client
// served long ago counts as new.
TEST(FairQueue, ManyClientsComeAndGo) {
  fair_queue q(100, 10);
  for (int64_t i = 0; i < 20000; ++i) {
    ASSERT_EQ(q.push("c" + std::to_string(i), i), fair_queue::refusal::none);
    ASSERT_EQ(q.pop(), i);
  }
  EXPECT_EQ(q.size(), 0);
  q.push("c5", 1);
  q.push("c19999", 2);
  EXPECT_EQ(q.pop(), 1);  // forgotten: as if new, before the one served last
}

}  // namespace
