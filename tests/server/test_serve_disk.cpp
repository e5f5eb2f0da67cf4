// `hotcold serve --ram-budget` (docs/disk.md): a sparse file served with most of its FFN rows left in
// the file answers what `run` prints with the whole file in memory, and /metrics and /api/stats carry
// the disk tier's counts.
#include "engine/ram_tier.hpp"
#include "tests/model/tiny_models.hpp"
#include "tests/server/dashboard_dom.hpp"
#include "tests/server/serve_process.hpp"
#include "tools/sparse_file.hpp"

namespace hotcold::test {
namespace {

TEST(ServeDisk, RamBudgetServesTheSameTextAndExportsTheDisk) {
  const auto path = (scratch_dir() / "serve_disk.gguf").string();
  tools::gen_model_options o;
  o.n_embd = 256, o.n_ff = 1024, o.n_layer = 3, o.n_head = 4, o.n_head_kv = 2, o.active = 0.15;
  o.vocab_path = HOTCOLD_FIXTURES_DIR "/vocab/ggml-vocab-llama-spm.gguf";
  const auto dense = make_model("serve_disk_dense", o);
  tools::sparse_file_options so;
  so.bundle = true;
  tools::write_sparse_model(dense, path, random_predictors(3, 256, 1024, 32, 1.2f, 7), so);
  load_options lo;
  lo.ffn_rows_from_disk = true;
  const auto m = model::load(path, lo);
  const ram_tier_plan all = plan_ram_tier(*m, ~uint64_t{0} / 2);
  const std::string budget = std::to_string(static_cast<double>(all.least_bytes + all.row_bytes / 8) / double(1ull << 30));
  const std::string ep = tcp_endpoint();
  const int port = free_port();
  server_process server({"--zmq", ep, "--http", "127.0.0.1:" + std::to_string(port), "-m", path, "-t", "2", "--ram-budget", budget});
  wait_ready(ep, &server);
  const std::vector<std::string> ask = {"-p", "Once upon a time", "-n", "16", "--temp", "0"};
  std::vector<std::string> client{"client", "--endpoint", ep}, run{"run", "-m", path, "-t", "2"};
  client.insert(client.end(), ask.begin(), ask.end());
  run.insert(run.end(), ask.begin(), ask.end());
  EXPECT_EQ(run_stdout(client), run_stdout(run));
  const std::string text = split(http_get(port, "/metrics")).body;
  EXPECT_GT(metric(text, "hotcold_ram_lookups_total"), 0.0) << text;
  EXPECT_GT(metric(text, "hotcold_disk_read_bytes_total"), 0.0) << text;
  EXPECT_LT(metric(text, "hotcold_ram_hits_total"), metric(text, "hotcold_ram_lookups_total"));  // (rows read as tokens chose them)
  EXPECT_GT(metric(text, "hotcold_ram_held_bytes"), 0.0);
  const auto stats = nlohmann::json::parse(split(http_get(port, "/api/stats")).body);
  ASSERT_TRUE(stats.contains("disk")) << stats.dump();
  EXPECT_EQ(stats.at("disk").at("ram_lookups").get<double>(), metric(text, "hotcold_ram_lookups_total"));
  // The decoded tokens' steps, each with the second guess on (its trial's first epoch: 32 tokens).
  EXPECT_GE(metric(text, "hotcold_read_ahead_token_steps_total"), 15.0) << text;
  EXPECT_EQ(metric(text, "hotcold_read_ahead_input_steps_total"), metric(text, "hotcold_read_ahead_token_steps_total"));
  EXPECT_EQ(stats.at("disk").at("token_steps").get<double>(), metric(text, "hotcold_read_ahead_token_steps_total"));
  // The dashboard's disk card (headless Chromium, the server idle): the same counts, and no reads
  // between its two updates.
  if (!chromium_command().empty()) {
    const std::string dom = dashboard_dom(port, "/?frames=3&period_ms=200", 4000);
    const auto& d = stats.at("disk");
    EXPECT_EQ(dom.find("id=\"disk-card\" hidden"), std::string::npos) << dom.substr(0, 2000);
    EXPECT_NEAR(element_number(dom, "disk-ram-hit-ratio"), d.at("ram_hit_ratio").get<double>(), 1e-4);
    EXPECT_NEAR(element_number(dom, "disk-read-ahead-recall"), d.at("read_ahead_recall").get<double>(), 1e-4);
    EXPECT_NEAR(element_number(dom, "disk-held"), d.at("held_bytes").get<double>() / double(1ull << 30), 1e-3);
    EXPECT_EQ(element_number(dom, "disk-reads"), d.at("reads").get<double>());
    const double tokens = stats.at("generated_tokens_total").get<double>() + stats.at("prompt_tokens_computed_total").get<double>();
    EXPECT_NEAR(element_number(dom, "disk-per-token"), d.at("read_bytes").get<double>() / tokens / 1e6, 0.01);
    EXPECT_EQ(element_number(dom, "disk-read-rate"), 0.0);
    EXPECT_EQ(element_number(dom, "disk-wait-share"), 0.0);
  }
  EXPECT_EQ(server.stop(), 0) << server.log();
}

}  // namespace
}  // namespace hotcold::test
