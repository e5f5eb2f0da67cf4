#pragma once
// GGUF v2/v3 files (and PowerInfer's, which use the same layout with the magic "PWRI"), read over mmap.
//
// Layout (all little-endian):
//   magic[4] version:u32 n_tensors:u64 n_kv:u64
//   n_kv x { key:string value_type:u32 value }            string = len:u64 bytes[len]
//   n_tensors x { name:string n_dims:u32 ne:u64[n_dims] type:u32 offset:u64 }
//   padding to general.alignment (default 32), then the data section; offsets are relative to it.
//
// Every count, length, shape and offset is checked against the file before it is used; a bad file
// raises gguf::format_error naming the field and its byte offset. Nothing is allocated from a count
// that the remaining bytes could not hold.
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/tensor_types.hpp"

namespace hotcold::gguf {

enum class value_type : uint32_t {
  u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7,
  string = 8, array = 9, u64 = 10, i64 = 11, f64 = 12,
};
std::string_view value_type_name(value_type t);
// Bytes of one scalar element, 0 for string and array.
size_t scalar_size(value_type t);

enum class file_kind { gguf, powerinfer };  // magic "GGUF" or "PWRI"

constexpr uint32_t default_alignment = 32;
constexpr size_t max_tensor_name = 63;     // ggml's GGML_MAX_NAME (64) counts the NUL
constexpr size_t max_dims = 4;
constexpr size_t max_key_length = 65535;   // the GGUF spec bounds keys to 2^16 - 1 bytes
constexpr int max_array_depth = 8;         // nested arrays deeper than this are refused

// A corrupt or unsupported file: what is wrong, which field, at which byte.
class format_error : public std::runtime_error {
 public:
  format_error(std::string source, std::string field, uint64_t offset, const std::string& problem);
  const std::string& field() const { return field_; }
  uint64_t offset() const { return offset_; }

 private:
  std::string field_;
  uint64_t offset_;
};

// A well-formed file whose metadata does not have what the caller asked for (wrong type...).
class metadata_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One metadata value. Strings and numeric array elements point into the mapped file.
class value {
 public:
  value_type type() const { return type_; }
  bool is_array() const { return type_ == value_type::array; }
  bool is_integer() const;
  bool is_float() const { return type_ == value_type::f32 || type_ == value_type::f64; }

  // Scalars. Integers convert to the asked width only when the value fits; otherwise metadata_error.
  uint64_t as_u64() const;
  int64_t as_i64() const;
  double as_f64() const;  // any numeric type
  bool as_bool() const;
  std::string_view as_string() const;

  // Arrays.
  value_type element_type() const { return elem_; }
  uint64_t size() const { return count_; }
  std::string_view string_at(size_t i) const;
  int64_t int_at(size_t i) const;     // integer element types
  double number_at(size_t i) const;   // any numeric element type
  const value& array_at(size_t i) const;  // nested arrays
  std::span<const uint8_t> raw_elements() const { return {raw_, static_cast<size_t>(count_ * scalar_size(elem_))}; }

  // A short human rendering: scalars in full, arrays summarized beyond `max_items`.
  std::string to_display(size_t max_items = 8) const;

 private:
  friend class parser;
  friend class file;
  value_type type_ = value_type::u8;
  value_type elem_ = value_type::u8;
  uint64_t bits_ = 0;                 // scalar payload, little-endian, zero-extended
  std::string_view str_;
  const uint8_t* raw_ = nullptr;      // numeric array elements in the file
  uint64_t count_ = 0;
  std::vector<std::string_view> strings_;
  std::vector<value> items_;
};

struct key_value {
  std::string_view key;
  value val;
  uint64_t offset;  // byte offset of the key in the file
};

struct tensor_info {
  std::string_view name;
  tensor_type type;
  uint32_t n_dims;
  std::array<int64_t, max_dims> ne;  // ne[0] is the contiguous (row) dimension; unused dims are 1
  uint64_t offset;       // relative to the data section
  uint64_t n_elements;
  uint64_t n_bytes;
  const uint8_t* data;   // into the mapping
  uint64_t info_offset;  // where this tensor's info record starts in the file
};

class file {
 public:
  // Maps `path` read-only. Throws std::system_error for I/O problems, format_error for bad content.
  static file open(const std::string& path);
  // Parses bytes owned by the caller, who keeps them alive as long as the file object.
  static file parse(std::span<const uint8_t> bytes, std::string source_name = "<memory>");

  const std::string& source() const { return source_; }
  file_kind kind() const { return kind_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t size() const { return bytes_.size(); }
  std::span<const uint8_t> bytes() const { return bytes_; }

  const std::vector<key_value>& metadata() const { return kv_; }
  const value* find(std::string_view key) const;
  // Typed look-ups: nullopt when the key is absent, metadata_error when its type does not fit.
  std::optional<std::string_view> get_string(std::string_view key) const;
  std::optional<int64_t> get_int(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  // An array whose elements have type `elem` (or any type when elem is nullopt); nullptr when absent.
  const value* get_array(std::string_view key, std::optional<value_type> elem = std::nullopt) const;

  const std::vector<tensor_info>& tensors() const { return tensors_; }
  const tensor_info* find_tensor(std::string_view name) const;

 private:
  friend class parser;
  std::shared_ptr<const void> mapping_;  // keeps the mmap alive
  std::span<const uint8_t> bytes_;
  std::string source_;
  file_kind kind_ = file_kind::gguf;
  uint32_t version_ = 0;
  uint32_t alignment_ = default_alignment;
  uint64_t data_offset_ = 0;
  std::vector<key_value> kv_;
  std::vector<tensor_info> tensors_;
};

}  // namespace hotcold::gguf
