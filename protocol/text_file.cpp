#include "protocol/text_file.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace hotcold::protocol {

std::vector<std::string> read_text_lines(const std::string& path, const char* what, size_t max_bytes) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw std::invalid_argument(std::string(what) + " '" + path + "' is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument(std::string(what) + " '" + path + "': cannot read (" + std::strerror(errno) + ")");
  std::string text(max_bytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) throw std::invalid_argument(std::string(what) + " '" + path + "': cannot read");
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > max_bytes)
    throw std::invalid_argument(std::string(what) + " '" + path + "' holds more than " + std::to_string(max_bytes) + " bytes: not the file meant");
  std::vector<std::string> lines;
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  return lines;
}

std::string trim_blanks(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  size_t b = 0;
  while (b < s.size() && (s[b] == ' ' || s[b] == '\t')) ++b;
  return s.substr(b);
}

}  // namespace hotcold::protocol
