// The stages' data connection (actors/stage_data.hpp): a step's frames there and back, the token
// that ties a request to its assignment, frames that are not a request, CurveZMQ's allow list, and
// the loss of the worker's end.
#include <gtest/gtest.h>

#include <condition_variable>
#include <deque>
#include <mutex>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "actors/stage_data.hpp"

namespace hotcold::actors {
namespace {

using namespace std::chrono_literals;

// A server on a free loopback port whose steps add each row's position to its values (so a reply
// that came from the wrong rows, or in the wrong order, reads wrong), and which takes `token`.
struct served {
  std::mutex m;
  std::string token_ = "t1";
  std::string token() {
    std::lock_guard lock(m);
    return token_;
  }
  void reassign(std::string t) {
    std::lock_guard lock(m);
    token_ = std::move(t);
  }
  std::unique_ptr<stage_data_server> server;
  uint16_t port = 0;
  explicit served(bool curve) {
    for (uint16_t p = 43100; p < 43400 && !server; p += 7) {
      try {
        server = std::make_unique<stage_data_server>(
            "127.0.0.1", p, curve,
            [this](const stage_step& s, std::vector<float>& out) -> std::string {
              if (s.token != token()) return "not this worker's current assignment";
              const size_t d = s.x.size() / s.seqs.size();
              out.assign(s.x.begin(), s.x.end());
              for (size_t r = 0; r < s.seqs.size(); ++r)
                for (size_t i = 0; i < d; ++i) out[r * d + i] += static_cast<float>(s.positions[r]);
              return {};
            },
            [this](const std::string& t) -> std::string { return t == token() ? "" : "not this worker's current assignment"; });
        port = p;
      } catch (const std::runtime_error&) {
      }
    }
  }
};

// A client whose replies wait in a queue.
struct replies {
  std::mutex m;
  std::condition_variable cv;
  std::deque<stage_data_reply> q;
  std::function<void(stage_data_reply)> sink() {
    return [this](stage_data_reply r) {
      std::lock_guard lock(m);
      q.push_back(std::move(r));
      cv.notify_all();
    };
  }
  std::optional<stage_data_reply> next(std::chrono::milliseconds wait = 5s) {
    std::unique_lock lock(m);
    if (!cv.wait_for(lock, wait, [&] { return !q.empty(); })) return std::nullopt;
    auto r = std::move(q.front());
    q.pop_front();
    return r;
  }
};

std::string floats(std::initializer_list<float> v) { return std::string(reinterpret_cast<const char*>(std::data(v)), v.size() * sizeof(float)); }

std::vector<float> as_floats(const std::string& b) {
  std::vector<float> v(b.size() / sizeof(float));
  std::memcpy(v.data(), b.data(), v.size() * sizeof(float));
  return v;
}

// Requests come back in order, each with its id, its rows' values computed, and the compute time;
// a ping answers on the assignment's token; a request with another token gets why, and the next
// one is served.
TEST(StageData, StepsComeBackInOrderAndATokenTiesThemToTheirAssignment) {
  served s(false);
  ASSERT_TRUE(s.server);
  replies r;
  stage_data_client c("127.0.0.1", s.port, "", {}, r.sink());
  c.send(1, "t1", {}, {}, {});
  c.send(2, "t1", {0, 1}, {3, 10}, floats({1, 2, 3, 4}));
  c.send(3, "old", {0}, {5}, floats({1, 2}));
  c.send(4, "t1", {1}, {7}, floats({-1, 0.5f}));
  auto ping = r.next();
  ASSERT_TRUE(ping);
  EXPECT_TRUE(ping->ok);
  EXPECT_EQ(ping->id, 1u);
  auto step = r.next();
  ASSERT_TRUE(step);
  EXPECT_EQ(step->id, 2u);
  EXPECT_TRUE(step->ok) << step->bytes;
  EXPECT_EQ(as_floats(step->bytes), (std::vector<float>{4, 5, 13, 14}));
  EXPECT_GT(step->compute_ns, 0);
  auto stale = r.next();
  ASSERT_TRUE(stale);
  EXPECT_EQ(stale->id, 3u);
  EXPECT_FALSE(stale->ok);
  EXPECT_EQ(stale->bytes, "not this worker's current assignment");
  auto after = r.next();
  ASSERT_TRUE(after);
  EXPECT_TRUE(after->ok);
  EXPECT_EQ(as_floats(after->bytes), (std::vector<float>{6, 7.5f}));
  s.reassign("t2");
  c.send(5, "t1", {}, {}, {});
  auto refused = r.next();
  ASSERT_TRUE(refused);
  EXPECT_FALSE(refused->ok);
}

// Frames that are not a request (too few, sizes that do not match their rows) get an error naming
// what came, and the server goes on serving.
TEST(StageData, FramesThatAreNotARequestGetWhy) {
  served s(false);
  ASSERT_TRUE(s.server);
  zmq::context_t ctx;
  zmq::socket_t d(ctx, zmq::socket_type::dealer);
  d.set(zmq::sockopt::rcvtimeo, 5000);
  d.connect(stage_data_address("127.0.0.1", s.port));
  auto ask = [&](std::vector<zmq::message_t> f) {
    zmq::send_multipart(d, f);
    std::vector<zmq::message_t> back;
    EXPECT_TRUE(zmq::recv_multipart(d, std::back_inserter(back)));
    return back.size() == 2 ? back[1].to_string() : std::string("(no reply)");
  };
  std::vector<zmq::message_t> three;
  three.emplace_back(std::string("x")), three.emplace_back(std::string("y")), three.emplace_back(std::string("z"));
  EXPECT_EQ(ask(std::move(three)), "a data request of 3 frames (6 expected: head, token, seqs, positions, x, cache ops)");
  const uint64_t head[2] = {9, 2};
  std::vector<zmq::message_t> short_x;
  short_x.emplace_back(head, sizeof head), short_x.emplace_back(std::string("t1"));
  const int64_t two[2] = {0, 1};
  short_x.emplace_back(two, sizeof two), short_x.emplace_back(two, sizeof two), short_x.emplace_back(std::string("abc")), short_x.emplace_back();
  EXPECT_EQ(ask(std::move(short_x)), "a data request of 2 rows with 16 bytes of sequences, 16 of positions and 3 of activations");
  std::vector<zmq::message_t> odd_ops;  // cache ops come five numbers each
  odd_ops.emplace_back(head, sizeof head), odd_ops.emplace_back(std::string("t1"));
  const float x[2] = {1, 2};
  odd_ops.emplace_back(two, sizeof two), odd_ops.emplace_back(two, sizeof two), odd_ops.emplace_back(x, sizeof x), odd_ops.emplace_back(two, sizeof two);
  EXPECT_NE(ask(std::move(odd_ops)).find("a data request of 2 rows"), std::string::npos);
  replies r;
  stage_data_client c("127.0.0.1", s.port, "", {}, r.sink());
  c.send(1, "t1", {0}, {1}, floats({1}));
  auto ok = r.next();
  ASSERT_TRUE(ok);
  EXPECT_EQ(as_floats(ok->bytes), (std::vector<float>{2}));
}

// Over CurveZMQ a client whose key the server allowed is served; one it did not is refused at the
// handshake (the client hears its connection is lost); a client of the plain kind gets nothing.
TEST(StageData, CurveLetsInOnlyAllowedKeys) {
  served s(true);
  ASSERT_TRUE(s.server);
  ASSERT_EQ(s.server->public_key().size(), 40u);
  const data_keys allowed = make_data_keys(), stranger = make_data_keys();
  s.server->allow(allowed.public_key);
  replies good, bad;
  stage_data_client c("127.0.0.1", s.port, s.server->public_key(), allowed, good.sink());
  c.send(1, "t1", {0}, {2}, floats({1, 1}));
  auto ok = good.next();
  ASSERT_TRUE(ok);
  EXPECT_TRUE(ok->ok);
  EXPECT_EQ(as_floats(ok->bytes), (std::vector<float>{3, 3}));
  stage_data_client x("127.0.0.1", s.port, s.server->public_key(), stranger, bad.sink());
  x.send(1, "t1", {0}, {2}, floats({1, 1}));
  auto refused = bad.next();
  ASSERT_TRUE(refused);
  EXPECT_TRUE(refused->lost);
  EXPECT_NE(refused->bytes.find("handshake"), std::string::npos) << refused->bytes;
  replies plain;
  stage_data_client p("127.0.0.1", s.port, "", {}, plain.sink());
  p.send(1, "t1", {0}, {2}, floats({1, 1}));
  auto none = plain.next(1500ms);
  EXPECT_TRUE(!none || !none->ok);
}

// When the worker's end goes away the client says so (once), and a request sent after that is not
// left waiting in a queue with no connection under it.
TEST(StageData, TheWorkersEndGoingAwayIsHeard) {
  auto s = std::make_unique<served>(false);
  ASSERT_TRUE(s->server);
  replies r;
  stage_data_client c("127.0.0.1", s->port, "", {}, r.sink());
  c.send(1, "t1", {}, {}, {});
  ASSERT_TRUE(r.next());
  s.reset();
  auto lost = r.next(3s);
  ASSERT_TRUE(lost);
  EXPECT_TRUE(lost->lost);
  EXPECT_NE(lost->bytes.find("closed"), std::string::npos) << lost->bytes;
  c.send(2, "t1", {}, {}, {});
  EXPECT_FALSE(r.next(300ms));  // (nothing more: the loss was said once)
}

}  // namespace
}  // namespace hotcold::actors
