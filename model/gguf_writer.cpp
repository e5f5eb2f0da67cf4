#include "model/gguf_writer.hpp"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <system_error>

#include <fmt/format.h>

namespace hotcold::gguf {

namespace {
template <class T>
void append(std::vector<uint8_t>& out, T v) {
  size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}
void append_string(std::vector<uint8_t>& out, std::string_view s) {
  append<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}
uint64_t align_up(uint64_t x, uint64_t a) { return x + (a - x % a) % a; }
}  // namespace

template <class T>
void writer::put(T v) { append(kv_bytes_, v); }
void writer::put_string(std::string_view s) { append_string(kv_bytes_, s); }

void writer::begin_key(std::string_view key, value_type type) {
  if (key.empty() || key.size() > max_key_length) throw std::invalid_argument(fmt::format("gguf writer: bad key length {}", key.size()));
  if (!keys_.emplace(key).second) throw std::invalid_argument(fmt::format("gguf writer: duplicate key {}", key));
  put_string(key);
  put<uint32_t>(static_cast<uint32_t>(type));
  ++n_kv_;
}

template <class T>
void writer::set_scalar(std::string_view key, value_type type, T v) {
  begin_key(key, type);
  put<T>(v);
}

void writer::set_u8(std::string_view k, uint8_t v) { set_scalar(k, value_type::u8, v); }
void writer::set_i8(std::string_view k, int8_t v) { set_scalar(k, value_type::i8, v); }
void writer::set_u16(std::string_view k, uint16_t v) { set_scalar(k, value_type::u16, v); }
void writer::set_i16(std::string_view k, int16_t v) { set_scalar(k, value_type::i16, v); }
void writer::set_u32(std::string_view k, uint32_t v) { set_scalar(k, value_type::u32, v); }
void writer::set_i32(std::string_view k, int32_t v) { set_scalar(k, value_type::i32, v); }
void writer::set_u64(std::string_view k, uint64_t v) { set_scalar(k, value_type::u64, v); }
void writer::set_i64(std::string_view k, int64_t v) { set_scalar(k, value_type::i64, v); }
void writer::set_f32(std::string_view k, float v) { set_scalar(k, value_type::f32, v); }
void writer::set_f64(std::string_view k, double v) { set_scalar(k, value_type::f64, v); }
void writer::set_bool(std::string_view k, bool v) { set_scalar<uint8_t>(k, value_type::boolean, v ? 1 : 0); }

void writer::set_string(std::string_view key, std::string_view v) {
  begin_key(key, value_type::string);
  put_string(v);
}

void writer::set_strings(std::string_view key, std::span<const std::string> v) {
  begin_key(key, value_type::array);
  put<uint32_t>(static_cast<uint32_t>(value_type::string));
  put<uint64_t>(v.size());
  for (const auto& s : v) put_string(s);
}

template <class T>
static void put_numeric_array(std::vector<uint8_t>& out, value_type elem, std::span<const T> v) {
  append<uint32_t>(out, static_cast<uint32_t>(elem));
  append<uint64_t>(out, v.size());
  const auto* p = reinterpret_cast<const uint8_t*>(v.data());
  out.insert(out.end(), p, p + v.size_bytes());
}

void writer::set_array(std::string_view key, std::span<const float> v) {
  begin_key(key, value_type::array);
  put_numeric_array(kv_bytes_, value_type::f32, v);
}
void writer::set_array(std::string_view key, std::span<const int32_t> v) {
  begin_key(key, value_type::array);
  put_numeric_array(kv_bytes_, value_type::i32, v);
}
void writer::set_array(std::string_view key, std::span<const uint32_t> v) {
  begin_key(key, value_type::array);
  put_numeric_array(kv_bytes_, value_type::u32, v);
}

void writer::put_value_body(const value& v) {
  switch (v.type()) {
    case value_type::string: put_string(v.as_string()); return;
    case value_type::array:
      put<uint32_t>(static_cast<uint32_t>(v.element_type()));
      put<uint64_t>(v.size());
      if (v.element_type() == value_type::string) {
        for (size_t i = 0; i < v.size(); ++i) put_string(v.string_at(i));
      } else if (v.element_type() == value_type::array) {
        for (size_t i = 0; i < v.size(); ++i) put_value_body(v.array_at(i));
      } else {
        auto raw = v.raw_elements();
        kv_bytes_.insert(kv_bytes_.end(), raw.begin(), raw.end());
      }
      return;
    case value_type::boolean: put<uint8_t>(v.as_bool() ? 1 : 0); return;
    case value_type::f32: put<float>(static_cast<float>(v.as_f64())); return;
    case value_type::f64: put<double>(v.as_f64()); return;
    case value_type::u8: put<uint8_t>(static_cast<uint8_t>(v.as_u64())); return;
    case value_type::u16: put<uint16_t>(static_cast<uint16_t>(v.as_u64())); return;
    case value_type::u32: put<uint32_t>(static_cast<uint32_t>(v.as_u64())); return;
    case value_type::u64: put<uint64_t>(v.as_u64()); return;
    case value_type::i8: put<int8_t>(static_cast<int8_t>(v.as_i64())); return;
    case value_type::i16: put<int16_t>(static_cast<int16_t>(v.as_i64())); return;
    case value_type::i32: put<int32_t>(static_cast<int32_t>(v.as_i64())); return;
    case value_type::i64: put<int64_t>(v.as_i64()); return;
  }
}

void writer::set_value(std::string_view key, const value& v) {
  begin_key(key, v.type());
  put_value_body(v);
}

void writer::set_alignment(uint32_t alignment) {
  if (alignment == 0 || !std::has_single_bit(alignment))
    throw std::invalid_argument(fmt::format("gguf writer: alignment {} is not a power of two", alignment));
  if (!tensors_.empty()) throw std::logic_error("gguf writer: set the alignment before adding tensors");
  set_u32("general.alignment", alignment);
  alignment_ = alignment;
}

void writer::set_encoded(std::string_view key, value_type type, std::span<const uint8_t> encoded_value) {
  begin_key(key, type);
  kv_bytes_.insert(kv_bytes_.end(), encoded_value.begin(), encoded_value.end());
}

std::vector<uint8_t> writer::encode_array(value_type elem, uint64_t count, std::span<const uint8_t> encoded_elements) {
  std::vector<uint8_t> out;
  out.reserve(12 + encoded_elements.size());
  append<uint32_t>(out, static_cast<uint32_t>(elem));
  append<uint64_t>(out, count);
  out.insert(out.end(), encoded_elements.begin(), encoded_elements.end());
  return out;
}

void writer::add_tensor(std::string_view name, tensor_type type, std::span<const int64_t> ne, std::span<const uint8_t> data) {
  if (name.empty() || name.size() > max_tensor_name) throw std::invalid_argument(fmt::format("gguf writer: bad tensor name '{}'", name));
  if (ne.size() > max_dims) throw std::invalid_argument(fmt::format("gguf writer: tensor {} has {} dims", name, ne.size()));
  for (const auto& t : tensors_)
    if (t.name == name) throw std::invalid_argument(fmt::format("gguf writer: duplicate tensor {}", name));
  const auto& tt = traits(type);
  uint64_t n = 1;
  for (int64_t d : ne) {
    if (d < 0) throw std::invalid_argument(fmt::format("gguf writer: tensor {} has a negative dimension", name));
    n *= static_cast<uint64_t>(d);
  }
  if (!ne.empty() && ne[0] % tt.block_size != 0)
    throw std::invalid_argument(fmt::format("gguf writer: tensor {} rows of {} are not a multiple of {}'s block {}", name, ne[0], tt.name, tt.block_size));
  uint64_t bytes = n / tt.block_size * tt.block_bytes;
  if (bytes != data.size())
    throw std::invalid_argument(fmt::format("gguf writer: tensor {} needs {} bytes, got {}", name, bytes, data.size()));
  data_size_ = align_up(data_size_, alignment_);
  tensors_.push_back({std::string(name), type, std::vector<int64_t>(ne.begin(), ne.end()), data, data_size_});
  data_size_ += bytes;
}

std::vector<uint8_t> writer::header_bytes() const {
  std::vector<uint8_t> out;
  out.reserve(24 + kv_bytes_.size() + tensors_.size() * (8 + max_tensor_name + 4 + 8 * max_dims + 4 + 8) + alignment_);
  out.resize(4);
  std::memcpy(out.data(), kind_ == file_kind::powerinfer ? "PWRI" : "GGUF", 4);
  append<uint32_t>(out, 3);
  append<uint64_t>(out, tensors_.size());
  append<uint64_t>(out, n_kv_);
  out.insert(out.end(), kv_bytes_.begin(), kv_bytes_.end());
  for (const auto& t : tensors_) {
    append_string(out, t.name);
    append<uint32_t>(out, static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) append<uint64_t>(out, static_cast<uint64_t>(d));
    append<uint32_t>(out, static_cast<uint32_t>(t.type));
    append<uint64_t>(out, t.offset);
  }
  if (!tensors_.empty()) out.resize(align_up(out.size(), alignment_), 0);
  return out;
}

std::vector<uint8_t> writer::to_bytes() const {
  std::vector<uint8_t> out = header_bytes();
  if (!tensors_.empty()) {
    size_t data_start = out.size();
    out.resize(data_start + align_up(data_size_, alignment_), 0);
    for (const auto& t : tensors_) std::memcpy(out.data() + data_start + t.offset, t.data.data(), t.data.size());
  }
  return out;
}

void writer::write(const std::string& path) const {
  std::string tmp = path + ".tmp";
  {
    std::ofstream os(tmp, std::ios::binary | std::ios::trunc);
    if (!os) throw std::system_error(errno, std::generic_category(), "cannot write " + tmp);
    std::vector<uint8_t> head = header_bytes();
    os.write(reinterpret_cast<const char*>(head.data()), static_cast<std::streamsize>(head.size()));
    // Tensor data is streamed from the caller's buffers, with zero padding between tensors.
    static const char zeros[4096] = {};
    auto pad_to = [&](uint64_t& written, uint64_t target) {
      while (written < target) {
        uint64_t n = std::min<uint64_t>(sizeof zeros, target - written);
        os.write(zeros, static_cast<std::streamsize>(n));
        written += n;
      }
    };
    uint64_t written = 0;
    for (const auto& t : tensors_) {
      pad_to(written, t.offset);
      os.write(reinterpret_cast<const char*>(t.data.data()), static_cast<std::streamsize>(t.data.size()));
      written += t.data.size();
    }
    if (!tensors_.empty()) pad_to(written, align_up(written, alignment_));
    os.flush();
    if (!os) throw std::system_error(errno, std::generic_category(), "cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw std::system_error(errno, std::generic_category(), "cannot write " + path + " (renaming " + tmp + ")");
}

}  // namespace hotcold::gguf
