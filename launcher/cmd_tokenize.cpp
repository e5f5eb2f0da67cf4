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

#include "launcher/cmd_tokenize.hpp"
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

void run_tokenize(const tokenize_args& a) {
  const std::string text = a.from_file ? read_text_file(a.file) : a.prompt;
  vocab v = load_vocab(a.model);
  auto ids = v.tokenize(text, a.add_special, a.parse_special);
  std::string out;
  if (a.pieces) {
    for (token_id id : ids) out += fmt::format("{} -> '{}'\n", id, escape_piece(v.piece(id, true)));
  } else {
    out = fmt::format("{}\n", fmt::join(ids, " "));
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
}

void run_detokenize(const detokenize_args& a) {
  vocab v = load_vocab(a.model);
  auto ids = parse_ids(a.ids, v.size());
  std::string text = v.detokenize(ids, a.render_special) + "\n";
  std::fwrite(text.data(), 1, text.size(), stdout);
}

}  // namespace hotcold::launcher
