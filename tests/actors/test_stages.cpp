// The stages' pure parts (docs/distributed.md): --split auto's plan, the layer ranges of --split.
#include <gtest/gtest.h>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "actors/stages.hpp"
#include "model/file_identity.hpp"
#include "tests/model/tiny_models.hpp"

namespace hotcold::actors {
namespace {

constexpr uint64_t GiB = uint64_t{1} << 30;

// Layers go in proportion to the workers' read speeds: a worker twice as fast takes twice the layers
// (every stage's share of a token's time then equal), equal workers split evenly whatever the order.
TEST(PlanSplit, LayersFollowTheWorkersSpeed) {
  const std::vector<uint64_t> layers(30, GiB / 4);
  EXPECT_EQ(plan_split({{20e9, 64 * GiB, 8}, {10e9, 64 * GiB, 8}}, layers, 0), (std::vector<int64_t>{20, 10}));
  EXPECT_EQ(plan_split({{10e9, 64 * GiB, 8}, {20e9, 64 * GiB, 8}, {10e9, 64 * GiB, 8}}, layers, 0), (std::vector<int64_t>{8, 15, 7}));
  // Equal speeds within 40% of each other split 4 layers 2 and 2 (noise in the probe moves no layer).
  EXPECT_EQ(plan_split({{13e9, 64 * GiB, 1}, {10e9, 64 * GiB, 1}}, std::vector<uint64_t>(4, GiB / 4), 0), (std::vector<int64_t>{2, 2}));
  // A very slow worker still holds one layer.
  EXPECT_EQ(plan_split({{100e9, 64 * GiB, 8}, {1e9, 64 * GiB, 8}}, std::vector<uint64_t>(8, GiB / 4), 0), (std::vector<int64_t>{7, 1}));
}

// Memory caps a worker's layers at 90% of what it has available (each layer with its KV cache); the
// rest go to the others; when the workers cannot hold every layer, the plan says how many they hold.
TEST(PlanSplit, MemoryCapsAWorkersLayers) {
  const std::vector<uint64_t> layers(40, GiB);  // a 40 GiB model, 1 GiB a layer
  // The fast worker has 16 GiB: 0.9 x 16 / (1 + 0.25) = 11 layers; the slow one takes the rest.
  EXPECT_EQ(plan_split({{40e9, 16 * GiB, 8}, {10e9, 64 * GiB, 8}}, layers, GiB / 4), (std::vector<int64_t>{11, 29}));
  try {
    plan_split({{40e9, 16 * GiB, 8}, {10e9, 16 * GiB, 8}}, layers, GiB / 4);
    ADD_FAILURE() << "two 16 GiB workers cannot hold 40 GiB";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("holds 22 of 40 layers"), std::string::npos) << e.what();
  }
  EXPECT_THROW(plan_split({{40e9, 64 * GiB, 8}, {10e9, GiB / 2, 8}}, layers, 0), std::runtime_error);  // (room for no layer)
  EXPECT_THROW(plan_split({{1e9, 64 * GiB, 1}, {1e9, 64 * GiB, 1}, {1e9, 64 * GiB, 1}}, std::vector<uint64_t>(2, GiB), 0), std::invalid_argument);
}

// --split N1,N2,...: contiguous ranges in the workers' order; auto before the probe: an even split.
TEST(SplitLayers, CountsBecomeContiguousRanges) {
  const stage_address w1{"127.0.0.1", 7001}, w2{"127.0.0.1", 7002}, w3{"127.0.0.1", 7003};
  const auto s = split_layers({w1, w2}, {"3", "5"}, 8);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].first, 0);
  EXPECT_EQ(s[0].last, 3);
  EXPECT_EQ(s[1].first, 3);
  EXPECT_EQ(s[1].last, 8);
  EXPECT_EQ(s[1].where(), "tcp://127.0.0.1:7002 (layers 3-7)");
  const auto even = split_layers({w1, w2, w3}, {"auto"}, 8);
  EXPECT_EQ(even[0].last - even[0].first, 3);
  EXPECT_EQ(even[2].last - even[2].first, 2);
  EXPECT_THROW(split_layers({w1}, {"3"}, 8), std::invalid_argument);
  EXPECT_THROW(split_layers({w1, w2}, {"8", "0"}, 8), std::invalid_argument);
  EXPECT_THROW(split_layers({w1, w2, w3}, {"auto"}, 2), std::invalid_argument);  // (more workers than layers)
}

}  // namespace
}  // namespace hotcold::actors

namespace hotcold::actors {
namespace {

// A stage host (the worker's side, in this process) refuses at the hello a coordinator of another
// version — the text names both — or of another file, and accepts its own: asked over CAF's network
// layer from a second actor system, as a coordinator asks.
TEST(StageHost, TheHelloRefusesAnotherVersionOrFile) {
  const std::string path = test::make_model("stage_hello", test::small_options(2));
  load_options lo;
  lo.use_mmap = true;
  stage_host_options o;
  o.m = model::load(path, lo);
  o.file_id = file_identity(path);
  caf::actor_system_config wcfg, ccfg;
  configure_network(wcfg);
  configure_network(ccfg);
  caf::actor_system worker(wcfg), coordinator(ccfg);
  const stage_host host = start_stage_host(worker, o, "127.0.0.1", 0);
  ASSERT_GT(host.port, 0);
  // Typed: the connection fails unless the published interface is the one this build speaks.
  auto remote = coordinator.middleman().remote_actor<stage_worker_actor>("127.0.0.1", host.port);
  ASSERT_TRUE(remote) << coordinator.render(remote.error());
  caf::scoped_actor self{coordinator};
  auto hello = [&](const std::string& version, const std::string& file_id) {
    std::string why = "(no answer)";
    self->request(*remote, std::chrono::seconds(10), hello_atom::value, version, file_id, std::string())
        .receive([&](std::string& w, std::string&) { why = w; }, [&](caf::error& e) { why = coordinator.render(e); });
    return why;
  };
  const std::string other = "hotcold 0.0.9 (stage protocol 1, CAF 0.17.6, little-endian floats)";
  EXPECT_EQ(hello(other, o.file_id), "this worker runs " + stage_version() + ", the coordinator " + other);
  EXPECT_NE(hello(stage_version(), "1-0000000000000000").find("not the same file"), std::string::npos);
  EXPECT_EQ(hello(stage_version(), o.file_id), "");
  self->send_exit(host.actor, caf::exit_reason::user_shutdown);
}

}  // namespace
}  // namespace hotcold::actors
