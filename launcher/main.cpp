#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <functional>
#include <system_error>

#include <fmt/format.h>

#include "launcher/commands.hpp"
#include "model/arch.hpp"
#include "model/gguf.hpp"
#include "model/vocab.hpp"

namespace hotcold::launcher {

std::string read_text_file(const std::string& path) {
  if (std::filesystem::is_directory(path)) throw std::system_error(EISDIR, std::generic_category(), path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::system_error(errno, std::generic_category(), path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw std::system_error(errno, std::generic_category(), path);
  return text;
}

int run_guarded(const char* command, const std::function<void()>& body) {
  try {
    body();
    return exit_ok;
  } catch (const model_error& e) {
    fmt::print(stderr, "hotcold {}: cannot run this model: {}\n", command, e.what());
    return exit_io_error;
  } catch (const std::length_error& e) {
    fmt::print(stderr, "hotcold {}: {}\n", command, e.what());
    return exit_io_error;
  } catch (const gguf::format_error& e) {
    fmt::print(stderr, "hotcold {}: not a valid GGUF file: {}\n", command, e.what());
    return exit_bad_input;
  } catch (const std::system_error& e) {
    // Writers say "cannot write PATH" (or another "cannot ...") themselves; the rest are reads.
    const std::string what = e.what();
    fmt::print(stderr, "hotcold {}: {}{}\n", command, what.rfind("cannot ", 0) == 0 ? "" : "cannot read ", what);
    return exit_io_error;
  } catch (const vocab_error& e) {
    fmt::print(stderr, "hotcold {}: bad tokenizer metadata: {}\n", command, e.what());
    return exit_bad_input;
  } catch (const gguf::metadata_error& e) {
    fmt::print(stderr, "hotcold {}: bad metadata: {}\n", command, e.what());
    return exit_bad_input;
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "hotcold {}: {}\n", command, e.what());
    return exit_bad_input;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "hotcold {}: out of memory (a context, batch or file larger than this machine holds? try a smaller -c)\n", command);
    return exit_io_error;
  } catch (const std::exception& e) {
    fmt::print(stderr, "hotcold {}: {}\n", command, e.what());
    return exit_io_error;
  }
}

}  // namespace hotcold::launcher

int main(int argc, char** argv) {
  using namespace hotcold::launcher;
  CLI::App app{"hotcold: ReLU-sparse LLM inference with hot/cold neuron placement"};
  app.set_version_flag("--version", "hotcold 0.1.0");
  app.require_subcommand(1);
  int exit_code = exit_ok;
  add_inspect_command(app, exit_code);
  add_tokenize_commands(app, exit_code);
  add_devices_command(app, exit_code);
  add_gen_model_command(app, exit_code);
  add_generate_commands(app, exit_code);
  add_bench_command(app, exit_code);
  add_sparse_commands(app, exit_code);
  add_serve_command(app, exit_code);
  add_client_command(app, exit_code);
  add_keygen_command(app, exit_code);
  add_replay_command(app, exit_code);
  add_plan_command(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "hotcold: {}\nRun with --help for usage.\n", e.what());
    return exit_bad_input;
  }
  return exit_code;
}
