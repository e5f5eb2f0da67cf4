// `--ram-budget` as a user gives it (docs/disk.md): a sparse file's FFN rows beyond the budget read
// from the file as tokens choose them, the same text as with the whole file in memory on either
// pipeline, bench's disk figures, and budgets that cannot work refused by name.
#include <filesystem>
#include <regex>

#include <nlohmann/json.hpp>

#include "tests/launcher/cli_run.hpp"

namespace hotcold::test {
namespace {

namespace fs = std::filesystem;

// Too small a budget names what must be held whole, in GiB: that and `more` GiB ("" where it does not say).
std::string budget_past_held(const std::string& file, double more) {
  auto tiny = run({"run", "-m", file, "-p", "Hi", "-n", "2", "--ram-budget", "0.001"});
  EXPECT_NE(tiny.code, 0);
  std::smatch held;
  if (!std::regex_search(tiny.err, held, std::regex("besides its FFN rows: ([0-9.]+) GiB"))) {
    ADD_FAILURE() << tiny.err;
    return {};
  }
  return std::to_string(std::stod(held[1]) + more);
}

// gen_args with --ram-budget on either pipeline: the text without it, stderr saying `says`.
void expect_the_whole_files_text(const std::vector<std::string>& gen_args, const std::string& budget, const std::string& says) {
  auto whole = run(gen_args);
  ASSERT_EQ(whole.code, 0) << whole.err;
  for (const char* pipeline : {"actors", "direct"}) {
    SCOPED_TRACE(pipeline);
    auto args = gen_args;
    args.insert(args.end(), {"--ram-budget", budget, "--pipeline", pipeline});
    auto disk = run(args);
    ASSERT_EQ(disk.code, 0) << disk.err;
    EXPECT_EQ(disk.out, whole.out);
    EXPECT_NE(disk.err.find(says), std::string::npos) << disk.err;
  }
}

TEST(CliDisk, RamBudgetGivesTheSameTextAndCountsTheDisk) {
  auto dir = fs::temp_directory_path() / ("hotcold-cli-disk-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const auto dense = (dir / "dense.gguf").string(), sparse = (dir / "sparse.gguf").string();
  auto gen = run({"gen-model", "--arch", "llama", "--act", "relu", "--embd", "256", "--layers", "4", "--ffn", "1024", "--heads", "4", "--kv-heads", "2",
                  "--active", "0.1", "--vocab", llama, "--type", "f16", "--seed", "5", "-o", dense});
  ASSERT_EQ(gen.code, 0) << gen.err;
  auto prep = run({"prepare", "-m", dense, "-o", sparse, "--tokens", "128", "-t", "2"});
  ASSERT_EQ(prep.code, 0) << prep.err;
  // The rows are 4 x 1024 x 1.5 KiB = 6 MiB: a budget of what is held whole and 1 MiB keeps a sixth.
  const std::string budget = budget_past_held(sparse, 1.0 / 1024);
  ASSERT_FALSE(budget.empty());
  const std::vector<std::string> gen_args = {"run", "-m", sparse, "-p", "Hello there, my friend", "-n", "24", "--temp", "0", "-t", "2"};
  expect_the_whole_files_text(gen_args, budget, "read from " + sparse + " as tokens choose them");
  auto bench = [&](const std::string& gib, const char* input_guess = "auto") {
    auto b = run({"bench", "-m", sparse, "-p", "16", "-n", "16", "-r", "1", "-t", "2", "--ram-budget", gib, "--read-ahead-input", input_guess, "--json"});
    EXPECT_EQ(b.code, 0) << b.err;
    return nlohmann::json::parse(b.out);
  };
  const auto some = bench(budget), all = bench("8");
  // The second guess before attention: on for every decoded token, or for none (auto: on trial, on
  // for the first epoch's 32 tokens, so for all of these).
  EXPECT_EQ(some.at("read_ahead_input_share").get<double>(), 1.0);
  EXPECT_EQ(bench(budget, "on").at("read_ahead_input_share").get<double>(), 1.0);
  EXPECT_EQ(bench(budget, "off").at("read_ahead_input_share").get<double>(), 0.0);
  EXPECT_GT(some.at("disk_bytes_per_token").get<double>(), 0.0);
  EXPECT_GT(some.at("ram_hit_rate").get<double>(), 0.0);
  EXPECT_LT(some.at("ram_hit_rate").get<double>(), 1.0);
  EXPECT_GE(some.at("io_wait_ms_per_token").get<double>(), 0.0);
  EXPECT_EQ(all.at("disk_bytes_per_token").get<double>(), 0.0);
  EXPECT_EQ(all.at("ram_hit_rate").get<double>(), 1.0);
  // Not with --mmap (the tier reads into a private copy); a dense file has no rows read by neuron.
  auto mm = run({"run", "-m", sparse, "-p", "Hi", "-n", "2", "--ram-budget", budget, "--mmap"});
  EXPECT_NE(mm.code, 0);
  EXPECT_NE(mm.err.find("--mmap"), std::string::npos) << mm.err;
  // With a hot device (sim, a budget that holds a tenth of the rows: attention and predictors take
  // most of it): its rows read through the tier for the copy, the cold ones as steps choose them —
  // the text of the same device without a budget, on both pipelines.
  for (const char* pipeline : {"actors", "direct"}) {
    SCOPED_TRACE(pipeline);
    auto on_sim = gen_args;
    on_sim.insert(on_sim.end(), {"--device", "sim", "--vram-budget", "0.0072", "--pipeline", pipeline});
    auto sim_whole = run(on_sim);
    ASSERT_EQ(sim_whole.code, 0) << sim_whole.err;
    on_sim.insert(on_sim.end(), {"--ram-budget", budget});
    auto sim = run(on_sim);
    ASSERT_EQ(sim.code, 0) << sim.err;
    EXPECT_EQ(sim.out, sim_whole.out);
    std::smatch hot;
    ASSERT_TRUE(std::regex_search(sim.err, hot, std::regex("([0-9.]+) MiB of hot FFN rows"))) << sim.err;
    EXPECT_GT(std::stod(hot[1]), 0.05) << sim.err;  // (some rows on the device, most of the 6 MiB not)
    EXPECT_LT(std::stod(hot[1]), 3.0) << sim.err;
    EXPECT_NE(sim.err.find("read from " + sparse + " as tokens choose them"), std::string::npos) << sim.err;
    EXPECT_NE(sim.err.find("hottest neurons past the device's"), std::string::npos) << sim.err;  // (none held twice)
    // The next layer's cold rows read a layer ahead beside the device, on either pipeline.
    auto b = run({"bench", "-m", sparse, "-p", "16", "-n", "16", "-r", "1", "-t", "2", "--device", "sim", "--vram-budget", "0.0072", "--ram-budget", budget,
                  "--pipeline", pipeline, "--json"});
    ASSERT_EQ(b.code, 0) << b.err;
    EXPECT_GT(nlohmann::json::parse(b.out).at("read_ahead_recall").get<double>(), 0.0) << b.out;
  }
  // plan models the tier: alone (no GPU), with the disk's rate given or measured here, or beside a
  // GPU's plan; it needs one budget or the other.
  auto plan = run({"plan", "-m", sparse, "--ram-budget", budget, "--disk-read", "1.5", "--cpu-bandwidth", "10", "--json"});
  ASSERT_EQ(plan.code, 0) << plan.err;
  const auto pj = nlohmann::json::parse(plan.out);
  EXPECT_FALSE(pj.contains("gpu")) << plan.out;
  const auto& tier = pj.at("disk_tier");
  EXPECT_EQ(tier.at("disk_read_gbs").get<double>(), 1.5);
  EXPECT_GT(tier.at("disk_bytes_per_token").get<double>(), 0.0);
  EXPECT_GT(tier.at("ram_hit_rate").get<double>(), 0.0);
  EXPECT_LT(tier.at("ram_hit_rate").get<double>(), 1.0);
  EXPECT_LT(tier.at("tokens_per_s").get<double>(), tier.at("in_memory_tokens_per_s").get<double>());
  EXPECT_NEAR(tier.at("io_wait_seconds_per_token").get<double>(), tier.at("disk_bytes_per_token").get<double>() / 1.5e9, 1e-12);
  auto measured = run({"plan", "-m", sparse, "--ram-budget", budget, "--cpu-bandwidth", "10", "--json"});
  ASSERT_EQ(measured.code, 0) << measured.err;
  EXPECT_NE(nlohmann::json::parse(measured.out).at("disk_tier").at("disk_read_from").get<std::string>().find("measured here"), std::string::npos)
      << measured.out;
  auto both = run({"plan", "-m", sparse, "--vram-budget", "0.01", "--gpu", "h200", "--ram-budget", budget, "--disk-read", "1", "--cpu-bandwidth", "10"});
  ASSERT_EQ(both.code, 0) << both.err;
  EXPECT_NE(both.out.find("| hybrid |"), std::string::npos) << both.out;
  EXPECT_NE(both.out.find("disk tier: --ram-budget"), std::string::npos) << both.out;
  auto neither = run({"plan", "-m", sparse, "--cpu-bandwidth", "10"});
  EXPECT_NE(neither.code, 0);
  EXPECT_NE(neither.err.find("--vram-budget GiB (a GPU's plan) or --ram-budget GiB"), std::string::npos) << neither.err;
  auto plain = run({"run", "-m", dense, "-p", "Hi", "-n", "2", "--ram-budget", "1"});
  EXPECT_NE(plain.code, 0);
  EXPECT_NE(plain.err.find("no FFN rows read by neuron"), std::string::npos) << plain.err;
  fs::remove_all(dir);
}

// A mixture's experts left in the file (`--ram-budget` a little over what is held whole): read an
// expert at a time as the router chooses them, the same text as the whole file on either pipeline;
// with its experts on a hot device, refused by name (not yet).
TEST(CliDisk, AMixturesExpertsAreReadFromTheFile) {
  auto dir = fs::temp_directory_path() / ("hotcold-cli-disk-moe-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const auto moe = (dir / "moe.gguf").string();
  auto gen = run({"gen-model", "--arch", "llama", "--act", "silu", "--embd", "256", "--layers", "4", "--ffn", "512", "--heads", "4", "--kv-heads", "2",
                  "--experts", "8", "--experts-used", "2", "--vocab", llama, "--type", "q4_0", "--seed", "3", "-o", moe});
  ASSERT_EQ(gen.code, 0) << gen.err;
  // (the experts are 4 x 8 x 576 KiB = 18 MiB: 4 MiB more than what is held whole keeps a few)
  const std::string budget = budget_past_held(moe, 4.0 / 1024);
  ASSERT_FALSE(budget.empty());
  const std::vector<std::string> gen_args = {"run", "-m", moe, "-p", "Once upon a time, in a land far away,", "-n", "24", "--temp", "0", "-t", "2"};
  expect_the_whole_files_text(gen_args, budget, "recently used experts");
  auto b = run({"bench", "-m", moe, "-p", "8", "-n", "16", "-r", "1", "-t", "2", "--ram-budget", budget, "--json"});
  ASSERT_EQ(b.code, 0) << b.err;
  const auto j = nlohmann::json::parse(b.out);
  EXPECT_GT(j.at("disk_bytes_per_token").get<double>(), 0.0);
  EXPECT_LT(j.at("ram_hit_rate").get<double>(), 1.0);
  // With its experts on a device (sim, slots for about two thirds of them, a cache): the slots filled
  // and refilled through the tier (an expert's rows wherever the tier put them), the CPU's share read
  // as steps route — the text of the same device without a budget, on both pipelines.
  auto on_sim = gen_args;
  on_sim.insert(on_sim.end(), {"--device", "sim", "--vram-budget", "0.01"});
  const std::string small = budget_past_held(moe, 1.0 / 1024);  // (a few experts)
  expect_the_whole_files_text(on_sim, small, "a cache (lfu-decay)");
  auto sb = run({"bench", "-m", moe, "-p", "8", "-n", "16", "-r", "1", "-t", "2", "--device", "sim", "--vram-budget", "0.01", "--ram-budget", small, "--json"});
  ASSERT_EQ(sb.code, 0) << sb.err;
  const auto sj = nlohmann::json::parse(sb.out);
  EXPECT_GT(sj.at("expert_uploads_per_token").get<double>(), 0.0);  // (uploads read through the tier)
  EXPECT_LT(sj.at("expert_hit_rate").get<double>(), 1.0);
  EXPECT_GT(sj.at("disk_bytes_per_token").get<double>(), 0.0);
  EXPECT_LT(sj.at("ram_hit_rate").get<double>(), 1.0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace hotcold::test
