#include "engine/disk_reads.hpp"

#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

namespace hotcold {

namespace {
// The alignment a direct read of fd wants of its offset, length and memory: what the file system says
// (statx's STATX_DIOALIGN: 512 on most disks), else a page.
uint64_t direct_alignment(int fd) {
  struct statx sx {};
  if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 && (sx.stx_mask & STATX_DIOALIGN) && sx.stx_dio_offset_align > 0)
    return std::max<uint64_t>({sx.stx_dio_offset_align, sx.stx_dio_mem_align, 512});
  return 4096;
}

struct file_identity {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  bool operator==(const file_identity&) const = default;
};
file_identity identity_of(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return {};
  return {static_cast<uint64_t>(st.st_size), static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}
}  // namespace

// One read of the file (after coalescing) into its bounce buffer, and the pieces it carries.
struct read_op {
  uint64_t offset = 0, bytes = 0;  // what is read (aligned for direct I/O)
  uint64_t needed = 0;             // bytes from `offset` its pieces reach (the rest may lie past the end)
  uint64_t done = 0;               // bytes in so far
  std::unique_ptr<uint8_t, decltype(&std::free)> buffer{nullptr, &std::free};  // (a size class's: 2^k bytes)
  uint8_t* in_place = nullptr;  // read straight into the pieces' memory (aligned, contiguous): no buffer
  std::vector<disk_file::piece> pieces;
  uint8_t* target() const { return in_place ? in_place : buffer.get(); }
  uint64_t batch = 0;
};

struct disk_file::impl {
  std::string path;
  options o;
  int fd = -1;
  bool direct = false, uring = false;
  io_uring ring{};
  file_identity id;
  std::mutex m;
  counts c;
  uint64_t next_ticket = 1;
  unsigned in_flight = 0;
  struct batch {
    std::vector<std::unique_ptr<read_op>> ops;
    size_t pending = 0;
    std::string error;
  };
  std::map<uint64_t, batch> batches;

  uint64_t direct_align = 4096;  // offsets, lengths and buffers of a direct read
  uint64_t align() const { return direct ? direct_align : 1; }
  [[noreturn]] void fail(const std::string& what) const { throw std::runtime_error(fmt::format("{}: {}", path, what)); }

  void check_unchanged() {
    const file_identity now = identity_of(fd);
    if (now.size != id.size)
      fail(fmt::format("the file changed on disk while running (its size is {} bytes, {} when it was opened)", now.size, id.size));
    if (!(now == id)) fail("the file changed on disk while running (its modification time moved since it was opened)");
  }

  // The pieces as reads: sorted by offset, each read the aligned span of the pieces it carries, a
  // piece joining the read before it where their spans touch and the read stays within max_read.
  std::vector<std::unique_ptr<read_op>> plan(std::span<const piece> pieces, uint64_t ticket) {
    std::vector<size_t> order(pieces.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return pieces[a].offset < pieces[b].offset; });
    std::vector<std::unique_ptr<read_op>> ops;
    const uint64_t a = align();
    for (size_t i : order) {
      const piece& p = pieces[i];
      if (p.bytes == 0) continue;
      if (p.offset > id.size || p.bytes > id.size - p.offset)
        fail(fmt::format("a read of {} bytes at offset {} passes the end of the file ({} bytes)", p.bytes, p.offset, id.size));
      const uint64_t lo = p.offset / a * a, hi = (p.offset + p.bytes + a - 1) / a * a;
      read_op* last = ops.empty() ? nullptr : ops.back().get();
      // A piece whose offset, length and memory are aligned is read straight into place, joined to
      // the read before it where that one is too and both lie end to end, in the file and in memory;
      // another joins a bounce-buffer read before it whose blocks it touches.
      const bool aligned = p.offset % a == 0 && p.bytes % a == 0 && reinterpret_cast<uintptr_t>(p.into) % a == 0;
      const bool joins = last &&
                         (aligned ? last->in_place && p.offset == last->offset + last->bytes && static_cast<uint8_t*>(p.into) == last->in_place + last->bytes
                                  : !last->in_place && lo <= last->offset + last->bytes) &&
                         std::max(hi, last->offset + last->bytes) - last->offset <= o.max_read;
      if (joins) {
        last->bytes = std::max(hi, last->offset + last->bytes) - last->offset;
        last->needed = std::max(last->needed, p.offset + p.bytes - last->offset);
        last->pieces.push_back(p);
        continue;
      }
      auto op = std::make_unique<read_op>();
      op->offset = lo, op->bytes = hi - lo, op->needed = p.offset + p.bytes - lo, op->batch = ticket;
      op->in_place = aligned ? static_cast<uint8_t*>(p.into) : nullptr;
      op->pieces.push_back(p);
      ops.push_back(std::move(op));
    }
    for (auto& op : ops) {
      if (op->in_place) continue;
      op->buffer = bounce_buffer(op->bytes);
    }
    return ops;
  }

  // A read's result: `res` bytes (negative: an error) at op->offset + op->done. Returns true when the op
  // is finished (its pieces copied, or its batch's error set); false when the rest must be read.
  bool landed(read_op& op, int64_t res) {
    batch& b = batches.at(op.batch);
    if (res < 0) {
      if (b.error.empty()) b.error = fmt::format("{}: a read of {} bytes at offset {} failed: {}", path, op.bytes - op.done, op.offset + op.done, std::strerror(static_cast<int>(-res)));
      return true;
    }
    op.done += static_cast<uint64_t>(res);
    if (op.done < op.needed) {
      if (res > 0) return false;  // a partial read: the rest again
      if (b.error.empty())
        b.error = fmt::format("{}: a short read at offset {}: the file ends before {} (it is shorter than when it was opened)", path, op.offset + op.done,
                              op.offset + op.needed);
      return true;
    }
    if (!op.in_place)
      for (const piece& p : op.pieces) std::memcpy(p.into, op.buffer.get() + (p.offset - op.offset), p.bytes);
    return true;
  }

  // Bounce buffers by size class (powers of two from a page), kept for the next reads: a fresh large
  // allocation is mapped memory the system zeroes on first touch, every time.
  using buffer_ptr = std::unique_ptr<uint8_t, decltype(&std::free)>;
  std::vector<std::vector<buffer_ptr>> spare;
  uint64_t spare_bytes = 0;
  static constexpr uint64_t spare_limit = 64ull << 20;
  static unsigned size_class(uint64_t bytes) { return static_cast<unsigned>(std::bit_width(std::max<uint64_t>(bytes, 4096) - 1)); }
  buffer_ptr bounce_buffer(uint64_t bytes) {
    const unsigned c = size_class(bytes);
    if (c < spare.size() && !spare[c].empty()) {
      buffer_ptr b = std::move(spare[c].back());
      spare[c].pop_back();
      spare_bytes -= uint64_t{1} << c;
      return b;
    }
    buffer_ptr b(static_cast<uint8_t*>(std::aligned_alloc(std::max<uint64_t>(direct_align, 4096), uint64_t{1} << c)), &std::free);
    if (!b) fail(fmt::format("no memory for a read of {} bytes", bytes));
    return b;
  }
  void recycle(buffer_ptr b, uint64_t bytes) {
    const unsigned c = size_class(bytes);
    if (!b || spare_bytes + (uint64_t{1} << c) > spare_limit) return;
    if (spare.size() <= c) spare.resize(c + 1);
    spare_bytes += uint64_t{1} << c;
    spare[c].push_back(std::move(b));
  }

  void finish(read_op& op) {
    batch& b = batches.at(op.batch);
    recycle(std::move(op.buffer), op.bytes);
    --b.pending;
  }

  void queue(read_op& op) {
    if (in_flight >= o.depth) {  // (the completion queue holds what is in flight: wait, and count it)
      const auto t0 = std::chrono::steady_clock::now();
      while (in_flight >= o.depth) {
        io_uring_submit(&ring);
        reap_one();
      }
      c.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    if (!sqe) {
      io_uring_submit(&ring);
      sqe = io_uring_get_sqe(&ring);
      if (!sqe) fail("no room to queue a read");
    }
    io_uring_prep_read(sqe, fd, op.target() + op.done, static_cast<unsigned>(op.bytes - op.done), op.offset + op.done);
    io_uring_sqe_set_data(sqe, &op);
    ++in_flight;
  }

  void reap_one() {
    io_uring_cqe* cqe = nullptr;
    int e = 0;
    do e = io_uring_wait_cqe(&ring, &cqe);
    while (e == -EINTR);
    if (e < 0) fail(fmt::format("waiting for reads: {}", std::strerror(-e)));
    auto* op = static_cast<read_op*>(io_uring_cqe_get_data(cqe));
    const int64_t res = cqe->res;
    io_uring_cqe_seen(&ring, cqe);
    --in_flight;
    if (landed(*op, res)) finish(*op);
    else queue(*op), io_uring_submit(&ring);
  }

  void read_now(read_op& op) {  // pread, to the end of the op or an error
    for (;;) {
      const ssize_t r = pread(fd, op.target() + op.done, op.bytes - op.done, static_cast<off_t>(op.offset + op.done));
      if (r < 0 && errno == EINTR) continue;
      if (landed(op, r < 0 ? -errno : r)) break;
    }
    finish(op);
  }
};

disk_file::disk_file(const std::string& path) : disk_file(path, options{}) {}

disk_file::disk_file(const std::string& path, const options& o) : p_(std::make_unique<impl>()) {
  p_->path = path, p_->o = o;
  if (o.direct) {
    p_->fd = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
    p_->direct = p_->fd >= 0;
    if (p_->direct) p_->direct_align = direct_alignment(p_->fd);
  }
  if (p_->fd < 0) p_->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);  // (a file system without direct I/O: tmpfs)
  if (p_->fd < 0) throw std::runtime_error(fmt::format("{}: cannot open for reading: {}", path, std::strerror(errno)));
  p_->id = identity_of(p_->fd);
  if (o.use_uring) p_->uring = io_uring_queue_init(std::max(1u, o.depth), &p_->ring, 0) == 0;
}

disk_file::~disk_file() {
  if (!p_) return;
  if (p_->uring) {
    while (p_->in_flight > 0) {  // (reads still in flight write into their buffers: wait them out)
      io_uring_cqe* cqe = nullptr;
      if (io_uring_wait_cqe(&p_->ring, &cqe) < 0) break;
      io_uring_cqe_seen(&p_->ring, cqe);
      --p_->in_flight;
    }
    io_uring_queue_exit(&p_->ring);
  }
  ::close(p_->fd);
}

uint64_t disk_file::submit(std::span<const piece> pieces) {
  std::lock_guard lock(p_->m);
  p_->check_unchanged();
  const uint64_t ticket = p_->next_ticket++;
  auto ops = p_->plan(pieces, ticket);
  auto& b = p_->batches[ticket];
  b.pending = ops.size();
  p_->c.pieces += pieces.size(), p_->c.reads += ops.size();
  for (const auto& op : ops) p_->c.bytes += op->bytes;
  b.ops = std::move(ops);
  for (auto& op : b.ops) {
    if (p_->uring) p_->queue(*op);
    else p_->read_now(*op);
  }
  if (p_->uring && !b.ops.empty()) io_uring_submit(&p_->ring);
  return ticket;
}

void disk_file::wait(uint64_t ticket) {
  std::lock_guard lock(p_->m);
  const auto t0 = std::chrono::steady_clock::now();
  auto it = p_->batches.find(ticket);
  if (it == p_->batches.end()) throw std::logic_error(fmt::format("{}: no reads under ticket {}", p_->path, ticket));
  while (it->second.pending > 0) p_->reap_one();
  p_->c.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string error = std::move(it->second.error);
  p_->batches.erase(it);
  if (!error.empty()) throw std::runtime_error(error);
  p_->check_unchanged();  // (a file rewritten in place while the reads ran)
}

void disk_file::read(std::span<const piece> pieces) { wait(submit(pieces)); }

disk_file::counts disk_file::counted() const {
  std::lock_guard lock(p_->m);
  return p_->c;
}
const std::string& disk_file::path() const { return p_->path; }
uint64_t disk_file::size() const { return p_->id.size; }
bool disk_file::direct() const { return p_->direct; }
bool disk_file::uses_uring() const { return p_->uring; }

}  // namespace hotcold
