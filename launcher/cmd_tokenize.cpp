// hotcold tokenize -m FILE (-p TEXT | -f FILE) [--add-special] [--parse-special] [--pieces]
// hotcold detokenize -m FILE --ids "1 2 3" [--render-special]
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <system_error>

#include <fmt/format.h>

#include "launcher/commands.hpp"
#include "model/gguf.hpp"
#include "model/vocab.hpp"

namespace hotcold::launcher {
namespace {

// A piece shown between quotes: printable UTF-8 as is, control bytes escaped.
std::string escape_piece(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (c == '\\') out += "\\\\";
    else if (c == '\'') out += "\\'";
    else if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
    else out += static_cast<char>(c);
  }
  return out;
}

vocab load_vocab(const std::string& path) {
  auto f = gguf::file::open(path);
  auto v = vocab::from_gguf(f);
  for (const auto& w : v.warnings()) fmt::print(stderr, "hotcold: warning: {}: {}\n", path, w);
  return v;
}

std::vector<token_id> parse_ids(const std::string& text, size_t vocab_size) {
  std::vector<token_id> ids;
  const char* p = text.data();
  const char* end = p + text.size();
  while (p < end) {
    while (p < end && (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n' || *p == '[' || *p == ']')) ++p;
    if (p == end) break;
    long long id = 0;
    auto [next, ec] = std::from_chars(p, end, id);
    if (ec != std::errc() || next == p)
      throw std::invalid_argument(fmt::format("--ids: '{}' is not a token id", std::string(p, std::min<size_t>(16, end - p))));
    if (id < 0 || static_cast<unsigned long long>(id) >= vocab_size)
      throw std::invalid_argument(fmt::format("--ids: token id {} is outside the vocabulary (0..{})", id, vocab_size - 1));
    ids.push_back(static_cast<token_id>(id));
    p = next;
  }
  return ids;
}

}  // namespace

void add_tokenize_commands(CLI::App& app, int& exit_code) {
  struct tokenize_args {
    std::string model, prompt, file;
    bool add_special = false, parse_special = false, pieces = false;
  };
  auto a = std::make_shared<tokenize_args>();
  auto* tok = app.add_subcommand("tokenize", "Print the token ids of a text, on one line separated by spaces");
  tok->add_option("-m,--model", a->model, "GGUF file with tokenizer metadata")->required();
  auto* p = tok->add_option("-p,--prompt", a->prompt, "Text to tokenize");
  auto* f = tok->add_option("-f,--file", a->file, "File whose bytes are tokenized");
  p->excludes(f);
  tok->add_flag("--add-special", a->add_special, "Add BOS/EOS as the vocabulary asks");
  tok->add_flag("--parse-special", a->parse_special, "Text of control tokens (\"<s>\") becomes those tokens");
  tok->add_flag("--pieces", a->pieces, "Print one token per line as: id -> 'piece'");
  tok->callback([=, &exit_code] {
    exit_code = run_guarded("tokenize", [&] {
      if (p->count() + f->count() != 1) throw std::invalid_argument("give the text with exactly one of -p TEXT or -f FILE");
      std::string text = f->count() ? read_text_file(a->file) : a->prompt;
      vocab v = load_vocab(a->model);
      auto ids = v.tokenize(text, a->add_special, a->parse_special);
      std::string out;
      if (a->pieces) {
        for (token_id id : ids) out += fmt::format("{} -> '{}'\n", id, escape_piece(v.piece(id, true)));
      } else {
        for (size_t i = 0; i < ids.size(); ++i) out += (i ? " " : "") + std::to_string(ids[i]);
        out += '\n';
      }
      std::fwrite(out.data(), 1, out.size(), stdout);
    });
  });

  struct detokenize_args {
    std::string model, ids;
    bool render_special = false;
  };
  auto d = std::make_shared<detokenize_args>();
  auto* det = app.add_subcommand("detokenize", "Print the text of token ids");
  det->add_option("-m,--model", d->model, "GGUF file with tokenizer metadata")->required();
  det->add_option("--ids", d->ids, "Token ids separated by spaces or commas, e.g. \"1 15043 3186\"")->required();
  det->add_flag("--render-special", d->render_special, "Print the text of control tokens such as <s>");
  det->callback([=, &exit_code] {
    exit_code = run_guarded("detokenize", [&] {
      vocab v = load_vocab(d->model);
      auto ids = parse_ids(d->ids, v.size());
      std::string text = v.detokenize(ids, d->render_special) + "\n";
      std::fwrite(text.data(), 1, text.size(), stdout);
    });
  });
}

}  // namespace hotcold::launcher
