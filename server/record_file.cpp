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
  if (::fstat(fd_, &st) == 0 && st.st_size > 0 && ::pread(fd_, &last, 1, st.st_size - 1) == 1 && last != '\n') torn_ = write_all("\n") != 1;
}

record_file::record_file(record_file&& o) noexcept
    : path_(std::move(o.path_)), fd_(std::exchange(o.fd_, -1)), torn_(o.torn_), lost_(o.lost_), lost_now_(o.lost_now_) {}

record_file& record_file::operator=(record_file&& o) noexcept {
  std::swap(path_, o.path_);
  std::swap(fd_, o.fd_);
  std::swap(torn_, o.torn_);
  std::swap(lost_, o.lost_);
  std::swap(lost_now_, o.lost_now_);
  return *this;
}

record_file::~record_file() {
  if (fd_ < 0) return;
  if (lost_now_ > 0) fmt::print(stderr, "hotcold serve: --record {}: {} records lost since it last could write\n", path_, lost_now_);
  ::close(fd_);
}

bool record_file::append(const std::string& json_line) {
  // After a record cut short, this one starts a line of its own (in the same write).
  const std::string bytes = (torn_ ? "\n" : "") + json_line + "\n";
  const size_t wrote = write_all(bytes);
  if (wrote == bytes.size()) {
    if (lost_now_ > 0) fmt::print(stderr, "hotcold serve: --record {}: writing again; {} records were lost\n", path_, lost_now_);
    torn_ = false;
    lost_now_ = 0;
    return true;
  }
  const int error = errno;
  // Something of it went: the file now ends inside a line (a lone newline ends the torn one).
  if (wrote > 0) torn_ = !(torn_ && wrote == 1);
  if (lost_now_++ == 0)
    fmt::print(stderr, "hotcold serve: --record {}: cannot write: {}; records are lost until it can (counted in hotcold_record_write_errors_total)\n",
               path_, std::strerror(error));
  ++lost_;
  return false;
}

size_t record_file::write_all(const std::string& bytes) {
  size_t at = 0;
  while (at < bytes.size()) {
    const ssize_t n = ::write(fd_, bytes.data() + at, bytes.size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    at += static_cast<size_t>(n);
  }
  return at;
}

}  // namespace hotcold::server
