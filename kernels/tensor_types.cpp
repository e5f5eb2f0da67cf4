#include "kernels/tensor_types.hpp"

#include <array>
#include <cctype>
#include <stdexcept>

namespace hotcold {
namespace {

// Block sizes and bytes per block as GGUF defines them (ggml-common.h block structs).
// QK_K = 256 for the K-quants and most IQ types; the legacy quants use blocks of 32.
constexpr std::array<std::optional<tensor_type_traits>, 40> table = [] {
  std::array<std::optional<tensor_type_traits>, 40> t{};
  t[0] = tensor_type_traits{"F32", 1, 4, false};
  t[1] = tensor_type_traits{"F16", 1, 2, false};
  t[2] = tensor_type_traits{"Q4_0", 32, 18, true};     // f16 d + 16 nibble bytes
  t[3] = tensor_type_traits{"Q4_1", 32, 20, true};     // f16 d, m + 16
  t[6] = tensor_type_traits{"Q5_0", 32, 22, true};     // f16 d + 4 high bits + 16
  t[7] = tensor_type_traits{"Q5_1", 32, 24, true};     // f16 d, m + 4 + 16
  t[8] = tensor_type_traits{"Q8_0", 32, 34, true};     // f16 d + 32 int8
  t[9] = tensor_type_traits{"Q8_1", 32, 36, true};     // f16 d, s + 32 int8
  t[10] = tensor_type_traits{"Q2_K", 256, 84, true};   // scales 16 + qs 64 + d, dmin
  t[11] = tensor_type_traits{"Q3_K", 256, 110, true};  // hmask 32 + qs 64 + scales 12 + d
  t[12] = tensor_type_traits{"Q4_K", 256, 144, true};  // d, dmin + scales 12 + qs 128
  t[13] = tensor_type_traits{"Q5_K", 256, 176, true};  // d, dmin + scales 12 + qh 32 + qs 128
  t[14] = tensor_type_traits{"Q6_K", 256, 210, true};  // ql 128 + qh 64 + scales 16 + d
  t[15] = tensor_type_traits{"Q8_K", 256, 292, true};  // f32 d + qs 256 + bsums 16 x i16
  t[16] = tensor_type_traits{"IQ2_XXS", 256, 66, true};
  t[17] = tensor_type_traits{"IQ2_XS", 256, 74, true};
  t[18] = tensor_type_traits{"IQ3_XXS", 256, 98, true};
  t[19] = tensor_type_traits{"IQ1_S", 256, 50, true};
  t[20] = tensor_type_traits{"IQ4_NL", 32, 18, true};
  t[21] = tensor_type_traits{"IQ3_S", 256, 110, true};
  t[22] = tensor_type_traits{"IQ2_S", 256, 82, true};
  t[23] = tensor_type_traits{"IQ4_XS", 256, 136, true};
  t[24] = tensor_type_traits{"I8", 1, 1, false};
  t[25] = tensor_type_traits{"I16", 1, 2, false};
  t[26] = tensor_type_traits{"I32", 1, 4, false};
  t[27] = tensor_type_traits{"I64", 1, 8, false};
  t[28] = tensor_type_traits{"F64", 1, 8, false};
  t[29] = tensor_type_traits{"IQ1_M", 256, 56, true};
  t[30] = tensor_type_traits{"BF16", 1, 2, false};
  t[34] = tensor_type_traits{"TQ1_0", 256, 54, true};
  t[35] = tensor_type_traits{"TQ2_0", 256, 66, true};
  t[39] = tensor_type_traits{"MXFP4", 32, 17, true};
  return t;
}();

}  // namespace

std::optional<tensor_type_traits> tensor_type_info(uint32_t type_id) {
  if (type_id >= table.size()) return std::nullopt;
  return table[type_id];
}

const tensor_type_traits& traits(tensor_type t) {
  const auto& entry = table.at(static_cast<uint32_t>(t));
  if (!entry) throw std::logic_error("traits(): tensor_type value without traits");
  return *entry;
}

std::string_view tensor_type_name(tensor_type t) { return traits(t).name; }

std::optional<tensor_type> tensor_type_from_name(std::string_view name) {
  for (uint32_t id = 0; id < table.size(); ++id) {
    if (!table[id] || table[id]->name.size() != name.size()) continue;
    bool same = true;
    for (size_t i = 0; i < name.size() && same; ++i)
      same = std::toupper(static_cast<unsigned char>(name[i])) == table[id]->name[i];
    if (same) return static_cast<tensor_type>(id);
  }
  return std::nullopt;
}

std::string lower_type_name(tensor_type t) {
  std::string n(tensor_type_name(t));
  for (char& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return n;
}

std::string kv_types_name(kv_types t) {
  return t.k == t.v ? lower_type_name(t.k) : "K " + lower_type_name(t.k) + ", V " + lower_type_name(t.v);
}

}  // namespace hotcold
