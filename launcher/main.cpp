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

int main(int argc, char** argv) { return hotcold::launcher::run_command_line(argc, argv); }
