#pragma once
// Reading pieces of a model's file while a step computes: the disk tier's I/O (docs/disk.md). A piece
// is a byte range of the file and where it goes in memory; a batch of pieces is submitted at once —
// many reads in flight through io_uring, pieces whose ranges touch or overlap coalesced into one
// read — and waited on later, so the reads of the next layer's cold rows overlap this layer's work.
// Direct I/O where the file system takes it: the page cache would hold the cold bytes a memory budget
// keeps out (the reads go through aligned bounce buffers, copied into place). Where io_uring cannot be
// set up (a kernel or container that refuses it) the same reads are made by pread, in order.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace hotcold {

class disk_file {
 public:
  struct options {
    bool direct = true;      // O_DIRECT where the file system allows it (else through the page cache)
    bool use_uring = true;   // io_uring; false: pread (what a refused io_uring falls back to)
    unsigned depth = 1024;   // reads in flight at most (a layer's read-ahead goes out whole, not waited on)
    uint64_t max_read = 1 << 20;  // a coalesced read's bytes at most
  };
  // Opens `path` for reading; std::runtime_error naming it where it cannot be opened.
  explicit disk_file(const std::string& path);
  disk_file(const std::string& path, const options& o);
  ~disk_file();
  disk_file(const disk_file&) = delete;
  disk_file& operator=(const disk_file&) = delete;

  struct piece {
    uint64_t offset = 0, bytes = 0;
    void* into = nullptr;
  };
  // Reads every piece into place and returns when all are there. std::runtime_error naming the file
  // and the offset for a read the system refused, a read past the end (a short read: the file is
  // shorter than it was), or a file changed since it was opened (its size or modification time).
  void read(std::span<const piece> pieces);
  // The same in two halves: submit() starts the reads (the pieces' memory must stay until wait);
  // wait(ticket) returns when that batch is in (and rethrows its error). Batches complete in any order;
  // a ticket is waited on once.
  uint64_t submit(std::span<const piece> pieces);
  void wait(uint64_t ticket);

  // What has been read so far: bytes of the file read (bounce-buffer rounding included), reads made
  // (after coalescing), pieces asked for, seconds spent waiting in wait().
  struct counts {
    uint64_t bytes = 0, reads = 0, pieces = 0;
    double wait_seconds = 0;
  };
  counts counted() const;
  const std::string& path() const;
  uint64_t size() const;
  bool direct() const;      // O_DIRECT took
  bool uses_uring() const;  // io_uring took

 private:
  struct impl;
  std::unique_ptr<impl> p_;
};

}  // namespace hotcold
