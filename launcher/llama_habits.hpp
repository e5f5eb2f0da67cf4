#pragma once
// llama.cpp's command-line habits, as hotcold reads them (docs/for-llama-cpp-users.md): its
// multi-letter short flags (-ngl, -ctk, -fa, -sys, -cnv, ...) written as the long ones before the
// parser sees them (which would read -ngl as -n gl); its flags of the same meaning on the commands
// that load a model; the nearest known name for a flag or command that is not one.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/model_options.hpp"

namespace CLI {  // (CLI11 is compiled in options.cpp and llama_habits.cpp alone)
class App;
class Option;
class ParseError;
}  // namespace CLI

namespace hotcold::launcher {

// The command line with llama.cpp's multi-letter short flags written as hotcold's long ones (-ngl 99
// -> --n-gpu-layers 99, -ctk=q8_0 -> --cache-type-k=q8_0); the rest, and the text given to -p, -f,
// -sys and the like, as given.
std::vector<std::string> llama_spellings(int argc, char** argv);

// llama.cpp's flags of the same meaning where a model is loaded: --gpu-layers (-ngl), --ctx-size,
// --no-mmap (hotcold's default: a private copy), --mlock, --flash-attn (-fa: hotcold's attention is
// always the fused kind), -b/--batch-size and --ubatch-size (-ub: tokens a step), --override-tensor
// (-ot: an experts pattern on the CPU, as --cpu-moe), and its device names for --device (none, CUDA0,
// ROCm0).
void add_llama_model_options(CLI::App* cmd, model_args& m);

// --seed as llama.cpp takes it: a whole number 0 .. 2^64 - 1 (given = true), or -1 for a random one
// (given = false: one is drawn and printed); anything else, 2^64 and beyond among them, an error naming
// the flag (never clamped).
CLI::Option* add_seed_option(CLI::App* cmd, uint64_t& seed, bool& given, const std::string& help);

// The name among `names` nearest to `word` (at most a third of its letters off, or one it begins);
// "" for none.
std::string nearest_name(std::string_view word, const std::vector<std::string>& names);

// What the parser's error gets added: for a flag or command it does not know, the nearest it does
// ("did you mean --temp?"). `app` is the whole command line's, parsed as far as it went.
std::string suggestion(const CLI::App& app, const std::vector<std::string>& args, const CLI::ParseError& e);

// After the model is loaded, --mlock's lock (a warning on stderr where the system refuses, as llama.cpp
// gives), and the notes of flags that change nothing here.
void apply_llama_flags(const model_args& m);

}  // namespace hotcold::launcher
