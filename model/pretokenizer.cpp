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
        R"(\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+)",
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
