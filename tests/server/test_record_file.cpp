// serve --record's file when the disk fills: a file-size limit (RLIMIT_FSIZE, in a child process so
// that the test's own files are not limited) cuts a record short and refuses the next ones; once
// there is room again, the next record starts on a line of its own.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "server/record_file.hpp"

namespace {

namespace fs = std::filesystem;

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

std::string record(int i) { return "{\"n\":" + std::to_string(i) + ",\"pad\":\"" + std::string(90, 'x') + "\"}"; }  // 106 bytes and a newline

TEST(RecordFile, AFullDiskTearsOneRecordAndTheNextStartsOnItsOwnLine) {
  const std::string path = (fs::temp_directory_path() / ("hotcold-record-" + std::to_string(getpid()) + ".jsonl")).string();
  fs::remove(path);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    signal(SIGXFSZ, SIG_IGN);
    rlimit lim{};
    getrlimit(RLIMIT_FSIZE, &lim);
    rlimit small = lim;
    small.rlim_cur = 400;  // three records and part of a fourth
    if (setrlimit(RLIMIT_FSIZE, &small) != 0) _exit(10);
    hotcold::server::record_file f(path);
    int result = 0;
    for (int i = 0; i < 3; ++i) result |= f.append(record(i)) ? 0 : 1;                 // 321 bytes: whole
    for (int i = 3; i < 6; ++i) result |= f.append(record(i)) ? 2 : 0;                 // torn, then refused
    if (f.lost() != 3) result |= 4;
    if (setrlimit(RLIMIT_FSIZE, &lim) != 0) _exit(11);                                 // room again
    for (int i = 6; i < 8; ++i) result |= f.append(record(i)) ? 0 : 8;
    _exit(result);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  const auto lines = lines_of(path);
  // Records 0-2 whole, 3 cut short at byte 400 on its own line, 4 and 5 lost, 6 and 7 whole, each
  // on its own line (before: 6 was glued to the end of the torn 3).
  ASSERT_EQ(lines.size(), 6u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(lines[i], record(i));
  EXPECT_EQ(lines[3], record(3).substr(0, 400 - 3 * (record(0).size() + 1)));
  EXPECT_EQ(lines[4], record(6));
  EXPECT_EQ(lines[5], record(7));
  fs::remove(path);
}

// A file a killed server left cut short gets its line ended before the first new record.
TEST(RecordFile, AFileCutShortBeforeIsEndedFirst) {
  const std::string path = (fs::temp_directory_path() / ("hotcold-record-cut-" + std::to_string(getpid()) + ".jsonl")).string();
  {
    std::ofstream out(path, std::ios::trunc);
    out << record(0) << "\n" << record(1).substr(0, 20);
  }
  {
    hotcold::server::record_file f(path);
    EXPECT_TRUE(f.append(record(2)));
  }
  const auto lines = lines_of(path);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[1], record(1).substr(0, 20));
  EXPECT_EQ(lines[2], record(2));
  fs::remove(path);
}

}  // namespace
