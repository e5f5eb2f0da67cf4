#include "model/vocab.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "model/vocab_impl.hpp"

namespace hotcold {
namespace vocab_detail {

byte_level_table::byte_level_table() {
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    uint32_t cp = printable ? b : next++;
    byte_to_text[b] = utf8_encode(cp);
    codepoint_to_byte[cp] = static_cast<uint8_t>(b);
  }
}

const byte_level_table& byte_level() {
  static const byte_level_table t;
  return t;
}

}  // namespace vocab_detail

using namespace vocab_detail;

namespace {

constexpr std::string_view end_of_turn_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
    "<EOT>", "_<EOT>", "<|end_of_text|>", "<end_of_utterance>",
};

}  // namespace

vocab::vocab(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
vocab::~vocab() = default;
vocab::vocab(vocab&&) noexcept = default;
vocab& vocab::operator=(vocab&&) noexcept = default;

// ---- loading ----------------------------------------------------------------------------------

void vocab::impl::read_special_ids(const gguf::file& f, size_t n) {
  struct special_key {
    const char* key;
    token_id* id;
  };
  for (auto [key, id] : {special_key{"tokenizer.ggml.bos_token_id", &bos}, special_key{"tokenizer.ggml.eos_token_id", &eos},
                         special_key{"tokenizer.ggml.eot_token_id", &eot}, special_key{"tokenizer.ggml.eom_token_id", &eom},
                         special_key{"tokenizer.ggml.unknown_token_id", &unk}, special_key{"tokenizer.ggml.seperator_token_id", &sep},
                         special_key{"tokenizer.ggml.padding_token_id", &pad}, special_key{"tokenizer.ggml.mask_token_id", &mask}}) {
    auto val = f.get_int(key);
    if (!val) continue;
    if (*val < 0 || static_cast<uint64_t>(*val) >= n)
      warnings.push_back(fmt::format("{} = {} is not a token id (vocabulary of {}); using {}", key, *val, n, *id));
    else
      *id = static_cast<token_id>(*val);
  }
  for (token_id* id : {&bos, &eos, &unk, &eot, &eom})
    if (*id >= static_cast<token_id>(n)) *id = no_token;
}

void vocab::impl::read_merges(const gguf::file& f) {
  const gguf::value* list = f.get_array("tokenizer.ggml.merges", gguf::value_type::string);
  merges.reserve(list->size());
  size_t unusable = 0;
  for (size_t i = 0; i < list->size(); ++i) {
    std::string_view m = list->string_at(i);
    size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string_view::npos;
    if (sp == std::string_view::npos) {
      ++unusable;
      continue;
    }
    std::string_view left = m.substr(0, sp), right = m.substr(sp + 1);
    auto l = find(left), r = find(right);
    std::string joined = std::string(left) + std::string(right);
    auto res = find(joined);
    if (!l || !r || !res) {
      ++unusable;
      continue;
    }
    merges.try_emplace(pair_key(*l, *r), merge_rule{static_cast<int32_t>(i), *res});
  }
  if (unusable) warnings.push_back(fmt::format("{} of {} merges name text that is not a token and are ignored", unusable, list->size()));
}

vocab vocab::from_gguf(const gguf::file& f) {
  auto v = std::make_unique<impl>();
  auto fail = [&](const std::string& what) -> vocab_error { return vocab_error(fmt::format("{}: {}", f.source(), what)); };
  try {
    auto model = f.get_string("tokenizer.ggml.model");
    if (!model) throw fail("no tokenizer: metadata key tokenizer.ggml.model is missing");
    v->model_name = std::string(*model);
    if (*model == "llama") {
      v->kind = vocab_kind::spm;
      v->bos = 1, v->eos = 2, v->unk = 0;
      v->add_bos = true, v->add_space_prefix = true;
    } else if (*model == "gpt2") {
      v->kind = vocab_kind::bpe;
      v->bos = 11, v->eos = 11;
      auto pre = f.get_string("tokenizer.ggml.pre");
      v->pre = pre ? find_pre_tokenizer(*pre) : nullptr;
      if (!v->pre) {
        v->warnings.push_back(pre ? fmt::format("unknown pre-tokenizer '{}', using 'default'", *pre)
                                  : std::string("no tokenizer.ggml.pre, using 'default'"));
        v->pre = &default_pre_tokenizer();
      }
      v->ignore_merges = v->pre->ignore_merges;
      v->add_bos = v->pre->add_bos;
    } else {
      throw fail(fmt::format("tokenizer.ggml.model = '{}' is not supported (known: llama, gpt2)", *model));
    }
    if (auto b = f.get_bool("tokenizer.ggml.add_space_prefix")) v->add_space_prefix = *b;

    const gguf::value* tokens = f.get_array("tokenizer.ggml.tokens", gguf::value_type::string);
    if (!tokens) throw fail("metadata key tokenizer.ggml.tokens is missing");
    size_t n = tokens->size();
    if (n == 0) throw fail("tokenizer.ggml.tokens is empty");
    if (n > static_cast<size_t>(INT32_MAX)) throw fail("tokenizer.ggml.tokens has more entries than token ids can count");
    const gguf::value* scores = f.get_array("tokenizer.ggml.scores");
    if (scores && scores->size() != n)
      throw fail(fmt::format("tokenizer.ggml.scores has {} entries for {} tokens", scores->size(), n));
    const gguf::value* types = f.get_array("tokenizer.ggml.token_type");
    if (types && types->size() != n)
      throw fail(fmt::format("tokenizer.ggml.token_type has {} entries for {} tokens", types->size(), n));

    v->texts.resize(n);
    v->scores.assign(n, 0.0f);
    v->types.assign(n, token_type::normal);
    for (size_t i = 0; i < n; ++i) {
      std::string_view t = tokens->string_at(i);
      v->texts[i] = t.empty() ? fmt::format("[EMPTY_{}]", i) : std::string(t);
      if (scores) v->scores[i] = static_cast<float>(scores->number_at(i));
      if (types) {
        int64_t ty = types->int_at(i);
        v->types[i] = ty >= 0 && ty <= 6 ? static_cast<token_type>(ty) : token_type::undefined;
      }
    }
    v->by_text.reserve(n);
    for (size_t i = 0; i < n; ++i) v->by_text.insert_or_assign(std::string_view(v->texts[i]), static_cast<token_id>(i));

    v->read_special_ids(f, n);
    if (auto b = f.get_bool("tokenizer.ggml.add_bos_token")) v->add_bos = *b;
    if (auto b = f.get_bool("tokenizer.ggml.add_eos_token")) v->add_eos = *b;

    for (token_id id : {v->eos, v->eot, v->eom})
      if (id != no_token) v->end_of_generation.insert(id);
    for (auto t : end_of_turn_texts)
      if (auto id = v->find(t)) v->end_of_generation.insert(*id);

    for (size_t i = 0; i < n; ++i) {
      auto ty = v->types[i];
      if (ty == token_type::control || ty == token_type::user_defined || ty == token_type::unknown)
        v->special_tokens.push_back(static_cast<token_id>(i));
    }
    std::stable_sort(v->special_tokens.begin(), v->special_tokens.end(),
                     [&](token_id a, token_id b) { return v->texts[a].size() > v->texts[b].size(); });

    if (v->kind == vocab_kind::spm) {
      v->index_joinable_pairs();
      for (int b = 0; b < 256; ++b) {
        auto id = v->find(fmt::format("<0x{:02X}>", b));
        if (!id) id = v->find(std::string(1, static_cast<char>(b)));
        v->byte_token[b] = id ? *id : v->unk;
      }
    } else {
      const auto& bl = byte_level();
      for (int b = 0; b < 256; ++b) {
        auto id = v->find(bl.byte_to_text[b]);
        v->byte_token[b] = id ? *id : no_token;
      }
      if (!f.get_array("tokenizer.ggml.merges", gguf::value_type::string))
        throw fail("metadata key tokenizer.ggml.merges is missing (a gpt2 tokenizer needs its merges)");
      v->read_merges(f);
      v->splitter = std::make_unique<regex_splitter>(v->pre->patterns);
    }
  } catch (const gguf::metadata_error& e) {
    throw vocab_error(e.what());
  }
  return vocab(std::move(v));
}

// ---- accessors --------------------------------------------------------------------------------

vocab_kind vocab::kind() const { return impl_->kind; }
std::string_view vocab::model_name() const { return impl_->model_name; }
std::string_view vocab::pre_tokenizer() const { return impl_->pre ? impl_->pre->name : "default"; }
size_t vocab::size() const { return impl_->texts.size(); }
std::string_view vocab::text(token_id id) const { return impl_->texts.at(static_cast<size_t>(id)); }
float vocab::score(token_id id) const { return impl_->scores.at(static_cast<size_t>(id)); }
token_type vocab::type(token_id id) const { return impl_->types.at(static_cast<size_t>(id)); }
std::optional<token_id> vocab::find(std::string_view t) const { return impl_->find(t); }
token_id vocab::bos() const { return impl_->bos; }
token_id vocab::eos() const { return impl_->eos; }
token_id vocab::unk() const { return impl_->unk; }
bool vocab::add_bos() const { return impl_->add_bos; }
bool vocab::add_eos() const { return impl_->add_eos; }
bool vocab::add_space_prefix() const { return impl_->add_space_prefix; }
bool vocab::is_end_of_generation(token_id id) const { return impl_->end_of_generation.count(id) != 0; }
const std::vector<std::string>& vocab::warnings() const { return impl_->warnings; }

// ---- tokenizing -------------------------------------------------------------------------------

std::vector<fragment> vocab::impl::partition(std::string_view text, bool parse_special) const {
  std::vector<fragment> frags;
  if (text.empty()) return frags;
  frags.push_back({text});
  std::vector<fragment> next;
  for (token_id id : special_tokens) {
    auto ty = types[id];
    if (!parse_special && (ty == token_type::control || ty == token_type::unknown)) continue;
    std::string_view special = texts[id];
    next.clear();
    for (const auto& f : frags) {
      if (f.id != no_token || f.text.size() < special.size()) {
        next.push_back(f);
        continue;
      }
      size_t from = 0;
      for (size_t at; (at = f.text.find(special, from)) != std::string_view::npos; from = at + special.size()) {
        if (at > from) next.push_back({f.text.substr(from, at - from)});
        next.push_back({f.text.substr(at, special.size()), id});  // (a view of `text`, as every fragment is)
      }
      if (from < f.text.size()) next.push_back({f.text.substr(from)});
    }
    frags.swap(next);
  }
  return frags;
}

std::vector<token_id> vocab::tokenize(std::string_view text, bool add_special, bool parse_special) const {
  return impl_->tokens_of(impl_->partition(text, parse_special), add_special);
}

std::vector<token_id> vocab::tokenize_outside(std::string_view text, std::span<const std::pair<size_t, size_t>> plain) const {
  // The special tokens found where they may be; the others' text joins the raw text around it (the
  // fragments are consecutive views of `text`, so neighbours join into one view).
  std::vector<fragment> frags;
  size_t r = 0;
  for (const fragment& f : impl_->partition(text, true)) {
    const size_t begin = static_cast<size_t>(f.text.data() - text.data()), end = begin + f.text.size();
    while (r < plain.size() && plain[r].second <= begin) ++r;
    const bool in_plain = r < plain.size() && plain[r].first < end;
    const bool raw = f.id == no_token || (in_plain && (impl_->types[f.id] == token_type::control || impl_->types[f.id] == token_type::unknown));
    if (raw && !frags.empty() && frags.back().id == no_token)
      frags.back().text = std::string_view(frags.back().text.data(), frags.back().text.size() + f.text.size());
    else frags.push_back(raw ? fragment{f.text} : f);
  }
  return impl_->tokens_of(frags, false);
}

std::vector<token_id> vocab::impl::tokens_of(const std::vector<fragment>& frags, bool add_special) const {
  const impl& v = *this;
  std::vector<token_id> out;
  bool bos = add_special && v.add_bos && v.bos != no_token;
  bool eos = add_special && v.add_eos && v.eos != no_token;
  if (bos) out.push_back(v.bos);
  bool prev_special = true;  // SPM: raw text at the start or after a special token gets the space prefix
  for (const auto& f : frags) {
    if (f.id != no_token) {
      out.push_back(f.id);
      prev_special = true;
    } else if (v.kind == vocab_kind::spm) {
      v.tokenize_spm(f.text, v.add_space_prefix && prev_special, out);
      prev_special = false;
    } else {
      v.tokenize_bpe(f.text, out);
    }
  }
  if (eos) out.push_back(v.eos);
  return out;
}

// ---- detokenizing -----------------------------------------------------------------------------

std::string vocab::piece(token_id id, bool render_special) const {
  const impl& v = *impl_;
  if (id < 0 || static_cast<size_t>(id) >= v.texts.size()) return {};
  const std::string& t = v.texts[id];
  switch (v.types[id]) {
    case token_type::control:
    case token_type::unknown:
      return render_special ? t : std::string();
    case token_type::user_defined:
      return t;
    case token_type::byte:
      if (v.kind == vocab_kind::spm && t.size() == 6 && t.starts_with("<0x") && t.back() == '>')
        return std::string(1, static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16)));
      [[fallthrough]];
    case token_type::normal: {
      std::string s;
      if (v.kind == vocab_kind::spm) {
        for (size_t i = 0; i < t.size();) {
          if (t.compare(i, space_marker.size(), space_marker) == 0) {
            s += ' ';
            i += space_marker.size();
          } else {
            s += t[i++];
          }
        }
        return s;
      }
      const auto& bl = byte_level();
      for (size_t i = 0; i < t.size();) {
        size_t at = i;
        auto cp = utf8_decode(t, i);
        if (!cp) {
          s += t[i++];
          continue;
        }
        auto it = bl.codepoint_to_byte.find(*cp);
        if (it != bl.codepoint_to_byte.end()) s += static_cast<char>(it->second);
        else s.append(t, at, i - at);
      }
      return s;
    }
    case token_type::unused:
    case token_type::undefined:
      return {};
  }
  return {};
}

std::string vocab::detokenize(std::span<const token_id> ids, bool render_special) const {
  std::string out;
  bool strip_space = impl_->kind == vocab_kind::spm && impl_->add_space_prefix;
  for (token_id id : ids) {
    std::string p = piece(id, render_special);
    if (strip_space && id >= 0 && static_cast<size_t>(id) < size()) {
      token_type t = type(id);
      if (t == token_type::normal && !p.empty() && p.front() == ' ') p.erase(0, 1);
      // The prefixed space belongs to the first piece of text; control tokens before it (BOS) do not count.
      if (t != token_type::control && t != token_type::unknown && !p.empty()) strip_space = false;
      if (t == token_type::normal) strip_space = false;
    }
    out += p;
  }
  return out;
}

}  // namespace hotcold
