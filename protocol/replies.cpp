#include "protocol/messages.hpp"

#include <stdexcept>
#include <type_traits>

#include <nlohmann/json.hpp>


namespace hotcold::protocol {

using json = nlohmann::json;

// ---- Replies -------------------------------------------------------------------------------------

namespace {
json head(const char* type, std::string_view id) { return json{{"v", protocol_version}, {"type", type}, {"id", std::string(id)}}; }
// Token pieces may end inside a UTF-8 character: such bytes go out as U+FFFD rather than failing.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }
}  // namespace

std::string encode_accepted(std::string_view id, int64_t prompt_tokens, uint64_t seed) {
  json j = head("accepted", id);
  j["prompt_tokens"] = prompt_tokens;
  j["seed"] = seed;
  return dump(j);
}

std::string base64(std::string_view bytes) {
  static constexpr char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t v = static_cast<uint8_t>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) v |= static_cast<uint8_t>(bytes[i + 2]);
    out += digits[(v >> 18) & 63];
    out += digits[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? digits[(v >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? digits[v & 63] : '=';
  }
  return out;
}

std::string unbase64(std::string_view text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (text.size() % 4 != 0) throw std::invalid_argument("base64 text length is not a multiple of 4");
  std::string out;
  for (size_t i = 0; i < text.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = text[i + static_cast<size_t>(k)];
      if (c == '=' && i + 4 == text.size() && k >= 2) {
        v[k] = 0;
        ++pad;
      } else if ((v[k] = value(c)) < 0 || pad > 0) {
        throw std::invalid_argument("not base64");
      }
    }
    const uint32_t x = (static_cast<uint32_t>(v[0]) << 18) | (static_cast<uint32_t>(v[1]) << 12) | (static_cast<uint32_t>(v[2]) << 6) | static_cast<uint32_t>(v[3]);
    out += static_cast<char>((x >> 16) & 255);
    if (pad < 2) out += static_cast<char>((x >> 8) & 255);
    if (pad < 1) out += static_cast<char>(x & 255);
  }
  return out;
}

namespace {
// "logprob" and "top_logprobs" of a token or prompt_token reply (the first prompt token: null and []).
void put_probs(json& j, const token_probs* probs) {
  j["logprob"] = probs ? json(probs->logprob) : json(nullptr);
  json top = json::array();
  if (probs)
    for (const auto& p : probs->top) top.push_back({{"token", p.token}, {"text", p.bytes}, {"bytes", base64(p.bytes)}, {"logprob", p.logprob}});
  j["top_logprobs"] = std::move(top);
}
}  // namespace

std::string encode_token(std::string_view id, int64_t index, int32_t token, std::string_view text, double ms_since_accepted, const token_probs* probs) {
  json j = head("token", id);
  j["index"] = index;
  j["token"] = token;
  j["text"] = std::string(text);
  j["bytes"] = base64(text);
  j["ms"] = ms_since_accepted;
  if (probs) put_probs(j, probs);
  return dump(j);
}

std::string encode_prompt_token(std::string_view id, int64_t index, int32_t token, std::string_view text, const token_probs* probs) {
  json j = head("prompt_token", id);
  j["index"] = index;
  j["token"] = token;
  j["text"] = std::string(text);
  j["bytes"] = base64(text);
  put_probs(j, probs);
  return dump(j);
}

std::string encode_done(std::string_view id, std::string_view finish, int64_t prompt_tokens, int64_t generated_tokens, const timings& t,
                        std::optional<std::string_view> text, std::optional<std::string_view> error, int64_t cached_tokens) {
  done_reply d{std::string(id), std::string(finish), prompt_tokens, generated_tokens, t, std::nullopt, std::nullopt, cached_tokens};
  if (text) d.text = std::string(*text);
  if (error) d.error = std::string(*error);
  return encode_done(d);
}

std::string encode_done(const done_reply& d) {
  json j = head("done", d.id);
  j["finish"] = d.finish;
  j["prompt_tokens"] = d.prompt_tokens;
  j["cached_tokens"] = d.cached_tokens;
  j["generated_tokens"] = d.generated_tokens;
  j["timings"] = {{"queued_ms", d.t.queued_ms}, {"time_to_first_token_ms", d.t.time_to_first_token_ms}, {"total_ms", d.t.total_ms}};
  if (d.text) j["text"] = *d.text;
  if (d.error) j["error"] = *d.error;
  if (d.content) {
    j["content"] = *d.content;
    json calls = json::array();
    for (const auto& [name, args] : d.tool_calls) calls.push_back({{"name", name}, {"arguments", args}});
    j["tool_calls"] = std::move(calls);
  }
  return dump(j);
}

std::string encode_error(const protocol_error& e, std::optional<int64_t> retry_after_ms) {
  json j = {{"v", protocol_version}, {"type", "error"}, {"id", e.id.empty() ? json(nullptr) : json(e.id)},
            {"code", std::string(error_code_name(e.code))}, {"message", e.message}};
  if (retry_after_ms) j["retry_after_ms"] = *retry_after_ms;
  return dump(j);
}

std::string encode_health(std::string_view id, std::string_view status, int64_t active, int64_t queued) {
  json j = head("health", id);
  j["status"] = std::string(status);
  j["active"] = active;
  j["queued"] = queued;
  return dump(j);
}

std::string encode_tokens(std::string_view id, const std::vector<int32_t>& tokens) {
  json j = head("tokens", id);
  j["tokens"] = tokens;
  return dump(j);
}

std::string encode_text(std::string_view id, std::string_view text) {
  json j = head("text", id);
  j["text"] = std::string(text);
  return dump(j);
}

std::string encode_slot(const slot_reply& r) {
  json j = head("slot", r.id);
  j.update({{"action", r.action}, {"slot", r.slot}, {"n_tokens", r.n_tokens}, {"n_bytes", r.n_bytes}, {"ms", r.ms}});
  return dump(j);
}

std::string encode_model_info(std::string_view id, const model_facts& m) {
  json j = head("model_info", id);
  j["model"] = {{"path", m.path}, {"architecture", m.architecture}, {"activation", m.activation}, {"mode", m.mode},
                {"n_vocab", m.n_vocab}, {"n_ctx", m.n_ctx}, {"n_layer", m.n_layer}, {"n_embd", m.n_embd}, {"n_ff", m.n_ff},
                {"bos", m.bos}, {"eos", m.eos}};
  return dump(j);
}

namespace {

struct reply_names {
  std::string_view operator()(const accepted_reply&) const { return "accepted"; }
  std::string_view operator()(const token_reply&) const { return "token"; }
  std::string_view operator()(const prompt_token_reply&) const { return "prompt_token"; }
  std::string_view operator()(const done_reply&) const { return "done"; }
  std::string_view operator()(const error_reply&) const { return "error"; }
  std::string_view operator()(const health_reply&) const { return "health"; }
  std::string_view operator()(const tokens_reply&) const { return "tokens"; }
  std::string_view operator()(const text_reply&) const { return "text"; }
  std::string_view operator()(const model_info_reply&) const { return "model_info"; }
  std::string_view operator()(const slot_reply&) const { return "slot"; }
};

struct reply_encoder {
  std::string operator()(const accepted_reply& r) const { return encode_accepted(r.id, r.prompt_tokens, r.seed); }
  std::string operator()(const token_reply& r) const { return encode_token(r.id, r.index, r.token, r.bytes, r.ms, r.probs ? &*r.probs : nullptr); }
  std::string operator()(const prompt_token_reply& r) const { return encode_prompt_token(r.id, r.index, r.token, r.bytes, r.probs ? &*r.probs : nullptr); }
  std::string operator()(const done_reply& r) const {
    return encode_done(r);
  }
  std::string operator()(const error_reply& r) const { return encode_error(r.error, r.retry_after_ms); }
  std::string operator()(const health_reply& r) const { return encode_health(r.id, r.status, r.active, r.queued); }
  std::string operator()(const tokens_reply& r) const { return encode_tokens(r.id, r.tokens); }
  std::string operator()(const text_reply& r) const { return encode_text(r.id, r.text); }
  std::string operator()(const model_info_reply& r) const { return encode_model_info(r.id, r.model); }
  std::string operator()(const slot_reply& r) const { return encode_slot(r); }
};

struct bad_reply {
  std::string message;
};

// The fields of a reply, each required and of its type (fields this client does not know are left:
// a newer server may add some).
class reply_reader {
 public:
  explicit reply_reader(const json& j) : j_(j) {}
  const json& at(const char* name) const {
    auto it = j_.find(name);
    if (it == j_.end()) throw bad_reply{std::string("\"") + name + "\" is missing"};
    return *it;
  }
  std::string string(const char* name) const {
    const json& v = at(name);
    if (!v.is_string()) throw bad_reply{std::string("\"") + name + "\" must be a string"};
    return v.get<std::string>();
  }
  int64_t integer(const char* name) const {
    const json& v = at(name);
    if (!v.is_number_integer()) throw bad_reply{std::string("\"") + name + "\" must be an integer"};
    return v.get<int64_t>();
  }
  uint64_t unsigned_integer(const char* name) const {
    const json& v = at(name);
    if (!v.is_number_unsigned()) throw bad_reply{std::string("\"") + name + "\" must be an integer from 0"};
    return v.get<uint64_t>();
  }
  double number(const char* name) const {
    const json& v = at(name);
    if (!v.is_number()) throw bad_reply{std::string("\"") + name + "\" must be a number"};
    return v.get<double>();
  }
  std::vector<int32_t> tokens(const char* name) const {
    const json& v = at(name);
    std::vector<int32_t> out;
    if (!v.is_array()) throw bad_reply{std::string("\"") + name + "\" must be an array of token ids"};
    for (const auto& t : v) {
      if (!t.is_number_integer()) throw bad_reply{std::string("\"") + name + "\" must hold token ids"};
      out.push_back(t.get<int32_t>());
    }
    return out;
  }
  reply_reader object(const char* name) const {
    const json& v = at(name);
    if (!v.is_object()) throw bad_reply{std::string("\"") + name + "\" must be an object"};
    return reply_reader(v);
  }
  bool has(const char* name) const { return j_.contains(name); }

 private:
  const json& j_;
};

token_probs read_probs(const reply_reader& r) {
  token_probs p{r.number("logprob"), {}};
  const json& top = r.at("top_logprobs");
  if (!top.is_array()) throw bad_reply{"\"top_logprobs\" must be an array"};
  for (const auto& e : top) {
    if (!e.is_object()) throw bad_reply{"\"top_logprobs\" must hold objects"};
    const reply_reader t(e);
    p.top.push_back({static_cast<int32_t>(t.integer("token")), unbase64(t.string("bytes")), t.number("logprob")});
  }
  return p;
}

reply read_reply(const std::string& type, const reply_reader& r) {
  if (type == "error") {
    error_reply e;
    const json& id = r.at("id");
    if (!id.is_null() && !id.is_string()) throw bad_reply{"\"id\" must be a string or null"};
    if (id.is_string()) e.error.id = id.get<std::string>();
    const auto code = error_code_from_name(r.string("code"));
    if (!code) throw bad_reply{"unknown error \"code\" \"" + r.string("code") + "\""};
    e.error.code = *code;
    e.error.message = r.string("message");
    if (r.has("retry_after_ms")) e.retry_after_ms = r.integer("retry_after_ms");
    return e;
  }
  const std::string id = r.string("id");
  if (type == "accepted") return accepted_reply{id, r.integer("prompt_tokens"), r.unsigned_integer("seed")};
  if (type == "token") {
    token_reply t{id, r.integer("index"), static_cast<int32_t>(r.integer("token")), unbase64(r.string("bytes")), r.number("ms"), std::nullopt};
    if (r.has("logprob")) t.probs = read_probs(r);
    return t;
  }
  if (type == "prompt_token") {
    prompt_token_reply t{id, r.integer("index"), static_cast<int32_t>(r.integer("token")), unbase64(r.string("bytes")), std::nullopt};
    if (!r.at("logprob").is_null()) t.probs = read_probs(r);
    return t;
  }
  if (type == "done") {
    done_reply d{id, r.string("finish"), r.integer("prompt_tokens"), r.integer("generated_tokens"), {}, std::nullopt, std::nullopt};
    const auto t = r.object("timings");
    d.t = {t.number("queued_ms"), t.number("time_to_first_token_ms"), t.number("total_ms")};
    if (r.has("text")) d.text = r.string("text");
    if (r.has("error")) d.error = r.string("error");
    if (r.has("cached_tokens")) d.cached_tokens = r.integer("cached_tokens");
    if (r.has("content")) {
      d.content = r.string("content");
      const json& calls = r.at("tool_calls");
      if (!calls.is_array()) throw bad_reply{"\"tool_calls\" must be an array"};
      for (const auto& c : calls) {
        if (!c.is_object()) throw bad_reply{"\"tool_calls\" must hold objects"};
        const reply_reader call(c);
        d.tool_calls.emplace_back(call.string("name"), call.string("arguments"));
      }
    }
    return d;
  }
  if (type == "health") return health_reply{id, r.string("status"), r.integer("active"), r.integer("queued")};
  if (type == "tokens") return tokens_reply{id, r.tokens("tokens")};
  if (type == "text") return text_reply{id, r.string("text")};
  if (type == "slot") return slot_reply{id, r.string("action"), r.integer("slot"), r.integer("n_tokens"), r.integer("n_bytes"), r.number("ms")};
  if (type == "model_info") {
    const auto m = r.object("model");
    model_facts f{m.string("path"), m.string("architecture"), m.string("activation"), m.string("mode"), m.integer("n_vocab"), m.integer("n_ctx"),
                  m.integer("n_layer"), m.integer("n_embd"), m.integer("n_ff"), static_cast<int32_t>(m.integer("bos")), static_cast<int32_t>(m.integer("eos"))};
    return model_info_reply{id, f};
  }
  throw std::out_of_range(type);
}

}  // namespace

std::string_view reply_type(const reply& r) { return std::visit(reply_names{}, r); }

const std::string& reply_id(const reply& r) {
  return std::visit([](const auto& x) -> const std::string& {
    if constexpr (std::is_same_v<std::decay_t<decltype(x)>, error_reply>) return x.error.id;
    else return x.id;
  }, r);
}

std::string encode_reply(const reply& r) { return std::visit(reply_encoder{}, r); }

std::variant<reply, protocol_error> decode_reply(std::string_view frame) {
  json j = json::parse(frame.begin(), frame.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return protocol_error{error_code::bad_frame, "the reply is not a JSON object", ""};
  std::string id;
  if (auto it = j.find("id"); it != j.end() && it->is_string()) id = it->get<std::string>();
  auto v = j.find("v");
  if (v == j.end() || !v->is_number_integer() || v->get<int64_t>() != protocol_version)
    return protocol_error{error_code::unsupported_version, "the reply's \"v\" is not " + std::to_string(protocol_version), id};
  auto t = j.find("type");
  if (t == j.end() || !t->is_string()) return protocol_error{error_code::unknown_type, "the reply has no \"type\"", id};
  const std::string type = t->get<std::string>();
  try {
    return read_reply(type, reply_reader(j));
  } catch (const bad_reply& e) {
    return protocol_error{error_code::invalid_field, "a " + type + " reply: " + e.message, id};
  } catch (const std::out_of_range&) {
    return protocol_error{error_code::unknown_type, "unknown reply type \"" + type.substr(0, 32) + "\"", id};
  } catch (const std::invalid_argument& e) {  // unbase64
    return protocol_error{error_code::invalid_field, "a " + type + " reply: \"bytes\" is not base64", id};
  }
}

}  // namespace hotcold::protocol
