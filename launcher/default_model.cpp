#include "launcher/default_model.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>

#ifdef HOTCOLD_HAVE_DEFAULT_VOCAB
extern "C" const char hotcold_default_vocab[];
extern "C" const char hotcold_default_vocab_end[];
#endif

namespace hotcold::launcher {

namespace fs = std::filesystem;

std::string cache_dir() {
  if (const char* c = std::getenv("HOTCOLD_CACHE"); c && *c) return c;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return (fs::path(x) / "hotcold").string();
  if (const char* h = std::getenv("HOME"); h && *h) return (fs::path(h) / ".cache" / "hotcold").string();
  return (fs::temp_directory_path() / "hotcold").string();
}

tools::gen_model_options default_model_options() {
  tools::gen_model_options o;
  o.arch = architecture::llama;
  o.act = activation::relu;
  o.n_embd = 256;
  o.n_layer = 4;
  o.n_ff = 1024;
  o.n_head = 8;
  o.n_head_kv = 4;
  o.n_ctx = 2048;
  o.active = 0.1;
  o.type = tensor_type::f16;
  o.seed = 1;
  return o;
}

std::string default_model_path() { return (fs::path(cache_dir()) / "default-llama-relu-f16.gguf").string(); }

std::string ensure_default_model() {
  std::string path = default_model_path();
  if (fs::exists(path)) return path;
#ifdef HOTCOLD_HAVE_DEFAULT_VOCAB
  fs::create_directories(cache_dir());
  std::string vocab_path = (fs::path(cache_dir()) / "vocab-llama-spm.gguf").string();
  {
    std::ofstream v(vocab_path + ".tmp", std::ios::binary);
    v.write(hotcold_default_vocab, hotcold_default_vocab_end - hotcold_default_vocab);
    if (!v) throw std::runtime_error("cannot write " + vocab_path);
  }
  fs::rename(vocab_path + ".tmp", vocab_path);
  auto o = default_model_options();
  o.vocab_path = vocab_path;
  o.out_path = path;
  fmt::print(stderr, "hotcold: no model given; making the default model {} (llama, ReLU, {} layers, embd {}, ffn {})\n", path,
             o.n_layer, o.n_embd, o.n_ff);
  tools::generate_model(o);
  return path;
#else
  throw std::runtime_error("no model given (-m) and this build has no embedded default vocabulary");
#endif
}

}  // namespace hotcold::launcher
