#pragma once
// Copies of GGUF files with one thing changed, and the error a model file (or gen-model, given
// impossible options) must give: the model-error suites' shared tools.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "model/gguf.hpp"
#include "model/gguf_writer.hpp"
#include "model/model.hpp"
#include "tests/model/tiny_models.hpp"

namespace hotcold::test {

struct gguf_edit {
  std::function<bool(std::string_view key)> keep_key = [](std::string_view) { return true; };
  std::function<void(gguf::writer&)> add_keys = [](gguf::writer&) {};
  // Return false to drop the tensor; may change its name, type, shape or bytes.
  std::function<bool(std::string& name, tensor_type& type, std::vector<int64_t>& ne, std::vector<uint8_t>& bytes)> tensor =
      [](std::string&, tensor_type&, std::vector<int64_t>&, std::vector<uint8_t>&) { return true; };
  // Tensors to add after the file's own: name, type, shape, bytes.
  struct added {
    std::string name;
    tensor_type type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> bytes;
  };
  std::function<std::vector<added>(const gguf::file& base)> add_tensors = [](const gguf::file&) { return std::vector<added>{}; };
};

// A copy of the file at base_path with e applied, written to the scratch folder as NAME.gguf.
inline std::string edited_copy(const std::string& base_path, const std::string& name, const gguf_edit& e) {
  auto base = gguf::file::open(base_path);
  gguf::writer w;
  for (const auto& kv : base.metadata()) {
    if (!e.keep_key(kv.key)) continue;
    if (kv.key == "general.alignment") w.set_alignment(base.alignment());  // (the tensors' offsets follow it)
    else w.set_value(kv.key, kv.val);
  }
  e.add_keys(w);
  std::vector<gguf_edit::added> extra = e.add_tensors(base);
  std::vector<std::vector<uint8_t>> storage;
  storage.reserve(base.tensors().size());  // no reallocation: the writer keeps spans
  for (const auto& t : base.tensors()) {
    std::string n(t.name);
    tensor_type type = t.type;
    std::vector<int64_t> ne(t.ne.begin(), t.ne.begin() + t.n_dims);
    std::vector<uint8_t> bytes(t.data, t.data + t.n_bytes);
    if (!e.tensor(n, type, ne, bytes)) continue;
    storage.push_back(std::move(bytes));
    w.add_tensor(n, type, ne, storage.back());
  }
  for (const auto& a : extra) w.add_tensor(a.name, a.type, a.ne, a.bytes);
  auto path = (scratch_dir() / (name + ".gguf")).string();
  w.write(path);
  return path;
}

// Loading path fails with a model_error whose message holds text.
inline void expect_model_error(const std::string& path, const std::string& text) {
  try {
    model::load(path);
    ADD_FAILURE() << "loaded; expected: " << text;
  } catch (const model_error& err) {
    EXPECT_NE(std::string(err.what()).find(text), std::string::npos) << err.what();
  }
}

// gen-model refuses `bad` with a std::invalid_argument whose message holds text (and writes nothing).
inline void expect_gen_model_error(const tools::gen_model_options& bad, const std::string& text) {
  try {
    tools::generate_model(bad);
    ADD_FAILURE() << "wrote a file; expected: " << text;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

}  // namespace hotcold::test
