#pragma once
// The one check of the command line's sampling flags (protocol::check_sampling, with the flags' names).
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "kernels/tensor_types.hpp"
#include "model/sampler.hpp"

namespace hotcold::launcher {

// Throws std::invalid_argument naming the flag (--temp, --min-p, ...) and its range.
void check_sampling_flags(const sampling_params& p);

// The command line with llama.cpp's multi-letter short flags written as the long ones hotcold's parser
// knows (-ctk -> --cache-type-k, -ctv -> --cache-type-v; -ctk=q8_0 as well); the rest as given.
std::vector<std::string> short_spellings(int argc, char** argv);

// --seed as llama.cpp takes it: a whole number 0 .. 2^64 - 1 (given = true), or -1 for a random one
// (given = false: one is drawn and printed); anything else, 2^64 and beyond among them, an error naming
// the flag (never clamped).
CLI::Option* add_seed_option(CLI::App* cmd, uint64_t& seed, bool& given, const std::string& help);

// The KV cache's types the flags name ("f16", "q8_0", ...; empty: f16).
kv_types parse_cache_types(const std::string& k, const std::string& v);

}  // namespace hotcold::launcher
