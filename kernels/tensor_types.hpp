#pragma once
// The tensor element types GGUF files can hold (ggml's numbering), with their block layout.
// Compute support arrives type by type in later work; knowing every type now keeps `inspect` honest
// and lets the reader check that each tensor's byte size matches its shape.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace hotcold {

enum class tensor_type : uint32_t {
  f32 = 0, f16 = 1, q4_0 = 2, q4_1 = 3,
  // 4 and 5 were Q4_2 / Q4_3, removed from ggml long ago.
  q5_0 = 6, q5_1 = 7, q8_0 = 8, q8_1 = 9,
  q2_k = 10, q3_k = 11, q4_k = 12, q5_k = 13, q6_k = 14, q8_k = 15,
  iq2_xxs = 16, iq2_xs = 17, iq3_xxs = 18, iq1_s = 19, iq4_nl = 20, iq3_s = 21, iq2_s = 22, iq4_xs = 23,
  i8 = 24, i16 = 25, i32 = 26, i64 = 27, f64 = 28, iq1_m = 29, bf16 = 30,
  // 31..33 were Q4_0_4_4 / Q4_0_4_8 / Q4_0_8_8 (repacked layouts, removed).
  tq1_0 = 34, tq2_0 = 35,
  // 36..38 were IQ4_NL_4_4 / _4_8 / _8_8 (removed).
  mxfp4 = 39,
};

struct tensor_type_traits {
  std::string_view name;   // as ggml prints it: "F32", "Q4_0", "Q6_K", ...
  uint32_t block_size;     // elements per block (1 for plain types)
  uint32_t block_bytes;    // bytes per block
  bool quantized;
};

// Traits of a type id read from a file, or nullopt when the id is not a known type.
std::optional<tensor_type_traits> tensor_type_info(uint32_t type_id);
// Same for a known enum value (always succeeds).
const tensor_type_traits& traits(tensor_type t);
std::string_view tensor_type_name(tensor_type t);
// The K-quants hotcold computes with (Q4_K, Q5_K, Q6_K): their rows meet activations quantized to Q8_K.
inline bool computes_as_k_quant(tensor_type t) { return t == tensor_type::q4_k || t == tensor_type::q5_k || t == tensor_type::q6_k; }
// Parses "f16", "Q4_0", "q6_k" (case-insensitive) into a type.
std::optional<tensor_type> tensor_type_from_name(std::string_view name);

// The KV cache's types, keys' apart from values' (llama.cpp's --cache-type-k and --cache-type-v):
// f32, f16 (the default) or q8_0 and q4_0 (blocks of 32 along a position's row).
struct kv_types {
  kv_types() = default;
  kv_types(tensor_type both) : k(both), v(both) {}  // NOLINT: one type for both, as --kv-type says
  kv_types(tensor_type keys, tensor_type values) : k(keys), v(values) {}
  tensor_type k = tensor_type::f16, v = tensor_type::f16;
  bool operator==(const kv_types& o) const { return k == o.k && v == o.v; }
  bool operator!=(const kv_types& o) const { return !(*this == o); }
  bool quantized() const { return traits(k).quantized || traits(v).quantized; }
  // One f16 or f32 type for both: what the row kernels and a GPU's attention read as they are.
  bool plain() const { return k == v && (k == tensor_type::f16 || k == tensor_type::f32); }
};
inline bool is_kv_cache_type(tensor_type t) { return t == tensor_type::f32 || t == tensor_type::f16 || t == tensor_type::q8_0 || t == tensor_type::q4_0; }
// Bytes of n values of type t (n a multiple of its block size).
inline uint64_t values_bytes(tensor_type t, int64_t n) { return static_cast<uint64_t>(n) / traits(t).block_size * traits(t).block_bytes; }
// "f16", or "K q8_0, V f16" where they differ (lower case, as the flags take them).
std::string kv_types_name(kv_types t);
std::string lower_type_name(tensor_type t);  // "q8_0"

}  // namespace hotcold
