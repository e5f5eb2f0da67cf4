#pragma once
// hotcold bench's outputs besides its table, as llama-bench writes them (-o md|csv|json|jsonl): one
// row per test (a configuration's prompt or decode at a depth, threads and lengths), each with the
// build, the CPU and the command line that made it.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace hotcold::launcher {

// Where the figures come from: hotcold's version and commit, the CPU (its model name and threads),
// and the command line as typed.
struct bench_provenance {
  std::string build, cpu, command;
};
bench_provenance provenance_now();

// The rows of one measurement (bench --json's object: its first configuration and the comparisons
// beside it), a prompt and a decode test each where measured.
std::vector<nlohmann::ordered_json> bench_rows(const nlohmann::json& measurement, const bench_provenance& p);

// Prints the rows in `format`: md (a markdown table), csv (a header and a line each), json (one array),
// jsonl (one object a line).
void print_bench_rows(const std::vector<nlohmann::ordered_json>& rows, const std::string& format, const bench_provenance& p);

}  // namespace hotcold::launcher
