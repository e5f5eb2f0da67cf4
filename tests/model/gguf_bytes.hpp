#pragma once
// Builds GGUF bytes by hand, independently of gguf::writer, so reader tests do not trust the writer.
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

namespace hotcold::test {

struct gguf_bytes {
  std::vector<uint8_t> b;

  gguf_bytes& raw(std::string_view s) {
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  template <class T>
  gguf_bytes& put(T v) {
    size_t at = b.size();
    b.resize(at + sizeof(T));
    std::memcpy(b.data() + at, &v, sizeof(T));
    return *this;
  }
  gguf_bytes& u32(uint32_t v) { return put(v); }
  gguf_bytes& u64(uint64_t v) { return put(v); }
  gguf_bytes& str(std::string_view s) { return u64(s.size()).raw(s); }
  gguf_bytes& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3, std::string_view magic = "GGUF") {
    return raw(magic).u32(version).u64(n_tensors).u64(n_kv);
  }
  // key + type + payload for a u32 value
  gguf_bytes& kv_u32(std::string_view key, uint32_t v) { return str(key).u32(4).u32(v); }
  gguf_bytes& kv_str(std::string_view key, std::string_view v) { return str(key).u32(8).str(v); }
  gguf_bytes& tensor(std::string_view name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(ne.size()));
    for (auto d : ne) u64(d);
    return u32(type).u64(offset);
  }
  gguf_bytes& pad_to(size_t alignment) {
    while (b.size() % alignment) b.push_back(0);
    return *this;
  }
  gguf_bytes& zeros(size_t n) {
    b.resize(b.size() + n, 0);
    return *this;
  }
};

}  // namespace hotcold::test
