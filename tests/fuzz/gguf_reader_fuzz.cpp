// libFuzzer target for the GGUF reader: any bytes either parse or raise gguf::format_error, and
// everything a successful parse hands out (values, arrays, tensor data) is inside the input.
#include <cstddef>
#include <cstdint>

#include "model/gguf.hpp"

namespace {

volatile uint64_t sink;

void walk(const hotcold::gguf::value& v) {
  using hotcold::gguf::value_type;
  if (v.type() == value_type::string) {
    auto s = v.as_string();
    if (!s.empty()) sink = sink + static_cast<unsigned char>(s.back());
    return;
  }
  if (v.type() == value_type::boolean) {
    sink = sink + v.as_bool();
    return;
  }
  if (!v.is_array()) {
    sink = sink + static_cast<uint64_t>(v.as_f64() != 0);
    return;
  }
  if (v.element_type() == value_type::string) {
    for (size_t i = 0; i < v.size(); ++i) {
      auto s = v.string_at(i);
      if (!s.empty()) sink = sink + static_cast<unsigned char>(s.front()) + static_cast<unsigned char>(s.back());
    }
  } else if (v.element_type() == value_type::array) {
    for (size_t i = 0; i < v.size(); ++i) walk(v.array_at(i));
  } else {
    auto raw = v.raw_elements();
    if (!raw.empty()) sink = sink + raw.front() + raw.back();
    if (v.size() > 0 && v.element_type() != value_type::boolean) sink = sink + static_cast<uint64_t>(v.number_at(v.size() - 1) != 0);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto f = hotcold::gguf::file::parse({data, size}, "fuzz");
    for (const auto& kv : f.metadata()) {
      walk(kv.val);
      sink = sink + kv.val.to_display(4).size() + kv.key.size();
    }
    for (const auto& t : f.tensors()) {
      if (t.n_bytes > 0) sink = sink + t.data[0] + t.data[t.n_bytes - 1];
      sink = sink + t.name.size();
    }
    (void)f.find("general.alignment");
    (void)f.find_tensor("x");
  } catch (const hotcold::gguf::format_error&) {
  }
  return 0;
}
