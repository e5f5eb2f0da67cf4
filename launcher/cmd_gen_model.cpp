// hotcold gen-model --arch NAME (model/arch.cpp's table) --act relu|silu|drelu --embd N --layers N --ffn N
//   --heads N --kv-heads N --active F --vocab VOCAB.gguf --type f32|f16|bf16|q8_0|q4_0|q4_k|q5_k|q6_k|q4_k_m|q5_k_m --seed S [--norm-spread S] [--rope-base B] [--llama3-rope CTX]
//   [--head-dim N] [--tied-output] [--output-bias] [--phi3-rope ORIG_CTX]
//   [--experts N --experts-used K [--shared-ffn N] [--expert-locality L] [--expert-skew S]] -o OUT.gguf
#include <chrono>
#include <cstdio>

#include <fmt/format.h>

#include "launcher/cmd_gen_model.hpp"
#include "launcher/progress.hpp"
#include "tools/gen_model.hpp"

namespace hotcold::launcher {

void run_gen_model(const gen_model_args& a) {
  auto o = a.o;
  o.arch = *architecture_from_name(a.arch);
  o.act = *activation_from_name(a.act);
  o.k_mix = a.type.ends_with("_m");
  o.type = *tensor_type_from_name(o.k_mix ? a.type.substr(0, a.type.size() - 2) : a.type);
  auto t0 = std::chrono::steady_clock::now();
  progress_bar bar("gen-model");
  auto report = tools::generate_model(o, [&](int64_t done, int64_t total) { bar.update(done, total); });
  bar.finish();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print(stderr, "hotcold gen-model: wrote {} ({:.1f} MiB, vocab {}) in {:.1f} s\n", o.out_path,
             report.file_bytes / double(1 << 20), report.n_vocab, secs);
  for (size_t l = 0; l < report.layers.size(); ++l)
    fmt::print(stderr, "  layer {:2}: designed active {:.3f}, power-law alpha {:.2f}, top-20% neurons take {:.0f}% of firings\n", l,
               report.layers[l].mean, report.layers[l].alpha, 100 * report.layers[l].top20_share);
}

}  // namespace hotcold::launcher
