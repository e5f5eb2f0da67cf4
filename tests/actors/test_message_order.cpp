// The scheduler's answers to messages that arrive in each gap of a step, on CAF's deterministic test
// coordinator: every actor (the compute actors too: runtime.hpp, deterministic) runs on the test's
// thread one message at a time, in the order the test picks, so what happens when a cancel or a new
// request lands while the hot executor holds a step, or while the sampler holds its logits, is
// checked the same on a quiet machine and a busy one.
#include <gtest/gtest.h>

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include "actors/pipeline.hpp"
#include "tests/actors/greedy_request.hpp"
#include "tests/model/tiny_models.hpp"

namespace hotcold::actors {
namespace {

// The pipeline's actors on the test coordinator, with a client whose mailbox the events reach.
class stepped_pipeline {
 public:
  explicit stepped_pipeline(std::shared_ptr<inference_context> ctx) {
    cfg_.set("scheduler.policy", caf::atom("testing"));
    sys_ = std::make_unique<caf::actor_system>(cfg_);
    sched_ = &dynamic_cast<caf::scheduler::test_coordinator&>(sys_->scheduler());
    EXPECT_TRUE(deterministic(*sys_));
    parts_ = std::make_shared<compute_resources>();
    parts_->m = ctx->shared_model();
    parts_->ctx = std::move(ctx);
    parts_->stats = std::make_shared<live_stats>(*parts_->m, std::string());
    parts_->reuse_prefixes = false;  // every prompt computed from its first position (the steps below say where each is)
    telemetry_ = spawn_telemetry(*sys_, parts_->stats);
    scheduler_ = spawn_scheduler(*sys_, parts_, 32, telemetry_);
    client_ = std::make_unique<caf::scoped_actor>(*sys_);
    sched_->run();
  }
  ~stepped_pipeline() {
    (*client_)->send_exit(scheduler_, caf::exit_reason::user_shutdown);
    (*client_)->send_exit(telemetry_, caf::exit_reason::user_shutdown);
    sched_->run();
    client_.reset();
  }

  void submit(int64_t id, generation_request r) { (*client_)->send(scheduler_, submit_atom::value, id, std::move(r)); }
  void cancel(int64_t id) { (*client_)->send(scheduler_, cancel_atom::value, id); }

  // Runs one message at a time until the actor to run next has a message of types Ts first: true
  // then, with that message not yet run; false when nothing is left to run.
  template <class... Ts>
  bool run_until_next_is() {
    while (sched_->has_job()) {
      const auto* e = sched_->next_job<caf::scheduled_actor>().mailbox().peek();
      if (e && e->content().match_elements<Ts...>()) return true;
      sched_->run_once();
    }
    return false;
  }
  // The step the hot executor is about to run (run_until_next_is<step_atom, step_plan> first).
  step_plan next_step() const { return sched_->next_job<caf::scheduled_actor>().mailbox().peek()->content().get_as<step_plan>(1); }
  void run_one() { sched_->run_once(); }
  void run_all() { sched_->run(); }

  // The client's events so far, by request: its tokens and how it ended.
  struct outcome {
    std::vector<token_id> tokens;
    done_event done;
  };
  std::map<int64_t, outcome> events() {
    std::map<int64_t, outcome> out;
    for (bool more = true; more;)
      (*client_)->receive([&](token_event& t) { out[t.request].tokens.push_back(t.token); }, [&](done_event& d) { out[d.request].done = d; },
                          [&](logits_event&) {}, caf::after(std::chrono::seconds(0)) >> [&] { more = false; });
    return out;
  }

 private:
  caf::actor_system_config cfg_;
  std::unique_ptr<caf::actor_system> sys_;
  caf::scheduler::test_coordinator* sched_ = nullptr;
  std::shared_ptr<compute_resources> parts_;
  telemetry_actor telemetry_;
  scheduler_actor scheduler_;
  std::unique_ptr<caf::scoped_actor> client_;
};

using test::greedy;

// The request's tokens with nothing else running: the forward pass called directly, greedy.
std::vector<token_id> alone(std::shared_ptr<const model> m, const generation_request& r) {
  inference_context ctx(m, 64, 1);
  std::span<const float> logits;
  int64_t pos = 0;
  for (token_id t : r.prompt) logits = ctx.forward(t, pos++);
  std::vector<token_id> out;
  while (static_cast<int32_t>(out.size()) < r.n_predict) {
    out.push_back(static_cast<token_id>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    logits = ctx.forward(out.back(), pos++);
  }
  return out;
}

std::shared_ptr<const model> order_model() {
  static auto m = model::load(test::make_model("order_dense", test::small_options(2, 2)));
  return m;
}

std::vector<token_id> prompt(int n, int salt) {
  std::vector<token_id> p{1};
  for (int i = 1; i < n; ++i) p.push_back(static_cast<token_id>((13 + 29 * i + 71 * salt) % order_model()->hp().n_vocab));
  return p;
}

// A request that arrives while the hot executor holds a step joins the step after it: that step
// carries the running request's next token and the newcomer's whole prompt, and each request's
// tokens are those it gets alone.
TEST(MessageOrder, ARequestArrivingDuringAStepJoinsTheNextOne) {
  auto m = order_model();
  stepped_pipeline p(std::make_shared<inference_context>(m, 64, 1, 2));
  const auto a = greedy(prompt(4, 0), 4), b = greedy(prompt(5, 1), 3);
  p.submit(0, a);
  ASSERT_TRUE((p.run_until_next_is<step_atom, step_plan>()));
  EXPECT_EQ(p.next_step().requests, (std::vector<int64_t>{0, 0, 0, 0}));
  p.submit(1, b);  // lands while the step is held
  p.run_one();      // the step
  ASSERT_TRUE((p.run_until_next_is<step_atom, step_plan>()));
  // The first step ran and its token was sampled; the second holds request 0's decode and 1's prompt.
  const step_plan second = p.next_step();
  EXPECT_EQ(second.requests, (std::vector<int64_t>{0, 1, 1, 1, 1, 1}));
  EXPECT_EQ(second.positions, (std::vector<int64_t>{4, 0, 1, 2, 3, 4}));
  EXPECT_NE(second.slots[0], second.slots[1]);
  EXPECT_EQ(second.logit_rows, (std::vector<int64_t>{0, 5}));
  p.run_all();
  auto out = p.events();
  EXPECT_EQ(out[0].tokens, alone(m, a));
  EXPECT_EQ(out[1].tokens, alone(m, b));
  EXPECT_EQ(out[0].done.finish, "length");
  EXPECT_EQ(out[1].done.finish, "length");
}

// A cancel that lands while the hot executor holds a step, or while the sampler holds the step's
// logits, ends its request there: no token of that step reaches the client, its slot goes to the
// next request, and the request beside it goes on as if alone.
TEST(MessageOrder, ACancelEndsItsRequestInEveryGapOfAStep) {
  auto m = order_model();
  const auto a = greedy(prompt(3, 2), 6), b = greedy(prompt(4, 3), 6), c = greedy(prompt(3, 4), 2);
  const auto b_alone = alone(m, b), c_alone = alone(m, c);
  for (const bool at_sampler : {false, true}) {
    SCOPED_TRACE(at_sampler ? "the cancel lands while the sampler holds the logits" : "the cancel lands while the hot executor holds the step");
    stepped_pipeline p(std::make_shared<inference_context>(m, 64, 1, 2));
    p.submit(0, a);
    p.submit(1, b);
    p.submit(2, c);  // waits: two slots
    // Request 0's prompt (the scheduler starts a step at the first request), then its first decode
    // beside request 1's prompt, then a decode of each: held where the cancel lands.
    for (const auto& want : {std::vector<int64_t>{0, 0, 0}, std::vector<int64_t>{0, 1, 1, 1, 1}}) {
      ASSERT_TRUE((p.run_until_next_is<step_atom, step_plan>()));
      EXPECT_EQ(p.next_step().requests, want);
      p.run_one();
    }
    ASSERT_TRUE((p.run_until_next_is<step_atom, step_plan>()));
    EXPECT_EQ(p.next_step().requests, (std::vector<int64_t>{0, 1}));
    if (at_sampler) {
      p.run_one();
      ASSERT_TRUE((p.run_until_next_is<sample_atom, sample_job>()));
    }
    p.cancel(0);
    p.run_all();
    auto out = p.events();
    EXPECT_EQ(out[0].done.finish, "cancelled");
    const auto a_alone = alone(m, a);
    EXPECT_EQ(out[0].done.generated_tokens, 2);
    EXPECT_EQ(out[0].tokens, std::vector<token_id>(a_alone.begin(), a_alone.begin() + 2)) << "the tokens of the steps before, none of this one's";
    EXPECT_EQ(out[1].tokens, b_alone);
    EXPECT_EQ(out[2].tokens, c_alone) << "the cancelled request's slot, given to the waiting one, starts empty";
    EXPECT_EQ(out[1].done.finish, "length");
    EXPECT_EQ(out[2].done.finish, "length");
  }
}

}  // namespace
}  // namespace hotcold::actors
