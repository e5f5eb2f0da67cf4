#pragma once
// serve --record's file: one JSON line per record, each written with one write(2) on a file opened
// for appending, so a kill leaves whole lines (or the last one cut short, never two run together); a
// file that does not end in a newline (cut short before) gets one first.
#include <string>

namespace hotcold::server {

class record_file {
 public:
  record_file() = default;
  // Throws std::invalid_argument for a directory, std::system_error when it cannot be opened.
  explicit record_file(const std::string& path);
  record_file(record_file&& o) noexcept;
  record_file& operator=(record_file&& o) noexcept;
  ~record_file();
  bool is_open() const { return fd_ >= 0; }
  // One record; a failed write is reported once per failure on stderr, and serving goes on.
  void append(const std::string& json_line);

 private:
  bool write_all(const std::string& bytes);
  std::string path_;
  int fd_ = -1;
};

}  // namespace hotcold::server
