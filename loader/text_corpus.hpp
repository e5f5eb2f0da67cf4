#pragma once
// Deterministic mixed text for tokenizer benchmarks and tests: English prose, source code, numbers,
// punctuation, Cyrillic, Greek, CJK, Hangul, emoji and runs of whitespace, drawn by a seeded RNG.
#include <cstddef>
#include <cstdint>
#include <string>

namespace hotcold::loader {

// At least `bytes` bytes of valid UTF-8 (cut at a character boundary just past `bytes`).
std::string mixed_text(size_t bytes, uint64_t seed = 42);

}  // namespace hotcold::loader
