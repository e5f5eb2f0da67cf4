#pragma once
// hotcold gen-model: a synthetic GGUF model (tools/gen_model.hpp).
#include <string>

#include "tools/gen_model.hpp"

namespace hotcold::launcher {

struct gen_model_args {
  std::string arch = "llama", act = "relu", type = "f16";  // by name; type may be a mix (q4_k_m, q5_k_m)
  tools::gen_model_options o;
};

void run_gen_model(const gen_model_args& a);

}  // namespace hotcold::launcher
