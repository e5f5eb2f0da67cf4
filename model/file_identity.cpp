#include "model/file_identity.hpp"

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

namespace hotcold {

std::string file_identity(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw std::runtime_error(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  const auto size = static_cast<uint64_t>(in.tellg());
  uint64_t h = 1469598103934665603ull;  // FNV-1a, 64 bits
  auto add = [&](const char* p, size_t n) {
    for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<uint8_t>(p[i])) * 1099511628211ull;
  };
  std::vector<char> buf;
  auto read_at = [&](uint64_t at, uint64_t n) {
    n = std::min(n, size - std::min(at, size));
    buf.resize(n);
    in.seekg(static_cast<std::streamoff>(at));
    if (!in.read(buf.data(), static_cast<std::streamsize>(n))) throw std::runtime_error(fmt::format("{}: cannot read {} bytes at {}", path, n, at));
    add(buf.data(), n);
  };
  constexpr uint64_t head = 1ull << 20, sample = 64ull << 10, samples = 64;
  read_at(0, head);
  if (size > head)
    for (uint64_t k = 0; k < samples; ++k) read_at(head + (size - head) / samples * k, sample);
  return fmt::format("{}-{:016x}", size, h);
}

}  // namespace hotcold
