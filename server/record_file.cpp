#include "server/record_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <system_error>
#include <utility>

#include <fmt/format.h>

namespace hotcold::server {

record_file::record_file(const std::string& path) : path_(path) {
  if (std::filesystem::is_directory(path)) throw std::invalid_argument(fmt::format("--record {}: a directory, not a file", path));
  // Read and write: the last byte is read back (pread), records are appended.
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) throw std::system_error(errno, std::generic_category(), fmt::format("cannot write --record {}", path));
  struct stat st {};
  char last = '\n';
  if (::fstat(fd_, &st) == 0 && st.st_size > 0 && ::pread(fd_, &last, 1, st.st_size - 1) == 1 && last != '\n') write_all("\n");
}

record_file::record_file(record_file&& o) noexcept : path_(std::move(o.path_)), fd_(std::exchange(o.fd_, -1)) {}

record_file& record_file::operator=(record_file&& o) noexcept {
  std::swap(path_, o.path_);
  std::swap(fd_, o.fd_);
  return *this;
}

record_file::~record_file() {
  if (fd_ >= 0) ::close(fd_);
}

void record_file::append(const std::string& json_line) {
  if (!write_all(json_line + "\n")) fmt::print(stderr, "hotcold serve: --record {}: cannot write: {}\n", path_, std::strerror(errno));
}

bool record_file::write_all(const std::string& bytes) {
  for (size_t at = 0; at < bytes.size();) {
    const ssize_t n = ::write(fd_, bytes.data() + at, bytes.size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    at += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace hotcold::server
