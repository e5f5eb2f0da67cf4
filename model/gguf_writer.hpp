#pragma once
// Writes GGUF v3 files (or PowerInfer-magic files) that gguf::file reads back.
// Metadata is encoded as it is added; tensor data is referenced, not copied, until write().
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "model/gguf.hpp"

namespace hotcold::gguf {

class writer {
 public:
  explicit writer(file_kind kind = file_kind::gguf) : kind_(kind) {}

  void set_u8(std::string_view key, uint8_t v);
  void set_i8(std::string_view key, int8_t v);
  void set_u16(std::string_view key, uint16_t v);
  void set_i16(std::string_view key, int16_t v);
  void set_u32(std::string_view key, uint32_t v);
  void set_i32(std::string_view key, int32_t v);
  void set_u64(std::string_view key, uint64_t v);
  void set_i64(std::string_view key, int64_t v);
  void set_f32(std::string_view key, float v);
  void set_f64(std::string_view key, double v);
  void set_bool(std::string_view key, bool v);
  void set_string(std::string_view key, std::string_view v);
  void set_strings(std::string_view key, std::span<const std::string> v);
  void set_array(std::string_view key, std::span<const float> v);
  void set_array(std::string_view key, std::span<const int32_t> v);
  void set_array(std::string_view key, std::span<const uint32_t> v);
  // Copies a value read from another file (any type, arrays and nested arrays included).
  void set_value(std::string_view key, const value& v);
  // Sets general.alignment (u32, a power of two) and pads the data section to it.
  void set_alignment(uint32_t alignment);
  // Any value already encoded as GGUF bytes (for nested arrays; see encode_array()).
  void set_encoded(std::string_view key, value_type type, std::span<const uint8_t> encoded_value);

  // Encodes an array value (element type, count, elements) whose elements are already encoded.
  static std::vector<uint8_t> encode_array(value_type elem, uint64_t count, std::span<const uint8_t> encoded_elements);

  // `data` must stay alive until write(); its size must match the shape and type.
  void add_tensor(std::string_view name, tensor_type type, std::span<const int64_t> ne, std::span<const uint8_t> data);

  std::vector<uint8_t> to_bytes() const;
  // Writes to `path` through a temporary file and a rename, so readers never see half a file.
  void write(const std::string& path) const;

 private:
  struct pending_tensor {
    std::string name;
    tensor_type type;
    std::vector<int64_t> ne;
    std::span<const uint8_t> data;
    uint64_t offset;
  };
  void begin_key(std::string_view key, value_type type);
  template <class T> void put(T v);
  template <class T> void set_scalar(std::string_view key, value_type type, T v);
  void put_string(std::string_view s);
  void put_value_body(const value& v);
  std::vector<uint8_t> header_bytes() const;  // header, metadata, infos, padding

  file_kind kind_;
  uint32_t alignment_ = default_alignment;
  uint64_t n_kv_ = 0;
  std::vector<uint8_t> kv_bytes_;
  std::unordered_set<std::string> keys_;
  std::vector<pending_tensor> tensors_;
  uint64_t data_size_ = 0;
};

}  // namespace hotcold::gguf
