// The disk's rate for the disk tier's reads (tools/planner.hpp, measure_disk_rate): random reads of
// one unit's rows, submitted as the tier submits a layer's misses.
#include <chrono>
#include <random>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "engine/disk_reads.hpp"
#include "tools/planner.hpp"

namespace hotcold::tools {

disk_rate measure_disk_rate(const std::string& path, uint64_t piece_bytes, int64_t batch, int64_t pieces) {
  if (piece_bytes == 0 || batch <= 0 || pieces <= 0) throw std::invalid_argument("measure_disk_rate: pieces of no bytes, or none");
  disk_file file(path);
  const uint64_t size = file.size();
  if (size < piece_bytes) throw std::invalid_argument(fmt::format("{}: {} bytes, shorter than one read of {}", path, size, piece_bytes));
  std::mt19937_64 rng(0x5eed);
  std::uniform_int_distribution<uint64_t> where(0, (size - piece_bytes) / 64);
  std::vector<char> memory(static_cast<size_t>(piece_bytes * static_cast<uint64_t>(batch)));
  std::vector<disk_file::piece> ps(static_cast<size_t>(batch));
  const auto before = file.counted();
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t done = 0; done < pieces; done += batch) {
    for (size_t k = 0; k < ps.size(); ++k) ps[k] = {where(rng) * 64, piece_bytes, memory.data() + k * piece_bytes};  // (64-byte steps: rows' alignment)
    file.read(ps);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  disk_rate r;
  r.reads = file.counted().reads - before.reads;
  r.bytes = static_cast<uint64_t>(((pieces + batch - 1) / batch) * batch) * piece_bytes;
  r.gbs = static_cast<double>(r.bytes) / seconds / 1e9;
  r.direct = file.direct();
  return r;
}

}  // namespace hotcold::tools
