// Writes a small seed corpus of valid GGUF files for the reader fuzzer: every value type, nested
// arrays, tensors of several types and alignments, and both magics.
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "model/gguf_writer.hpp"

using namespace hotcold;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: gguf_seeds OUT_DIR\n");
    return 2;
  }
  std::string dir = argv[1];
  std::vector<uint8_t> data(4096);
  std::iota(data.begin(), data.end(), uint8_t{0});
  int n = 0;
  auto save = [&](const gguf::writer& w) { w.write(dir + "/seed" + std::to_string(n++) + ".gguf"); };

  {
    gguf::writer w;
    w.set_u8("a.u8", 1); w.set_i8("a.i8", -1); w.set_u16("a.u16", 2); w.set_i16("a.i16", -2);
    w.set_u32("a.u32", 3); w.set_i32("a.i32", -3); w.set_u64("a.u64", 4); w.set_i64("a.i64", -4);
    w.set_f32("a.f32", 0.5f); w.set_f64("a.f64", 0.25); w.set_bool("a.bool", true);
    w.set_string("general.name", "seed");
    std::vector<std::string> s{"<unk>", "<s>", "▁the", "Ġworld"};
    w.set_strings("tokenizer.ggml.tokens", s);
    std::vector<float> f{0.0f, -1.0f, -2.5f, 3.0f};
    w.set_array("tokenizer.ggml.scores", std::span<const float>(f));
    std::vector<int32_t> t{2, 3, 1, 1};
    w.set_array("tokenizer.ggml.token_type", std::span<const int32_t>(t));
    save(w);
  }
  {
    gguf::writer w;
    std::vector<uint32_t> inner{7, 8};
    auto a = gguf::writer::encode_array(gguf::value_type::u32, 2, {reinterpret_cast<const uint8_t*>(inner.data()), 8});
    std::vector<uint8_t> two(a);
    two.insert(two.end(), a.begin(), a.end());
    w.set_encoded("a.nested", gguf::value_type::array, gguf::writer::encode_array(gguf::value_type::array, 2, two));
    save(w);
  }
  for (auto [kind, align] : {std::pair{gguf::file_kind::gguf, 32u}, std::pair{gguf::file_kind::powerinfer, 64u}}) {
    gguf::writer w(kind);
    w.set_alignment(align);
    w.set_string("general.architecture", "llama");
    int64_t f32[] = {8, 2}, q8[] = {64}, q4[] = {32, 2}, q6[] = {256}, f16[] = {16};
    w.add_tensor("token_embd.weight", tensor_type::f32, f32, std::span<const uint8_t>(data).first(64));
    w.add_tensor("blk.0.ffn_up.weight", tensor_type::q8_0, q8, std::span<const uint8_t>(data).first(68));
    w.add_tensor("blk.0.fc1.weight", tensor_type::q4_0, q4, std::span<const uint8_t>(data).first(36));
    w.add_tensor("output.weight", tensor_type::q6_k, q6, std::span<const uint8_t>(data).first(210));
    w.add_tensor("blk.0.gpu_idx", tensor_type::f16, f16, std::span<const uint8_t>(data).first(32));
    save(w);
  }
  std::printf("wrote %d seeds to %s\n", n, dir.c_str());
  return 0;
}
