#pragma once
// The offline sparse pipeline's commands: profile, train-predictor, place, prepare.
#include <string>

#include "tools/predictor_train.hpp"
#include "loader/profile.hpp"

namespace hotcold::launcher {

struct train_args {
  std::string dir;
  tools::train_options o;
};

struct place_args {
  std::string model, stats;
  double budget = 0;
  int64_t ctx = 0;
  std::string cache_type_k, cache_type_v;  // the KV cache the placement leaves room for (-ctk, -ctv)
};

struct prepare_args {
  std::string model, out, calib, work;
  int64_t tokens = 2048;
  int threads = 0;
  double budget = 0;
  int64_t ctx = 0;
  std::string cache_type_k, cache_type_v;  // the KV cache the placement leaves room for (-ctk, -ctv)
  bool powerinfer = false;
  bool reuse_profile = false;
  bool plain_layout = false;  // --plain-layout: the dense file's neuron order, gate, up and down_t rows in tensors of their own
  std::string down_layout = "rows";  // --down-layout: rows (ffn_down_t) or blocks (ffn_down, 8-bit hidden values a block of 32 neurons)
  double sparsity = 0;
  int64_t sparsity_tokens = 512;
  tools::train_options train;
};

void run_profile_command(const loader::profile_options& o);
void run_train_predictor(const train_args& a);
void run_place(const place_args& a);
void run_prepare(prepare_args a);

}  // namespace hotcold::launcher
