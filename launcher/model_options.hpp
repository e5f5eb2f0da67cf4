#pragma once
// Options every command that runs a model shares (-m, -t, -c, --mmap, --mode) and the loading
// that follows them.
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "model/forward.hpp"

namespace hotcold::launcher {

struct model_args {
  std::string model;
  int threads = 0;
  int64_t ctx = 0;
  bool mmap = false;
  std::string mode;  // "dense", "sparse"; empty: sparse when the file has predictors
};

void add_model_options(CLI::App* cmd, model_args& m, bool model_required);

struct loaded {
  std::shared_ptr<const model> m;
  std::unique_ptr<inference_context> ctx;
};

// Loads the model (the default model when none is given), logs it on stderr, sets the mode.
loaded load(const model_args& a, int64_t ctx_override = 0);

}  // namespace hotcold::launcher
