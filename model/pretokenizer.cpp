#define PCRE2_CODE_UNIT_WIDTH 8
#include "model/pretokenizer.hpp"

#include <pcre2.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace hotcold {
namespace {

// The families' regexes are the published pre-tokenizer definitions of the models that use them
// (their tokenizer.json files), in the form llama.cpp applies them: case-insensitive contractions
// spelled out, since `(?i:...)` is not supported there either.
constexpr std::string_view gpt2_words =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
constexpr std::string_view llama3_words =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view qwen2_words =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view cjk_runs = "[一-龥ࠀ-一가-퟿]+";

const std::vector<pre_tokenizer_family>& families() {
  static const std::vector<pre_tokenizer_family> list = {
      {"default", {}, {R"([\p{P}\$\+<=>\^~\|]+)", gpt2_words, R"(\p{N}+)", "[0-9][0-9][0-9]"}},
      {"llama3", {"llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral"}, {llama3_words}, true, true},
      {"dbrx", {"smaug-bpe"}, {llama3_words}},  // llama3's split without its merge and BOS rules
      {"falcon", {}, {R"([\p{P}\$\+<=>\^~\|`]+)", gpt2_words, "[0-9][0-9][0-9]"}},
      {"gpt-2", {"gpt2", "mpt", "phi-2", "olmo", "jais", "jina-es", "jina-de", "jina-v2-es", "jina-v2-de", "jina-v2-code", "exaone4"}, {gpt2_words}},
      {"starcoder", {"refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"}, {R"(\p{N})", gpt2_words}},
      {"deepseek-coder", {}, {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", cjk_runs, R"(\p{N})"}},
      {"deepseek-llm",
       {},
       {R"([\r\n])",
        R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)",
        R"(\s?[!-/:-~！-／：-～‘-‟　-。]+)", R"(\s+$)", cjk_runs, R"(\p{N}+)"}},
      {"qwen2", {"deepseek-r1-qwen", "stablelm2", "megrez", "hunyuan"}, {qwen2_words}},
  };
  return list;
}

}  // namespace

const std::vector<pre_tokenizer_family>& all_pre_tokenizers() { return families(); }

const pre_tokenizer_family& default_pre_tokenizer() { return families().front(); }

const pre_tokenizer_family* find_pre_tokenizer(std::string_view pre) {
  for (const auto& f : families()) {
    if (f.name == pre) return &f;
    if (std::find(f.aliases.begin(), f.aliases.end(), pre) != f.aliases.end()) return &f;
  }
  return nullptr;
}

struct regex_splitter::compiled {
  pcre2_code* code = nullptr;
  ~compiled() { pcre2_code_free(code); }
};

regex_splitter::regex_splitter(const std::vector<std::string_view>& patterns) {
  for (auto p : patterns) {
    int err = 0;
    PCRE2_SIZE err_off = 0;
    auto c = std::make_unique<compiled>();
    c->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(),
                            PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_off, nullptr);
    if (!c->code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      throw std::invalid_argument("pre-tokenizer regex at offset " + std::to_string(err_off) + ": " +
                                  reinterpret_cast<const char*>(msg) + ": " + std::string(p));
    }
    pcre2_jit_compile(c->code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is unavailable
    regexes_.push_back(std::move(c));
  }
}

regex_splitter::~regex_splitter() = default;
regex_splitter::regex_splitter(regex_splitter&&) noexcept = default;
regex_splitter& regex_splitter::operator=(regex_splitter&&) noexcept = default;

namespace {
// Per-thread match state: JIT stack large enough for long whitespace or letter runs.
struct match_state {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
  match_state() { pcre2_jit_stack_assign(context, nullptr, stack); }
  ~match_state() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};
match_state& state() {
  thread_local match_state s;
  return s;
}
}  // namespace

void regex_splitter::split(std::string_view text, std::vector<std::string_view>& out) const {
  std::vector<std::string_view> current{text}, next;
  if (text.empty()) return;
  auto& st = state();
  for (const auto& re : regexes_) {
    next.clear();
    for (std::string_view piece : current) {
      auto subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
      size_t start = 0;   // search position
      size_t emitted = 0; // end of the last piece pushed
      while (start < piece.size()) {
        int rc = pcre2_match(re->code, subject, piece.size(), start, 0, st.data, st.context);
        if (rc < 0) break;  // no more matches (or an error, handled as no match)
        PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
        size_t m0 = ov[0], m1 = ov[1];
        if (m1 == m0) {  // empty match: none of the families' patterns can produce one; step over a char
          start = m0 + 1;
          while (start < piece.size() && (static_cast<unsigned char>(piece[start]) & 0xC0) == 0x80) ++start;
          continue;
        }
        if (m0 > emitted) next.push_back(piece.substr(emitted, m0 - emitted));
        next.push_back(piece.substr(m0, m1 - m0));
        emitted = start = m1;
      }
      if (emitted < piece.size()) next.push_back(piece.substr(emitted));
    }
    current.swap(next);
  }
  out.insert(out.end(), current.begin(), current.end());
}

}  // namespace hotcold
