#include "launcher/llama_habits.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <charconv>
#include <cerrno>
#include <cstring>
#include <regex>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "engine/forward.hpp"

namespace hotcold::launcher {
namespace {

struct spelling {
  std::string_view llama, hotcold;
};
// llama.cpp's multi-letter short flags (common/arg.cpp) of a meaning hotcold has.
constexpr spelling spellings[] = {
    {"-ngl", "--n-gpu-layers"}, {"-ctk", "--cache-type-k"}, {"-ctv", "--cache-type-v"}, {"-fa", "--flash-attn"},  {"-sys", "--system-prompt"},
    {"-cnv", "--conversation"}, {"-no-cnv", "--no-conversation"}, {"-np", "--parallel"},   {"-ub", "--ubatch-size"}, {"-dev", "--device"},
    {"-ot", "--override-tensor"}, {"-hf", "--hf-repo"},       {"-hfr", "--hf-repo"},       {"-cb", "--cont-batching"}};

// Flags whose value is text a person wrote (never a flag to rewrite, however it reads).
bool takes_text(std::string_view a) {
  for (std::string_view f : {"-p", "--prompt", "-f", "--file", "--system", "--system-prompt", "-sys", "--grammar", "-j", "--json-schema", "--stop"})
    if (a == f) return true;
  return false;
}

// Edits from a to b: letters inserted, removed, changed, or two side by side swapped (--tmep: --temp).
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

// The names of a command's options, long and short, as written ("--temp", "-n").
std::vector<std::string> option_names(const CLI::App& app) {
  std::vector<std::string> out;
  for (const CLI::Option* o : app.get_options()) {
    for (const auto& l : o->get_lnames()) out.push_back("--" + l);
    for (const auto& s : o->get_snames()) out.push_back("-" + s);
  }
  return out;
}

}  // namespace

std::vector<std::string> llama_spellings(int argc, char** argv) {
  std::vector<std::string> out;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (i > 1 && takes_text(argv[i - 1])) {  // (a value: as given)
      out.push_back(std::move(a));
      continue;
    }
    for (const auto& s : spellings) {
      const std::string l(s.llama);
      if (i > 0 && (a == l || a.rfind(l + "=", 0) == 0)) {
        a = std::string(s.hotcold) + a.substr(l.size());
        break;
      }
    }
    out.push_back(std::move(a));
  }
  return out;
}

void add_llama_model_options(CLI::App* cmd, model_args& m) {
  cmd->add_flag_function(
      "--no-mmap", [&m](int64_t) { m.mmap = false; }, "llama.cpp's: compute from a private copy of the weights (hotcold's default)");
  cmd->add_flag("--mlock", m.mlock, "Lock the weights in memory (never paged out; a warning where the system refuses, as llama.cpp gives)");
  cmd->add_option("--flash-attn", m.flash_attn, "-fa [on|off|auto]: llama.cpp's; hotcold's attention is always the fused kind (tiled, online softmax)")
      ->expected(0, 1)
      ->default_str("on")
      ->check(CLI::IsMember({"on", "off", "auto", ""}));
  cmd->add_option("-b,--batch-size", m.batch, "Prompt tokens a step at most (as llama.cpp's -b; at most 256 here)")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--ubatch-size", m.ubatch, "-ub: prompt tokens a step at most (as llama.cpp's; at most 256 here)")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option_function<std::vector<std::string>>(
         "--override-tensor",
         [&m](const std::vector<std::string>& rules) {
           for (const auto& r : rules) {
             const auto eq = r.rfind('=');
             const std::string pattern = eq == std::string::npos ? r : r.substr(0, eq), where = eq == std::string::npos ? "" : r.substr(eq + 1);
             if (where == "CPU" && pattern.find("exps") != std::string::npos && !std::regex_search(pattern, std::regex("[0-9]")))
               m.cpu_moe = true;
             else
               throw CLI::ValidationError("--override-tensor",
                                          fmt::format("'{}': hotcold places tensors by its own plan; the one form taken is the experts on the CPU (a pattern "
                                                      "with 'exps' =CPU, as --cpu-moe; for the first N layers' experts: --n-cpu-moe N)",
                                                      r));
           }
         },
         "-ot PATTERN=CPU: llama.cpp's; an experts pattern (…exps…=CPU) keeps every expert on the CPU, as --cpu-moe")
      ->delimiter(',');
  cmd->add_option_function<std::string>(
      "--hf-repo",
      [](const std::string& repo) {
        throw CLI::ValidationError("--hf-repo", fmt::format("'{}': hotcold does not download models; fetch the GGUF file and give -m FILE", repo));
      },
      "-hf: llama.cpp downloads; hotcold does not (give -m FILE)");
}

CLI::Option* add_seed_option(CLI::App* cmd, uint64_t& seed, bool& given, const std::string& help) {
  return cmd->add_option_function<std::string>(
      "--seed",
      [&seed, &given](const std::string& text) {
        if (text == "-1") {
          given = false;
          return;
        }
        uint64_t v = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (text.empty() || ec != std::errc() || end != text.data() + text.size())
          throw CLI::ValidationError("--seed", fmt::format("'{}' is not a seed: a whole number from 0 to 18446744073709551615, or -1 for a random one", text));
        seed = v, given = true;
      },
      help);
}

std::string nearest_name(std::string_view word, const std::vector<std::string>& names) {
  std::string best;
  size_t best_d = word.size() / 3 + 1;
  for (const auto& n : names) {
    if (n.size() > 2 && word.size() >= 3 && n.rfind(word, 0) == 0) return n;  // (a beginning of one)
    const size_t d = edit_distance(word, n);
    if (d < best_d) best_d = d, best = n;
  }
  return best;
}

std::string suggestion(const CLI::App& app, const std::vector<std::string>& args, const CLI::ParseError& e) {
  // The command: the first word after the program's name, when it is not one.
  std::vector<std::string> commands;
  for (const CLI::App* c : app.get_subcommands([](const CLI::App*) { return true; })) commands.push_back(c->get_name());
  if (args.size() > 1 && !args[1].empty() && args[1].front() != '-' && std::find(commands.begin(), commands.end(), args[1]) == commands.end()) {
    if (auto n = nearest_name(args[1], commands); !n.empty()) return fmt::format("unknown command '{}': did you mean 'hotcold {}'?", args[1], n);
    return fmt::format("unknown command '{}' (hotcold --help lists them)", args[1]);
  }
  if (dynamic_cast<const CLI::ExtrasError*>(&e) == nullptr) return {};
  // A flag the parsed command does not have.
  const CLI::App* cmd = &app;
  for (const CLI::App* c : app.get_subcommands()) cmd = c;
  for (const auto& a : cmd->remaining())  // (what the parser could not place)
    if (a.size() > 1 && a.front() == '-') {
      const std::string flag = a.substr(0, a.find('='));
      if (auto n = nearest_name(flag, option_names(*cmd)); !n.empty() && n != flag) return fmt::format("{}: did you mean {}?", flag, n);
    }
  return {};
}

void apply_llama_flags(const model_args& m) {
  if (m.mlock && ::mlockall(MCL_CURRENT | MCL_FUTURE) != 0)
    fmt::print(stderr, "hotcold: warning: --mlock: the weights cannot be locked in memory ({}; ulimit -l raises the limit)\n", std::strerror(errno));
  if (m.flash_attn == "off") fmt::print(stderr, "hotcold: -fa off: hotcold's attention is always the fused kind; nothing changes\n");
  for (const int64_t n : {m.batch, m.ubatch})
    if (n > inference_context::max_batch)
      fmt::print(stderr, "hotcold: -b/-ub {}: a step takes at most {} prompt tokens here\n", n, inference_context::max_batch);
}

}  // namespace hotcold::launcher
