#include "model/page_buffer.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <system_error>
#include <utility>

#include <fmt/format.h>

namespace hotcold {

page_buffer::page_buffer(size_t bytes, const std::string& what) : bytes_(std::max<size_t>(bytes, 1)) {
  void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::system_error(errno, std::generic_category(), fmt::format("allocating {} bytes for {}", bytes_, what));
  data_ = p;
  huge_ = madvise(p, bytes_, MADV_HUGEPAGE) == 0;
}

page_buffer::~page_buffer() {
  if (data_) munmap(data_, bytes_);
}

page_buffer::page_buffer(page_buffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)), huge_(std::exchange(other.huge_, false)) {}

page_buffer& page_buffer::operator=(page_buffer&& other) noexcept {
  if (this != &other) {
    if (data_) munmap(data_, bytes_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    huge_ = std::exchange(other.huge_, false);
  }
  return *this;
}

}  // namespace hotcold
