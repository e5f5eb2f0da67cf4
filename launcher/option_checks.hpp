#pragma once
// Checks of command-line values that several commands share: thread counts, floating-point flags,
// and the sampling flags (through the protocol's one check of sampling parameters).
#include <CLI/CLI.hpp>

#include "model/sampler.hpp"

namespace hotcold::launcher {

// -t: 0 or less means every hardware thread (as llama.cpp); more than this is refused: four per
// hardware thread, at least 8.
int max_threads();
CLI::Validator thread_count();

// A floating-point flag: a finite number in [lo, hi] (NaN and infinities are refused; the bounds are
// printed short).
CLI::Validator finite_in(double lo, double hi);

// A whole-number flag in [lo, hi] (CLI11's NonNegativeNumber prints its bound with 309 digits).
CLI::Validator whole_in(long long lo, long long hi);

// --temp, --top-k, --top-p, --min-p, --repeat-penalty, --repeat-last-n as protocol::check_sampling
// takes them. Throws std::invalid_argument naming the flag.
void check_sampling_flags(const sampling_params& p);

}  // namespace hotcold::launcher
