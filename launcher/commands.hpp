#pragma once
// The `hotcold` subcommands. Each registers its options on the CLI11 app and returns the exit code
// its callback produces through `exit_code`.
#include <functional>
#include <string>

#include <CLI/CLI.hpp>

namespace hotcold::launcher {

// Exit codes shared by every subcommand.
constexpr int exit_ok = 0;
constexpr int exit_io_error = 1;    // missing file, a directory, unreadable
constexpr int exit_bad_input = 2;   // corrupt file, bad flag values, usage errors

void add_inspect_command(CLI::App& app, int& exit_code);
void add_tokenize_commands(CLI::App& app, int& exit_code);
void add_devices_command(CLI::App& app, int& exit_code);
void add_gen_model_command(CLI::App& app, int& exit_code);
void add_generate_commands(CLI::App& app, int& exit_code);  // run, eval, perplexity, chat
void add_bench_command(CLI::App& app, int& exit_code);
void add_sparse_commands(CLI::App& app, int& exit_code);  // profile, train-predictor, place, prepare
void add_serve_command(CLI::App& app, int& exit_code);
void add_client_command(CLI::App& app, int& exit_code);
void add_keygen_command(CLI::App& app, int& exit_code);
void add_replay_command(CLI::App& app, int& exit_code);
void add_plan_command(CLI::App& app, int& exit_code);  // predictions on paper (tools/planner)

// The bytes of a file, as given (-f options). Throws std::system_error naming the path.
std::string read_text_file(const std::string& path);

// Runs `body`, turning the errors a user can cause into one line on stderr and an exit code.
int run_guarded(const char* command, const std::function<void()>& body);

}  // namespace hotcold::launcher
