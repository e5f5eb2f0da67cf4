#pragma once
// hotcold inspect: a GGUF file's metadata, tensors and totals (tables, or JSON).
#include <string>

namespace hotcold::launcher {

void run_inspect(const std::string& path, bool json);

}  // namespace hotcold::launcher
