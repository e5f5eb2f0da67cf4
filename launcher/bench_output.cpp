#include "launcher/bench_output.hpp"

#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "launcher/commands.hpp"

#ifndef HOTCOLD_BUILD
#define HOTCOLD_BUILD "unknown"
#endif

namespace hotcold::launcher {
namespace {

// A CSV field: quoted where it holds a comma, a quote or a line break (RFC 4180).
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string text_of(const nlohmann::ordered_json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

constexpr const char* columns[] = {"build", "cpu", "model", "model_bytes", "mode", "pipeline", "threads", "parallel", "type_k", "type_v",
                                   "n_prompt", "n_gen", "n_depth", "test", "avg_ts", "stddev_ts", "bytes_per_token", "command"};

}  // namespace

bench_provenance provenance_now() {
  bench_provenance p;
  p.build = HOTCOLD_BUILD;
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) {
      p.cpu = line.substr(line.find(':') + 2);
      break;
    }
  if (p.cpu.empty()) p.cpu = "unknown CPU";
  p.cpu += fmt::format(" ({} threads)", std::thread::hardware_concurrency());
  p.command = command_line();
  return p;
}

std::vector<nlohmann::ordered_json> bench_rows(const nlohmann::json& measurement, const bench_provenance& p) {
  std::vector<nlohmann::ordered_json> out;
  auto add = [&](const nlohmann::json& d) {
    for (const bool prompt : {true, false}) {
      const int64_t n = d.value(prompt ? "n_prompt" : "n_gen", int64_t{0});
      if (n <= 0) continue;
      nlohmann::ordered_json row;
      row["build"] = p.build, row["cpu"] = p.cpu;
      for (const char* k : {"model", "model_bytes", "mode", "pipeline", "threads", "parallel", "type_k", "type_v", "n_prompt", "n_gen", "n_depth"}) row[k] = d.value(k, nlohmann::json());
      row["test"] = fmt::format("{}{}{}", prompt ? "pp" : "tg", n, d.value("n_depth", 0) > 0 ? fmt::format(" @ d{}", d.value("n_depth", 0)) : "");
      row["avg_ts"] = d.value(prompt ? "prefill_tokens_per_s" : "decode_tokens_per_s", 0.0);
      row["stddev_ts"] = d.value(prompt ? "prefill_tokens_per_s_sd" : "decode_tokens_per_s_sd", 0.0);
      row["bytes_per_token"] = prompt ? nlohmann::json() : d.value("bytes_per_token", nlohmann::json());
      row["command"] = p.command;
      out.push_back(std::move(row));
    }
  };
  add(measurement);
  for (const char* beside : {"dense", "direct", "actors", "vs_parallel", "vs_micro_batches", "vs_depth", "vs_unconstrained"})
    if (measurement.contains(beside)) add(measurement[beside]);
  return out;
}

void print_bench_rows(const std::vector<nlohmann::ordered_json>& rows, const std::string& format, const bench_provenance& p) {
  if (format == "json") {
    fmt::print("{}\n", nlohmann::ordered_json(rows).dump(2));
  } else if (format == "jsonl") {
    for (const auto& r : rows) fmt::print("{}\n", r.dump());
  } else if (format == "csv") {
    std::string header;
    for (const char* c : columns) header += (header.empty() ? "" : ",") + std::string(c);
    fmt::print("{}\n", header);
    for (const auto& r : rows) {
      std::string line;
      for (const char* c : columns) line += (line.empty() ? "" : ",") + csv_field(r.contains(c) && !r[c].is_null() ? text_of(r[c]) : "");
      fmt::print("{}\n", line);
    }
  } else {  // md, as llama-bench's
    fmt::print("| model | size | mode | pipeline | threads | test | t/s |\n| --- | ---: | --- | --- | ---: | ---: | ---: |\n");
    for (const auto& r : rows)
      fmt::print("| {} | {:.2f} GiB | {} | {} | {} | {} | {:.2f} ± {:.2f} |\n", std::filesystem::path(text_of(r["model"])).filename().string(), r["model_bytes"].get<double>() / double(1ull << 30),
                 text_of(r["mode"]), text_of(r["pipeline"]), text_of(r["threads"]), text_of(r["test"]), r["avg_ts"].get<double>(), r["stddev_ts"].get<double>());
    fmt::print("\nbuild: {}; CPU: {}; command: {}\n", p.build, p.cpu, p.command);
  }
}

}  // namespace hotcold::launcher
