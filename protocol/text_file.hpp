#pragma once
// Small text files a person points hotcold at (keys, allow lists, tokens): read with a size bound,
// so that a wrong path (/dev/zero, a directory, a model file) gets a clear error instead of an
// endless read or a silent empty list.
#include <cstddef>
#include <string>
#include <vector>

namespace hotcold::protocol {

// The file's lines (without their line ends). Throws std::invalid_argument naming `what` and the path
// when it cannot be opened, is a directory, or holds more than max_bytes.
std::vector<std::string> read_text_lines(const std::string& path, const char* what, size_t max_bytes = 1 << 20);

// A line without leading and trailing blanks (spaces, tabs, CR).
std::string trim_blanks(std::string s);

}  // namespace hotcold::protocol
