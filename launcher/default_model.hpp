#pragma once
// The embedded default model: a small ReLU llama made by gen-model on first use, with the
// vocabulary embedded in the binary at build time.
#include <string>

#include "tools/gen_model.hpp"

namespace hotcold::launcher {

// Where the default model lives: $HOTCOLD_CACHE, else $XDG_CACHE_HOME/hotcold, else ~/.cache/hotcold.
std::string cache_dir();
std::string default_model_path();
tools::gen_model_options default_model_options();
// Returns the default model's path, generating it (and logging that to stderr) if it is missing.
std::string ensure_default_model();

}  // namespace hotcold::launcher
