// A llama.cpp user's habits at the `hotcold` command line (docs/for-llama-cpp-users.md), and the
// command-line defects a hostile probe found: each a case that failed before.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/launcher/cli_run.hpp"

extern char** environ;

namespace hotcold::test {
namespace {

// --seed as llama.cpp takes it: -1 is a random seed (drawn and printed, as when none is given); 2^64
// and beyond, or below -1, are refused naming the flag (they were clamped to 2^64 - 1 silently).
TEST(CliHabits, SeedMinusOneIsRandomAndTooLargeIsRefused) {
  const std::vector<std::string> base{"run", "-m", small_model(), "-p", "Once", "-n", "4", "--temp", "1"};
  auto with = [&](const std::string& seed) {
    auto a = base;
    a.insert(a.end(), {"--seed", seed});
    return run(a);
  };
  const auto random = with("-1");
  EXPECT_EQ(random.code, 0) << random.err;
  EXPECT_NE(random.err.find("hotcold: seed "), std::string::npos) << random.err;
  const auto largest = with("18446744073709551615");
  EXPECT_EQ(largest.code, 0) << largest.err;
  EXPECT_EQ(largest.err.find("hotcold: seed "), std::string::npos) << "a seed given is not printed: " << largest.err;
  EXPECT_EQ(with("18446744073709551615").out, largest.out);
  for (const char* bad : {"18446744073709551616", "99999999999999999999999", "-2", "1.5"}) {
    const auto r = with(bad);
    EXPECT_EQ(r.code, 2) << bad;
    EXPECT_NE(r.err.find(std::string("--seed: '") + bad + "' is not a seed"), std::string::npos) << r.err;
  }
}

// The command lines of docs/for-llama-cpp-users.md that run a model here, as a llama.cpp user types
// them: the same text as hotcold's own spelling. -ngl without a GPU warns and runs on the CPU (it was
// read as "-n gl", then refused); -f FILE and -p - (stdin) give the prompt; -b/-ub/--no-mmap/--mlock/
// -fa/-ctk/-ctv/-dev/-ot are taken; -cnv and -sys make run a chat.
TEST(CliHabits, LlamaCppCommandLinesRunAsTheyExpect) {
  const std::string m = small_model(), prompt = "Once upon a time";
  auto text = [&](std::vector<std::string> extra, const std::string& env = "") {
    std::vector<std::string> a{"run", "-m", m, "-n", "8", "--temp", "0"};
    a.insert(a.end(), extra.begin(), extra.end());
    return run(a, env);
  };
  const auto base = text({"-p", prompt});
  ASSERT_EQ(base.code, 0) << base.err;
  ASSERT_FALSE(base.out.empty());
  const auto ngl = text({"-ngl", "99", "-c", "256", "-p", prompt});
  EXPECT_EQ(ngl.code, 0) << ngl.err;
  EXPECT_EQ(ngl.out, base.out);
  EXPECT_NE(ngl.err.find("warning: -ngl 99: no GPU here"), std::string::npos) << ngl.err;
  const auto all_layers = text({"--device", "sim", "--vram-budget", "1", "-ngl", "99", "-p", prompt});  // (99: every layer, as llama.cpp reads it)
  EXPECT_EQ(all_layers.code, 0) << all_layers.err;
  EXPECT_EQ(all_layers.out, base.out);
  const std::string file = (std::filesystem::temp_directory_path() / ("hotcold-habits-" + std::to_string(getpid()) + ".txt")).string();
  std::ofstream(file) << prompt;
  EXPECT_EQ(text({"-f", file}).out, base.out);
  EXPECT_EQ(text({"-p", "-"}, "printf 'Once upon a time' |").out, base.out);
  std::filesystem::remove(file);
  for (const auto& flags : {std::vector<std::string>{"-b", "512", "-ub", "512", "--no-mmap", "--mlock", "-t", "2"},
                            {"-fa", "on", "-ctk", "f16", "-ctv", "f16"}, {"-dev", "none", "--ctx-size", "128"}, {"--seed", "-1"}}) {
    auto with = flags;
    with.insert(with.end(), {"-p", prompt});
    const auto r = text(with);
    EXPECT_EQ(r.code, 0) << flags[0] << ": " << r.err;
    EXPECT_EQ(r.out, base.out) << flags[0];
  }
  const auto small_steps = text({"-ub", "2", "-p", prompt});  // (a prompt in steps of 2 tokens: the same text)
  EXPECT_EQ(small_steps.out, base.out) << small_steps.err;
  const auto fa_off = text({"-fa", "off", "-p", prompt});
  EXPECT_NE(fa_off.err.find("-fa off: hotcold's attention is always the fused kind"), std::string::npos) << fa_off.err;
  // Conversation mode: a chat, its system message from -sys (or -p, as llama-cli read it).
  const auto cnv = text({"-cnv", "--chat-template", "llama2", "-p", "Be brief."}, "printf 'Hi\\n' |");
  EXPECT_EQ(cnv.code, 0) << cnv.err;
  EXPECT_NE(cnv.err.find("llama2 template"), std::string::npos) << cnv.err;
  const auto chat = run({"chat", "-m", m, "-n", "8", "--temp", "0", "--chat-template", "llama2", "--system", "Be brief."}, "printf 'Hi\\n' |");
  EXPECT_EQ(cnv.out, chat.out);
  EXPECT_EQ(text({"-sys", "Be brief.", "--chat-template", "llama2"}, "printf 'Hi\\n' |").out, chat.out);
  EXPECT_EQ(run({"tokenize", "-m", llama, "-p", "Hello world"}).out, "15043 3186\n");
}

// What is not hotcold's is said by name, with the nearest it knows: a misspelt flag or command, a
// tensor override it cannot place, a download.
TEST(CliHabits, UnknownNamesGetTheNearestKnownOne) {
  const auto flag = run({"run", "-m", small_model(), "-p", "x", "--tmep", "0"});
  EXPECT_EQ(flag.code, 2);
  EXPECT_NE(flag.err.find("--tmep: did you mean --temp?"), std::string::npos) << flag.err;
  const auto command = run({"serv"});
  EXPECT_EQ(command.code, 2);
  EXPECT_NE(command.err.find("unknown command 'serv': did you mean 'hotcold serve'?"), std::string::npos) << command.err;
  const auto ot = run({"run", "-m", small_model(), "-p", "x", "-ot", "blk\\.1\\.attn.*=CUDA0"});
  EXPECT_EQ(ot.code, 2);
  EXPECT_NE(ot.err.find("--override-tensor: 'blk\\.1\\.attn.*=CUDA0': hotcold places tensors by its own plan"), std::string::npos) << ot.err;
  const auto hf = run({"run", "-hf", "someone/model-GGUF", "-p", "x"});
  EXPECT_EQ(hf.code, 2);
  EXPECT_NE(hf.err.find("hotcold does not download models"), std::string::npos) << hf.err;
  const auto none = run({"run", "-m", small_model(), "-n", "2"});
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.err.find("give the prompt: -p TEXT, -p - (stdin) or -f FILE"), std::string::npos) << none.err;
}

// chat's commands, as llama-cli's: /help lists them; /save writes the conversation as the API's
// messages, /clear forgets it, /load brings it back (the next turn goes on from it); an unknown /word
// is said and not sent to the model; /exit ends (what follows is never answered). (Before, each went to
// the model as a message.)
TEST(CliHabits, ChatCommands) {
  const std::string saved = (std::filesystem::temp_directory_path() / ("hotcold-chat-" + std::to_string(getpid()) + ".json")).string();
  const auto r = run({"chat", "-m", small_model(), "-n", "4", "--temp", "0", "-sys", "Be brief."},
                     "printf 'Hi\\n/help\\n/save " + saved + "\\n/bogus\\n/clear\\n/load " + saved + "\\nAgain\\n/exit\\nnever\\n' |");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("/clear forget the conversation"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("/bogus: not a command"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("3 messages loaded"), std::string::npos) << r.err;
  int turns = 0;
  for (size_t at = r.err.find("new prompt tokens"); at != std::string::npos; at = r.err.find("new prompt tokens", at + 1)) ++turns;
  EXPECT_EQ(turns, 2) << "Hi and Again answered, nothing else: " << r.err;
  std::ifstream in(saved);
  const auto j = nlohmann::json::parse(in, nullptr, false);
  ASSERT_TRUE(j.is_array()) << j.dump();
  ASSERT_EQ(j.size(), 3u);
  EXPECT_EQ(j[0], (nlohmann::json{{"role", "system"}, {"content", "Be brief."}}));
  EXPECT_EQ(j[1], (nlohmann::json{{"role", "user"}, {"content", "Hi"}}));
  EXPECT_EQ(j[2]["role"], "assistant");
  std::filesystem::remove(saved);
}

// Ctrl-C during a chat's reply stops the reply, keeps the conversation and takes the next line (it
// ended the whole chat, exit 130, before).
TEST(CliHabits, CtrlCStopsTheReplyNotTheChat) {
  int in[2], err[2], out[2];
  ASSERT_EQ(pipe(in), 0);
  ASSERT_EQ(pipe(err), 0);
  ASSERT_EQ(pipe(out), 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  for (int fd : {in[1], err[0], out[0]}) posix_spawn_file_actions_addclose(&fa, fd);
  // A reply without end: -n -1 with a context shift, and a grammar that is never complete (no EOS).
  std::vector<std::string> args{HOTCOLD_BIN, "chat", "-m", small_model(), "-n", "-1", "-c", "4096", "--context-shift", "--temp", "0.8", "--seed", "1",
                                "--grammar", "root ::= [a-z ] root"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, HOTCOLD_BIN, &fa, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  close(in[0]), close(err[1]), close(out[1]);
  std::string log;
  auto read_until = [&](const std::string& mark, int seconds) {
    for (int i = 0; i < seconds * 20 && log.find(mark) == std::string::npos; ++i) {
      pollfd p{err[0], POLLIN, 0};
      if (poll(&p, 1, 50) > 0) {
        char buf[4096];
        const ssize_t n = read(err[0], buf, sizeof buf);
        if (n > 0) log.append(buf, static_cast<size_t>(n));
      }
    }
    return log.find(mark) != std::string::npos;
  };
  ASSERT_TRUE(read_until("Ctrl-D ends", 30)) << log;
  ASSERT_EQ(write(in[1], "Tell me a long story\n", 21), 21);
  // Interrupted once the reply is coming (its first bytes read), however busy the machine is; what
  // follows it on stdout is read on, so that the reply never waits for a full pipe.
  std::atomic<size_t> reply_bytes{0};
  std::thread drain([&] {
    char buf[4096];
    for (ssize_t n; (n = read(out[0], buf, sizeof buf)) > 0;) reply_bytes += static_cast<size_t>(n);
  });
  for (int i = 0; i < 600 && reply_bytes.load() < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_GE(reply_bytes.load(), 2u) << log;
  kill(pid, SIGINT);
  EXPECT_TRUE(read_until("(stopped)", 20)) << log;
  ASSERT_EQ(write(in[1], "/exit\n", 6), 6);
  close(in[1]);
  int status = 0;
  waitpid(pid, &status, 0);
  read_until("never", 1);
  drain.join();
  close(err[0]), close(out[0]);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status << "\n" << log;
}

// A client pointed at a port where no server is says so within its connect timeout (it printed nothing
// for 120 s before, even with --health).
TEST(CliHabits, AClientWithNoServerSaysSo) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = run({"client", "--endpoint", "tcp://127.0.0.1:9", "--health", "--connect-timeout", "0.5"});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("no server at tcp://127.0.0.1:9: nothing accepted a connection within 0.5 s"), std::string::npos) << r.err;
  EXPECT_LT(seconds, 30.0);  // (bounded, not timed: the point is that it ends)
}

// bench as llama-bench: comma lists for -p, -n and -t (each prompt length and each generation length a
// test, for each thread count), -o md|csv|json|jsonl, and the build, the CPU and the command line in
// every output (the table's first line, --json's object, each row).
TEST(CliHabits, BenchTakesListsAndWritesLlamaBenchsFormats) {
  const std::vector<std::string> base{"bench", "-m", small_model(), "-p", "8,16", "-n", "4", "-t", "1,2", "-r", "1"};
  auto with = [&](std::vector<std::string> extra) {
    auto a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return run(a);
  };
  const auto jsonl = with({"-o", "jsonl"});
  ASSERT_EQ(jsonl.code, 0) << jsonl.err;
  std::vector<nlohmann::json> rows;
  std::istringstream lines(jsonl.out);
  for (std::string line; std::getline(lines, line);) rows.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(rows.size(), 6u) << jsonl.out;  // pp8, pp16, tg4 for 1 and for 2 threads
  std::multiset<std::string> tests;
  for (const auto& r : rows) {
    tests.insert(r["test"].get<std::string>() + "/" + std::to_string(r["threads"].get<int>()));
    EXPECT_EQ(r["build"].get<std::string>().rfind("hotcold ", 0), 0u) << r.dump();
    EXPECT_FALSE(r["cpu"].get<std::string>().empty());
    EXPECT_NE(r["command"].get<std::string>().find("bench -m"), std::string::npos);
    EXPECT_GT(r["avg_ts"].get<double>(), 0.0);
  }
  EXPECT_EQ(tests, (std::multiset<std::string>{"pp8/1", "pp16/1", "tg4/1", "pp8/2", "pp16/2", "tg4/2"}));
  const auto csv = with({"-o", "csv"});
  ASSERT_EQ(csv.code, 0) << csv.err;
  EXPECT_EQ(csv.out.rfind("build,cpu,model,", 0), 0u) << csv.out;
  EXPECT_EQ(std::count(csv.out.begin(), csv.out.end(), '\n'), 7) << csv.out;
  const auto md = with({"-o", "md"});
  EXPECT_NE(md.out.find("| model | size | mode | pipeline | threads | test | t/s |"), std::string::npos) << md.out;
  EXPECT_NE(md.out.find("\nbuild: hotcold "), std::string::npos) << md.out;
  const auto json = with({"-o", "json"});
  EXPECT_EQ(nlohmann::json::parse(json.out).size(), 6u) << json.out;
  const auto table = run({"bench", "-m", small_model(), "-p", "8", "-n", "4", "-r", "1"});
  EXPECT_EQ(table.out.rfind("build: hotcold ", 0), 0u) << table.out;
  const auto object = nlohmann::json::parse(run({"bench", "-m", small_model(), "-p", "8", "-n", "4", "-r", "1", "--json"}).out);
  EXPECT_TRUE(object.contains("build") && object.contains("cpu") && object.contains("command")) << object.dump();
  EXPECT_EQ(run({"run", "-m", small_model(), "-p", "x", "-t", "1,2"}).code, 2);  // (a list is bench's)
}

}  // namespace
}  // namespace hotcold::test
