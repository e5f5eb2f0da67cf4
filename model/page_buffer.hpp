#pragma once
// Anonymous memory for large buffers read in long or scattered runs (the weights' private copy, the
// KV cache): zeroed by the kernel, backed only where written, and asked for 2 MB pages (madvise; the
// kernel may still give 4 KB pages), where 4 KB pages would cost a TLB miss every few rows.
#include <cstddef>
#include <string>

namespace hotcold {

class page_buffer {
 public:
  page_buffer() = default;
  // Throws std::system_error naming `what` when the memory cannot be had.
  page_buffer(size_t bytes, const std::string& what);
  ~page_buffer();
  page_buffer(page_buffer&& other) noexcept;
  page_buffer& operator=(page_buffer&& other) noexcept;
  page_buffer(const page_buffer&) = delete;
  page_buffer& operator=(const page_buffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return bytes_; }
  bool huge_pages() const { return huge_; }  // whether the kernel took the 2 MB page hint

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  bool huge_ = false;
};

}  // namespace hotcold
