#pragma once
// serve --record's file: one JSON line per record, each written with one write(2) on a file opened
// for appending, so a kill leaves whole lines (or the last one cut short, never two run together); a
// file that does not end in a newline (cut short before) gets one first. A write that fails (a full
// disk, a file-size limit) loses its record, and may leave it cut short: the next record then starts
// on a new line, so a replay reads every whole record and skips the torn one. A failure is logged
// once per outage, and its end with the number of records lost.
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
  // One record; false when it could not be written (lost), and serving goes on.
  bool append(const std::string& json_line);
  int64_t lost() const { return lost_; }  // records lost, in all

 private:
  // Writes what it can of `bytes`; how much went.
  size_t write_all(const std::string& bytes);
  std::string path_;
  int fd_ = -1;
  bool torn_ = false;             // the file ends in part of a record
  int64_t lost_ = 0, lost_now_ = 0;  // records lost in all, and in this outage
};

}  // namespace hotcold::server
