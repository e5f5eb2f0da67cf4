#pragma once
// What the `hotcold` commands share: exit codes, reading a file a flag names, turning the errors a
// user can cause into one line and an exit code. Every command's options are in options.cpp; its body
// in cmd_*.cpp, declared in cmd_*.hpp.
#include <functional>
#include <string>

namespace hotcold::launcher {

// Exit codes shared by every subcommand.
constexpr int exit_ok = 0;
constexpr int exit_io_error = 1;    // missing file, a directory, unreadable
constexpr int exit_bad_input = 2;   // corrupt file, bad flag values, usage errors

// The bytes of a file, as given (-f options). Throws std::system_error naming the path.
std::string read_text_file(const std::string& path);

// Runs `body`, turning the errors a user can cause into one line on stderr and an exit code.
int run_guarded(const char* command, const std::function<void()>& body);

// Parses the command line and runs the command it names; returns the exit code.
int run_command_line(int argc, char** argv);
// The command line as it was typed (its words joined by spaces, quoted where they hold one), for
// outputs that say what made them (bench).
std::string command_line();

}  // namespace hotcold::launcher
