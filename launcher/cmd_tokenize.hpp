#pragma once
// hotcold tokenize and detokenize: a text's token ids, and the text of ids, with a GGUF file's tokenizer.
#include <string>

namespace hotcold::launcher {

struct tokenize_args {
  std::string model, prompt, file;  // the text: prompt, or the bytes of file
  bool from_file = false;           // -f was given
  bool add_special = false, parse_special = false, pieces = false;
};

struct detokenize_args {
  std::string model, ids;
  bool render_special = false;
};

void run_tokenize(const tokenize_args& a);
void run_detokenize(const detokenize_args& a);

}  // namespace hotcold::launcher
