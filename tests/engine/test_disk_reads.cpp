// The disk tier's reads (engine/disk_reads): pieces of a file land in place whatever their alignment,
// in io_uring or pread, direct or through the page cache; touching pieces go as one read; a read past
// the end, a file shortened or rewritten while open are errors naming the file and the offset.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "engine/disk_reads.hpp"
#include "tests/model/tiny_models.hpp"

namespace hotcold {
namespace {

// A file of `bytes` whose byte i is a hash of i (a piece read from the wrong offset shows).
std::string pattern_file(const std::string& name, uint64_t bytes) {
  const auto path = (test::scratch_dir() / name).string();
  std::vector<uint8_t> data(bytes);
  for (uint64_t i = 0; i < bytes; ++i) data[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(bytes));
  return path;
}
uint8_t expected(uint64_t i) { return static_cast<uint8_t>((i * 2654435761u) >> 13); }

struct way {
  bool direct, uring;
};
class DiskReads : public testing::TestWithParam<way> {};

// Several hundred pieces of odd sizes at odd offsets, some overlapping, in three batches in flight at
// once and waited on out of order: every byte where it belongs.
TEST_P(DiskReads, PiecesLandInPlace) {
  const uint64_t size = (3 << 20) + 777;
  const auto path = pattern_file("pieces.bin", size);
  disk_file::options o;
  o.direct = GetParam().direct, o.use_uring = GetParam().uring, o.depth = 8;
  disk_file f(path, o);
  EXPECT_EQ(f.size(), size);
  EXPECT_EQ(f.uses_uring(), GetParam().uring);  // (io_uring works on these machines)
  std::mt19937_64 rng(7);
  std::vector<std::vector<uint8_t>> into(3 * 200);
  std::vector<std::vector<disk_file::piece>> batches(3);
  for (size_t k = 0; k < into.size(); ++k) {
    const uint64_t bytes = 1 + rng() % 9000, offset = rng() % (size - bytes + 1);
    into[k].assign(bytes, 0);
    batches[k % 3].push_back({offset, bytes, into[k].data()});
  }
  const uint64_t t0 = f.submit(batches[0]), t1 = f.submit(batches[1]), t2 = f.submit(batches[2]);
  f.wait(t2), f.wait(t0), f.wait(t1);
  for (size_t k = 0; k < into.size(); ++k) {
    const auto& p = batches[k % 3][k / 3];
    for (uint64_t i = 0; i < p.bytes; ++i)
      ASSERT_EQ(into[k][i], expected(p.offset + i)) << "piece " << k << " at " << p.offset << ", byte " << i;
  }
  EXPECT_EQ(f.counted().pieces, into.size());
  EXPECT_THROW(f.wait(t0), std::logic_error);  // (a ticket is waited on once)
  // The last bytes of the file (a direct read rounds past the end).
  std::vector<uint8_t> tail(100);
  f.read(std::vector<disk_file::piece>{{size - 100, 100, tail.data()}});
  for (uint64_t i = 0; i < 100; ++i) ASSERT_EQ(tail[i], expected(size - 100 + i));
}

// Pieces that touch go as one read, up to max_read; a gap splits them.
TEST_P(DiskReads, TouchingPiecesAreOneRead) {
  const auto path = pattern_file("touching.bin", 1 << 20);
  disk_file::options o;
  o.direct = GetParam().direct, o.use_uring = GetParam().uring, o.max_read = 64 << 10;
  disk_file f(path, o);
  std::vector<uint8_t> buf(1 << 20);
  std::vector<disk_file::piece> ps;
  for (uint64_t k = 0; k < 8; ++k) ps.push_back({8192 + k * 4096, 4096, buf.data() + k * 4096});  // 32 KiB, adjacent
  std::reverse(ps.begin(), ps.end());  // (in any order)
  f.read(ps);
  EXPECT_EQ(f.counted().reads, 1u);
  EXPECT_EQ(f.counted().bytes, 32u << 10);
  ps.clear();
  for (uint64_t k = 0; k < 4; ++k) ps.push_back({(256 << 10) + k * (64 << 10), 4096, buf.data() + k * 4096});  // gaps of 60 KiB
  f.read(ps);
  EXPECT_EQ(f.counted().reads, 1u + 4u);
  ps.clear();
  for (uint64_t k = 0; k < 32; ++k) ps.push_back({(512 << 10) + k * 4096, 4096, buf.data() + k * 4096});  // 128 KiB adjacent: two reads of 64
  f.read(ps);
  EXPECT_EQ(f.counted().reads, 1u + 4u + 2u);
  for (uint64_t i = 0; i < 128 << 10; ++i) ASSERT_EQ(buf[i], expected((512 << 10) + i));
}

// Pieces aligned in the file and in memory are read straight into place; end to end, as one read.
TEST_P(DiskReads, AlignedPiecesAreReadInPlace) {
  const auto path = pattern_file("aligned.bin", 1 << 20);
  disk_file::options o;
  o.direct = GetParam().direct, o.use_uring = GetParam().uring;
  disk_file f(path, o);
  std::unique_ptr<uint8_t, decltype(&std::free)> buf(static_cast<uint8_t*>(std::aligned_alloc(4096, 64 << 10)), &std::free);
  std::vector<disk_file::piece> ps;
  for (uint64_t k = 0; k < 8; ++k) ps.push_back({(100 << 12) + k * 4096, 4096, buf.get() + k * 4096});  // end to end
  ps.push_back({(200 << 12), 4096, buf.get() + 10 * 4096});  // apart
  ps.push_back({(201 << 12), 4096, buf.get() + 12 * 4096});  // next in the file, not in memory
  f.read(ps);
  EXPECT_EQ(f.counted().reads, 3u);
  EXPECT_EQ(f.counted().bytes, 10u * 4096);
  for (const auto& p : ps)
    for (uint64_t i = 0; i < p.bytes; ++i) ASSERT_EQ(static_cast<uint8_t*>(p.into)[i], expected(p.offset + i)) << p.offset << " " << i;
}

TEST_P(DiskReads, FaultsNameTheFileAndOffset) {
  const uint64_t size = 1 << 20;
  const auto path = pattern_file("faults.bin", size);
  disk_file::options o;
  o.direct = GetParam().direct, o.use_uring = GetParam().uring;
  std::vector<uint8_t> buf(8192);
  auto message = [&](disk_file& f, uint64_t offset, uint64_t bytes) {
    try {
      f.read(std::vector<disk_file::piece>{{offset, bytes, buf.data()}});
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  {
    disk_file f(path, o);
    const std::string past = message(f, size - 10, 20);
    EXPECT_NE(past.find(path), std::string::npos) << past;
    EXPECT_NE(past.find("offset " + std::to_string(size - 10)), std::string::npos) << past;
    EXPECT_EQ(message(f, size - 20, 20), "");  // (and it still reads)
  }
  {
    disk_file f(path, o);
    std::filesystem::resize_file(path, size / 2);  // shortened while open
    const std::string shorter = message(f, size / 2 + 4096, 100);
    EXPECT_NE(shorter.find(path), std::string::npos) << shorter;
    EXPECT_NE(shorter.find("changed on disk"), std::string::npos) << shorter;
  }
  pattern_file("faults.bin", size);
  {
    disk_file f(path, o);
    struct stat st {};
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    timespec times[2] = {st.st_atim, st.st_mtim};
    times[1].tv_sec += 5;  // rewritten in place: the same size, a later modification time
    ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
    const std::string rewritten = message(f, 4096, 100);
    EXPECT_NE(rewritten.find(path), std::string::npos) << rewritten;
    EXPECT_NE(rewritten.find("modification time"), std::string::npos) << rewritten;
  }
  EXPECT_THROW(disk_file((test::scratch_dir() / "absent.bin").string()), std::runtime_error);
}

INSTANTIATE_TEST_SUITE_P(Ways, DiskReads,
                         testing::Values(way{true, true}, way{false, true}, way{true, false}, way{false, false}),
                         [](const testing::TestParamInfo<way>& i) {
                           return std::string(i.param.direct ? "Direct" : "Cached") + (i.param.uring ? "Uring" : "Pread");
                         });

}  // namespace
}  // namespace hotcold
