#include "model/gguf.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <system_error>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

namespace hotcold::gguf {

static_assert(std::endian::native == std::endian::little, "hotcold reads GGUF on little-endian hosts only");

std::string_view value_type_name(value_type t) {
  switch (t) {
    case value_type::u8: return "u8";
    case value_type::i8: return "i8";
    case value_type::u16: return "u16";
    case value_type::i16: return "i16";
    case value_type::u32: return "u32";
    case value_type::i32: return "i32";
    case value_type::f32: return "f32";
    case value_type::boolean: return "bool";
    case value_type::string: return "string";
    case value_type::array: return "array";
    case value_type::u64: return "u64";
    case value_type::i64: return "i64";
    case value_type::f64: return "f64";
  }
  return "?";
}

size_t scalar_size(value_type t) {
  switch (t) {
    case value_type::u8: case value_type::i8: case value_type::boolean: return 1;
    case value_type::u16: case value_type::i16: return 2;
    case value_type::u32: case value_type::i32: case value_type::f32: return 4;
    case value_type::u64: case value_type::i64: case value_type::f64: return 8;
    case value_type::string: case value_type::array: return 0;
  }
  return 0;
}

static bool known_value_type(uint32_t t) { return t <= static_cast<uint32_t>(value_type::f64); }

format_error::format_error(std::string source, std::string field, uint64_t offset, const std::string& problem)
    : std::runtime_error(fmt::format("{}: {} at byte {}: {}", source, field, offset, problem)),
      field_(std::move(field)),
      offset_(offset) {}

// ---- value accessors --------------------------------------------------------------------------

static bool is_signed_int(value_type t) {
  return t == value_type::i8 || t == value_type::i16 || t == value_type::i32 || t == value_type::i64;
}

static int64_t sign_extend(uint64_t bits, value_type t) {
  switch (t) {
    case value_type::i8: return static_cast<int8_t>(bits);
    case value_type::i16: return static_cast<int16_t>(bits);
    case value_type::i32: return static_cast<int32_t>(bits);
    default: return static_cast<int64_t>(bits);
  }
}

static uint64_t load_le(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  std::memcpy(&v, p, n);
  return v;
}

static double float_of(uint64_t bits, value_type t) {
  if (t == value_type::f32) {
    float f;
    uint32_t b = static_cast<uint32_t>(bits);
    std::memcpy(&f, &b, 4);
    return f;
  }
  double d;
  std::memcpy(&d, &bits, 8);
  return d;
}

bool value::is_integer() const {
  switch (type_) {
    case value_type::u8: case value_type::i8: case value_type::u16: case value_type::i16:
    case value_type::u32: case value_type::i32: case value_type::u64: case value_type::i64: return true;
    default: return false;
  }
}

uint64_t value::as_u64() const {
  if (!is_integer()) throw metadata_error(fmt::format("expected an integer, found {}", value_type_name(type_)));
  if (is_signed_int(type_) && sign_extend(bits_, type_) < 0)
    throw metadata_error(fmt::format("expected a non-negative integer, found {}", sign_extend(bits_, type_)));
  return bits_;
}

int64_t value::as_i64() const {
  if (!is_integer()) throw metadata_error(fmt::format("expected an integer, found {}", value_type_name(type_)));
  if (is_signed_int(type_)) return sign_extend(bits_, type_);
  if (bits_ > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    throw metadata_error(fmt::format("integer {} does not fit in int64", bits_));
  return static_cast<int64_t>(bits_);
}

double value::as_f64() const {
  if (is_float()) return float_of(bits_, type_);
  if (is_integer()) return is_signed_int(type_) ? static_cast<double>(sign_extend(bits_, type_)) : static_cast<double>(bits_);
  throw metadata_error(fmt::format("expected a number, found {}", value_type_name(type_)));
}

bool value::as_bool() const {
  if (type_ != value_type::boolean) throw metadata_error(fmt::format("expected bool, found {}", value_type_name(type_)));
  return bits_ != 0;
}

std::string_view value::as_string() const {
  if (type_ != value_type::string) throw metadata_error(fmt::format("expected string, found {}", value_type_name(type_)));
  return str_;
}

static void check_index(const value& v, size_t i) {
  if (!v.is_array()) throw metadata_error(fmt::format("expected an array, found {}", value_type_name(v.type())));
  if (i >= v.size()) throw metadata_error(fmt::format("array index {} out of range (size {})", i, v.size()));
}

std::string_view value::string_at(size_t i) const {
  check_index(*this, i);
  if (elem_ != value_type::string)
    throw metadata_error(fmt::format("expected an array of string, found array of {}", value_type_name(elem_)));
  return strings_[i];
}

int64_t value::int_at(size_t i) const {
  check_index(*this, i);
  value v;
  v.type_ = elem_;
  if (!v.is_integer())
    throw metadata_error(fmt::format("expected an array of integers, found array of {}", value_type_name(elem_)));
  size_t n = scalar_size(elem_);
  v.bits_ = load_le(raw_ + i * n, n);
  return v.as_i64();
}

double value::number_at(size_t i) const {
  check_index(*this, i);
  size_t n = scalar_size(elem_);
  if (n == 0 || elem_ == value_type::boolean)
    throw metadata_error(fmt::format("expected an array of numbers, found array of {}", value_type_name(elem_)));
  value v;
  v.type_ = elem_;
  v.bits_ = load_le(raw_ + i * n, n);
  return v.as_f64();
}

const value& value::array_at(size_t i) const {
  check_index(*this, i);
  if (elem_ != value_type::array)
    throw metadata_error(fmt::format("expected an array of arrays, found array of {}", value_type_name(elem_)));
  return items_[i];
}

static std::string quote(std::string_view s, size_t max_len = 80) {
  std::string out = "\"";
  size_t n = 0;
  for (unsigned char c : s) {
    if (n++ == max_len) { out += "…"; break; }
    if (c == '"' || c == '\\') { out += '\\'; out += static_cast<char>(c); }
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
    else out += static_cast<char>(c);
  }
  return out + "\"";
}

static std::string scalar_display(value_type t, uint64_t bits) {
  if (t == value_type::boolean) return bits ? "true" : "false";
  if (t == value_type::f32) return fmt::format("{}", static_cast<float>(float_of(bits, t)));
  if (t == value_type::f64) return fmt::format("{}", float_of(bits, t));
  if (is_signed_int(t)) return fmt::format("{}", sign_extend(bits, t));
  return fmt::format("{}", bits);
}

std::string value::to_display(size_t max_items) const {
  if (type_ == value_type::string) return quote(str_);
  if (type_ != value_type::array) return scalar_display(type_, bits_);
  std::string out = "[";
  size_t shown = std::min<uint64_t>(count_, max_items);
  for (size_t i = 0; i < shown; ++i) {
    if (i) out += ", ";
    if (elem_ == value_type::string) out += quote(strings_[i], 32);
    else if (elem_ == value_type::array) out += items_[i].to_display(max_items);
    else out += scalar_display(elem_, load_le(raw_ + i * scalar_size(elem_), scalar_size(elem_)));
  }
  if (count_ > shown) out += fmt::format(", … ({} in all)", count_);
  return out + "]";
}

// ---- parser -----------------------------------------------------------------------------------

class parser {
 public:
  parser(file& f) : f_(f), base_(f.bytes_.data()), size_(f.bytes_.size()) {}

  void run() {
    read_header();
    read_metadata();
    read_alignment();
    read_tensor_infos();
    place_tensor_data();
  }

 private:
  file& f_;
  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
  uint64_t n_tensors_ = 0;
  uint64_t n_kv_ = 0;

  [[noreturn]] void fail(const std::string& field, uint64_t at, const std::string& problem) const {
    throw format_error(f_.source_, field, at, problem);
  }
  uint64_t remaining() const { return size_ - pos_; }

  static constexpr uint64_t no_index = std::numeric_limits<uint64_t>::max();

  // Field names are only formatted when something is wrong: the happy path allocates nothing per read.
  static std::string name(std::string_view field, uint64_t index = no_index, std::string_view suffix = {}) {
    std::string n(field);
    if (index != no_index) n += fmt::format("[{}]", index);
    n += suffix;
    return n;
  }

  template <class T>
  T read(std::string_view field, std::string_view suffix = {}) {
    if (remaining() < sizeof(T))
      fail(name(field, no_index, suffix), pos_,
           fmt::format("file ends: {} bytes needed, {} left (file is {} bytes)", sizeof(T), remaining(), size_));
    T v;
    std::memcpy(&v, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string_view read_string(std::string_view field, uint64_t max_len, uint64_t index = no_index) {
    uint64_t at = pos_;
    if (remaining() < 8)
      fail(name(field, index, " length"), pos_, fmt::format("file ends: 8 bytes needed, {} left (file is {} bytes)", remaining(), size_));
    uint64_t len = load_le(base_ + pos_, 8);
    pos_ += 8;
    if (len > remaining())
      fail(name(field, index, " length"), at, fmt::format("string of {} bytes runs past the end of the file ({} bytes left)", len, remaining()));
    if (len > max_len) fail(name(field, index, " length"), at, fmt::format("length {} exceeds the limit of {}", len, max_len));
    std::string_view s(reinterpret_cast<const char*>(base_ + pos_), len);
    pos_ += len;
    return s;
  }

  void read_header() {
    if (size_ < 4) fail("header.magic", 0, fmt::format("file is {} bytes, too small to be GGUF", size_));
    std::string_view magic(reinterpret_cast<const char*>(base_), 4);
    if (magic == "GGUF") f_.kind_ = file_kind::gguf;
    else if (magic == "PWRI") f_.kind_ = file_kind::powerinfer;
    else
      fail("header.magic", 0, fmt::format("expected \"GGUF\" or \"PWRI\", found {} (bytes {:02x} {:02x} {:02x} {:02x})",
                                          quote(magic), base_[0], base_[1], base_[2], base_[3]));
    pos_ = 4;
    uint64_t at = pos_;
    uint32_t version = read<uint32_t>("header.version");
    if (version == 1) fail("header.version", at, "GGUF version 1 (32-bit counts) is no longer supported; convert the file to v3");
    if (version == 0 || version > 3) {
      if ((version & 0xffff) == 0 && __builtin_bswap32(version) >= 1 && __builtin_bswap32(version) <= 3)
        fail("header.version", at, fmt::format("version {} byte-swapped: a big-endian GGUF file, which this reader does not support", __builtin_bswap32(version)));
      fail("header.version", at, fmt::format("version {} is not supported (this reader knows versions 2 and 3)", version));
    }
    f_.version_ = version;

    at = pos_;
    n_tensors_ = read<uint64_t>("header.n_tensors");
    // The smallest tensor info: 8-byte name length, 1-byte name, n_dims, type, offset.
    constexpr uint64_t min_tensor_info = 8 + 1 + 4 + 4 + 8;
    if (n_tensors_ > size_ / min_tensor_info)
      fail("header.n_tensors", at, fmt::format("{} tensors cannot fit in a file of {} bytes", n_tensors_, size_));
    at = pos_;
    n_kv_ = read<uint64_t>("header.n_kv");
    // The smallest key-value pair: 8-byte key length, 1-byte key, 4-byte type, 1-byte value.
    constexpr uint64_t min_kv = 8 + 1 + 4 + 1;
    if (n_kv_ > remaining() / min_kv)
      fail("header.n_kv", at, fmt::format("{} key-value pairs cannot fit in the {} bytes left", n_kv_, remaining()));
  }

  void read_value(value& v, value_type t, const std::string& field, int depth) {
    v.type_ = t;
    uint64_t at = pos_;
    switch (t) {
      case value_type::string:
        v.str_ = read_string(field, std::numeric_limits<uint64_t>::max());
        return;
      case value_type::array: {
        if (depth >= max_array_depth) fail(field, at, fmt::format("arrays nested deeper than {} levels", max_array_depth));
        uint32_t et = read<uint32_t>(field, " element type");
        if (!known_value_type(et)) fail(field + " element type", at, fmt::format("unknown value type {}", et));
        v.elem_ = static_cast<value_type>(et);
        uint64_t count_at = pos_;
        v.count_ = read<uint64_t>(field, " count");
        uint64_t min_elem = v.elem_ == value_type::string ? 8 : v.elem_ == value_type::array ? 12 : scalar_size(v.elem_);
        if (v.count_ > remaining() / min_elem)
          fail(field + " count", count_at,
               fmt::format("{} elements of {} cannot fit in the {} bytes left", v.count_, value_type_name(v.elem_), remaining()));
        if (v.elem_ == value_type::string) {
          v.strings_.reserve(v.count_);
          for (uint64_t i = 0; i < v.count_; ++i) v.strings_.push_back(read_string(field, remaining(), i));
        } else if (v.elem_ == value_type::array) {
          v.items_.resize(v.count_);
          for (uint64_t i = 0; i < v.count_; ++i) read_value(v.items_[i], value_type::array, fmt::format("{}[{}]", field, i), depth + 1);
        } else {
          v.raw_ = base_ + pos_;
          pos_ += v.count_ * min_elem;
          if (v.elem_ == value_type::boolean)
            for (uint64_t i = 0; i < v.count_; ++i)
              if (v.raw_[i] > 1) fail(fmt::format("{}[{}]", field, i), at, fmt::format("bool value {} is neither 0 nor 1", v.raw_[i]));
        }
        return;
      }
      default: {
        size_t n = scalar_size(t);
        if (remaining() < n) fail(field, at, fmt::format("file ends: {} value needs {} bytes, {} left", value_type_name(t), n, remaining()));
        v.bits_ = load_le(base_ + pos_, n);
        pos_ += n;
        if (t == value_type::boolean && v.bits_ > 1) fail(field, at, fmt::format("bool value {} is neither 0 nor 1", v.bits_));
        return;
      }
    }
  }

  void read_metadata() {
    f_.kv_.reserve(n_kv_);
    std::unordered_map<std::string_view, uint64_t> seen;
    seen.reserve(n_kv_);
    for (uint64_t i = 0; i < n_kv_; ++i) {
      uint64_t at = pos_;
      std::string field = fmt::format("kv[{}].key", i);
      std::string_view key = read_string(field, max_key_length);
      if (key.empty()) fail(field, at, "empty key");
      if (auto it = seen.find(key); it != seen.end())
        fail(field, at, fmt::format("duplicate key {} (first at byte {})", quote(key), it->second));
      seen.emplace(key, at);
      std::string vfield = fmt::format("kv[{}] {} value", i, quote(key));
      uint64_t type_at = pos_;
      uint32_t t = read<uint32_t>(vfield, " type");
      if (!known_value_type(t)) fail(vfield + " type", type_at, fmt::format("unknown value type {}", t));
      key_value kv{key, {}, at};
      read_value(kv.val, static_cast<value_type>(t), vfield, 0);
      f_.kv_.push_back(std::move(kv));
    }
  }

  void read_alignment() {
    for (const auto& kv : f_.kv_) {
      if (kv.key != "general.alignment") continue;
      if (kv.val.type() != value_type::u32)
        fail("general.alignment", kv.offset, fmt::format("must be u32, found {}", value_type_name(kv.val.type())));
      uint64_t a = kv.val.as_u64();
      if (a == 0 || !std::has_single_bit(a))
        fail("general.alignment", kv.offset, fmt::format("alignment {} is not a power of two", a));
      f_.alignment_ = static_cast<uint32_t>(a);
    }
  }

  void read_tensor_infos() {
    f_.tensors_.reserve(n_tensors_);
    std::unordered_set<std::string_view> names;
    names.reserve(n_tensors_);
    for (uint64_t i = 0; i < n_tensors_; ++i) {
      tensor_info ti{};
      ti.info_offset = pos_;
      std::string field = fmt::format("tensor[{}]", i);
      uint64_t at = pos_;
      ti.name = read_string(field + ".name", std::numeric_limits<uint64_t>::max());
      if (ti.name.empty()) fail(field + ".name", at, "empty tensor name");
      if (ti.name.size() > max_tensor_name)
        fail(field + ".name", at, fmt::format("name of {} bytes exceeds ggml's limit of {}", ti.name.size(), max_tensor_name));
      if (!names.insert(ti.name).second) fail(field + ".name", at, fmt::format("duplicate tensor name {}", quote(ti.name)));
      field = fmt::format("tensor[{}] {}", i, quote(ti.name));

      at = pos_;
      ti.n_dims = read<uint32_t>(field, " n_dims");
      if (ti.n_dims > max_dims) fail(field + " n_dims", at, fmt::format("{} dimensions, at most {} allowed", ti.n_dims, max_dims));
      ti.ne.fill(1);
      uint64_t n_el = 1;
      for (uint32_t d = 0; d < ti.n_dims; ++d) {
        at = pos_;
        auto dim = static_cast<int64_t>(read<uint64_t>(field, fmt::format(" ne[{}]", d)));
        if (dim < 0) fail(fmt::format("{} ne[{}]", field, d), at, fmt::format("negative dimension {}", dim));
        if (dim != 0 && n_el > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / static_cast<uint64_t>(dim))
          fail(fmt::format("{} ne[{}]", field, d), at, "the shape's element count overflows int64");
        n_el *= static_cast<uint64_t>(dim);
        ti.ne[d] = dim;
      }
      ti.n_elements = n_el;

      at = pos_;
      uint32_t type_id = read<uint32_t>(field, " type");
      auto tt = tensor_type_info(type_id);
      if (!tt) fail(field + " type", at, fmt::format("unknown tensor type {}", type_id));
      ti.type = static_cast<tensor_type>(type_id);
      if (ti.ne[0] % tt->block_size != 0)
        fail(field + " ne[0]", at, fmt::format("row of {} elements is not a multiple of the {} block size {}", ti.ne[0], tt->name, tt->block_size));
      uint64_t blocks = n_el / tt->block_size;
      if (blocks > std::numeric_limits<uint64_t>::max() / tt->block_bytes)
        fail(field + " type", at, "the tensor's byte size overflows 64 bits");
      ti.n_bytes = blocks * tt->block_bytes;

      at = pos_;
      ti.offset = read<uint64_t>(field, " offset");
      if (ti.offset % f_.alignment_ != 0)
        fail(field + " offset", at, fmt::format("offset {} is not a multiple of the alignment {}", ti.offset, f_.alignment_));
      f_.tensors_.push_back(ti);
    }
  }

  void place_tensor_data() {
    uint64_t a = f_.alignment_;
    uint64_t data = pos_ + (a - pos_ % a) % a;
    if (f_.tensors_.empty()) {  // vocab-only files may end right after the infos, unpadded
      f_.data_offset_ = std::min(data, size_);
      return;
    }
    if (data > size_) fail("data section", pos_, fmt::format("the aligned data section starts at byte {}, past the end of the file ({} bytes)", data, size_));
    f_.data_offset_ = data;
    uint64_t data_size = size_ - data;
    for (auto& ti : f_.tensors_) {
      std::string field = fmt::format("tensor {} offset", quote(ti.name));
      if (ti.offset > data_size || ti.n_bytes > data_size - ti.offset)
        fail(field, ti.info_offset,
             fmt::format("data [{}, {}) of the data section runs past the end of the file: truncated "
                         "(data section has {} bytes, from byte {})",
                         ti.offset, ti.offset + static_cast<unsigned __int128>(ti.n_bytes) > std::numeric_limits<uint64_t>::max()
                                        ? std::numeric_limits<uint64_t>::max() : ti.offset + ti.n_bytes,
                         data_size, data));
      ti.data = base_ + data + ti.offset;
    }
    std::vector<const tensor_info*> order;
    order.reserve(f_.tensors_.size());
    for (const auto& ti : f_.tensors_) order.push_back(&ti);
    std::sort(order.begin(), order.end(), [](auto* x, auto* y) { return x->offset < y->offset; });
    for (size_t i = 1; i < order.size(); ++i) {
      const auto* prev = order[i - 1];
      const auto* cur = order[i];
      if (prev->offset + prev->n_bytes > cur->offset)
        fail(fmt::format("tensor {} offset", quote(cur->name)), cur->info_offset,
             fmt::format("data [{}, {}) overlaps tensor {} at [{}, {})", cur->offset, cur->offset + cur->n_bytes,
                         quote(prev->name), prev->offset, prev->offset + prev->n_bytes));
    }
  }
};

// ---- file -------------------------------------------------------------------------------------

file file::parse(std::span<const uint8_t> bytes, std::string source_name) {
  file f;
  f.bytes_ = bytes;
  f.source_ = std::move(source_name);
  parser(f).run();
  return f;
}

namespace {
struct mapping {
  void* addr = nullptr;
  size_t len = 0;
  ~mapping() {
    if (addr && len) munmap(addr, len);
  }
};
}  // namespace

file file::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), path);
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    throw std::system_error(e, std::generic_category(), path);
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw std::system_error(EISDIR, std::generic_category(), path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw std::runtime_error(path + ": not a regular file");
  }
  auto m = std::make_shared<mapping>();
  m->len = static_cast<size_t>(st.st_size);
  if (m->len > 0) {
    void* addr = mmap(nullptr, m->len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (addr == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      throw std::system_error(e, std::generic_category(), path + ": mmap");
    }
    m->addr = addr;
  }
  ::close(fd);
  std::span<const uint8_t> bytes(static_cast<const uint8_t*>(m->addr), m->len);
  file f = parse(bytes, path);
  f.mapping_ = std::move(m);
  return f;
}

const value* file::find(std::string_view key) const {
  for (const auto& kv : kv_)
    if (kv.key == key) return &kv.val;
  return nullptr;
}

template <class F>
static auto typed(const file& f, std::string_view key, F&& get) -> std::optional<decltype(get(std::declval<const value&>()))> {
  const value* v = f.find(key);
  if (!v) return std::nullopt;
  try {
    return get(*v);
  } catch (const metadata_error& e) {
    throw metadata_error(fmt::format("{}: metadata key {}: {}", f.source(), key, e.what()));
  }
}

std::optional<std::string_view> file::get_string(std::string_view key) const {
  return typed(*this, key, [](const value& v) { return v.as_string(); });
}
std::optional<int64_t> file::get_int(std::string_view key) const {
  return typed(*this, key, [](const value& v) { return v.as_i64(); });
}
std::optional<double> file::get_float(std::string_view key) const {
  return typed(*this, key, [](const value& v) { return v.as_f64(); });
}
std::optional<bool> file::get_bool(std::string_view key) const {
  return typed(*this, key, [](const value& v) { return v.as_bool(); });
}

const value* file::get_array(std::string_view key, std::optional<value_type> elem) const {
  const value* v = find(key);
  if (!v) return nullptr;
  if (!v->is_array())
    throw metadata_error(fmt::format("{}: metadata key {}: expected an array, found {}", source_, key, value_type_name(v->type())));
  if (elem && v->element_type() != *elem)
    throw metadata_error(fmt::format("{}: metadata key {}: expected an array of {}, found an array of {}", source_, key,
                                     value_type_name(*elem), value_type_name(v->element_type())));
  return v;
}

const tensor_info* file::find_tensor(std::string_view name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

}  // namespace hotcold::gguf
