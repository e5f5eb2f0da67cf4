// hotcold inspect -m FILE [--json]: metadata (long arrays summarized), tensor table, totals.
#include <algorithm>
#include <cstdio>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "launcher/cmd_inspect.hpp"
#include "launcher/commands.hpp"
#include "model/gguf.hpp"

namespace hotcold::launcher {
namespace {

constexpr size_t shown_items = 8;  // array elements shown before "… (N in all)"

std::string shape_string(const gguf::tensor_info& t) {
  std::string s = "[";
  for (uint32_t d = 0; d < t.n_dims; ++d) s += (d ? ", " : "") + std::to_string(t.ne[d]);
  return s + "]";
}

std::string human_bytes(uint64_t b) {
  if (b >= (1ull << 30)) return fmt::format("{:.2f} GiB", b / double(1ull << 30));
  if (b >= (1ull << 20)) return fmt::format("{:.2f} MiB", b / double(1ull << 20));
  if (b >= (1ull << 10)) return fmt::format("{:.2f} KiB", b / double(1ull << 10));
  return fmt::format("{} B", b);
}

nlohmann::json scalar_json(const gguf::value& v) {
  using gguf::value_type;
  switch (v.type()) {
    case value_type::string: return std::string(v.as_string());
    case value_type::boolean: return v.as_bool();
    case value_type::f32: case value_type::f64: return v.as_f64();
    case value_type::i8: case value_type::i16: case value_type::i32: case value_type::i64: return v.as_i64();
    default: return v.as_u64();
  }
}

// Arrays: type, count and the first elements; nested arrays recurse.
nlohmann::json value_json(const gguf::value& v) {
  using gguf::value_type;
  if (!v.is_array()) return {{"type", gguf::value_type_name(v.type())}, {"value", scalar_json(v)}};
  nlohmann::json head = nlohmann::json::array();
  size_t n = std::min<uint64_t>(v.size(), shown_items);
  for (size_t i = 0; i < n; ++i) {
    switch (v.element_type()) {
      case value_type::string: head.push_back(std::string(v.string_at(i))); break;
      case value_type::array: head.push_back(value_json(v.array_at(i))); break;
      case value_type::boolean: head.push_back(v.raw_elements()[i] != 0); break;
      case value_type::f32: case value_type::f64: head.push_back(v.number_at(i)); break;
      default: head.push_back(v.int_at(i)); break;
    }
  }
  return {{"type", "array"}, {"element_type", gguf::value_type_name(v.element_type())}, {"count", v.size()},
          {"head", head}, {"truncated", v.size() > n}};
}

}  // namespace

void run_inspect(const std::string& path, bool json) {
  auto f = gguf::file::open(path);
  uint64_t total_bytes = 0, total_elements = 0;
  for (const auto& t : f.tensors()) {
    total_bytes += t.n_bytes;
    total_elements += t.n_elements;
  }
  const char* magic = f.kind() == gguf::file_kind::powerinfer ? "PWRI" : "GGUF";

  if (json) {
    nlohmann::json j;
    j["file"] = path;
    j["magic"] = magic;
    j["version"] = f.version();
    j["size"] = f.size();
    j["alignment"] = f.alignment();
    j["data_offset"] = f.data_offset();
    nlohmann::json meta = nlohmann::json::object();
    for (const auto& kv : f.metadata()) meta[std::string(kv.key)] = value_json(kv.val);
    j["metadata"] = meta;
    nlohmann::json tensors = nlohmann::json::array();
    for (const auto& t : f.tensors()) {
      nlohmann::json shape = nlohmann::json::array();
      for (uint32_t d = 0; d < t.n_dims; ++d) shape.push_back(t.ne[d]);
      tensors.push_back({{"name", std::string(t.name)}, {"type", tensor_type_name(t.type)}, {"shape", shape},
                         {"offset", t.offset}, {"bytes", t.n_bytes}});
    }
    j["tensors"] = tensors;
    j["totals"] = {{"tensors", f.tensors().size()}, {"elements", total_elements}, {"bytes", total_bytes}};
    fmt::print("{}\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
    return;
  }

  fmt::print("file:      {}\n", path);
  fmt::print("format:    {} v{}{}\n", magic, f.version(), f.kind() == gguf::file_kind::powerinfer ? " (PowerInfer)" : "");
  fmt::print("size:      {} bytes ({}), alignment {}, data section at byte {}\n", f.size(), human_bytes(f.size()),
             f.alignment(), f.data_offset());
  size_t key_width = 3;
  for (const auto& kv : f.metadata()) key_width = std::max(key_width, kv.key.size());
  fmt::print("\nmetadata: {} keys\n", f.metadata().size());
  for (const auto& kv : f.metadata()) {
    std::string type(gguf::value_type_name(kv.val.type()));
    if (kv.val.is_array()) type = fmt::format("{}[{}]", gguf::value_type_name(kv.val.element_type()), kv.val.size());
    fmt::print("  {:<{}}  {:<14} {}\n", kv.key, key_width, type, kv.val.to_display(shown_items));
  }
  fmt::print("\ntensors: {}\n", f.tensors().size());
  if (!f.tensors().empty()) {
    size_t name_width = 4;
    for (const auto& t : f.tensors()) name_width = std::max(name_width, t.name.size());
    fmt::print("  {:<{}}  {:<7} {:<24} {:>14} {:>14}\n", "name", name_width, "type", "shape", "offset", "bytes");
    for (const auto& t : f.tensors())
      fmt::print("  {:<{}}  {:<7} {:<24} {:>14} {:>14}\n", t.name, name_width, tensor_type_name(t.type), shape_string(t),
                 t.offset, t.n_bytes);
  }
  fmt::print("\ntotal: {} tensors, {} elements, {} bytes of tensor data ({})\n", f.tensors().size(), total_elements,
             total_bytes, human_bytes(total_bytes));
}

}  // namespace hotcold::launcher
