#include "protocol/messages.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>


namespace hotcold::protocol {

using json = nlohmann::json;

std::optional<error_code> error_code_from_name(std::string_view name) {
  for (auto c : {error_code::bad_frame, error_code::unsupported_version, error_code::unknown_type, error_code::invalid_field, error_code::too_large,
                 error_code::busy, error_code::not_found, error_code::duplicate_id, error_code::shutting_down, error_code::internal})
    if (error_code_name(c) == name) return c;
  return std::nullopt;
}

std::string_view error_code_name(error_code c) {
  switch (c) {
    case error_code::bad_frame: return "bad_frame";
    case error_code::unsupported_version: return "unsupported_version";
    case error_code::unknown_type: return "unknown_type";
    case error_code::invalid_field: return "invalid_field";
    case error_code::too_large: return "too_large";
    case error_code::busy: return "busy";
    case error_code::not_found: return "not_found";
    case error_code::duplicate_id: return "duplicate_id";
    case error_code::shutting_down: return "shutting_down";
    case error_code::internal: return "internal";
  }
  return "internal";
}

namespace {

// The frame's own fields nest two levels, a generate's json_schema as deep as its schema; anything
// deeper is refused before parsing.
constexpr int max_depth = 64;

// Deepest nesting of arrays and objects outside strings (a bound checked before the parser sees it).
int nesting(std::string_view s) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : s) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') deepest = std::max(deepest, ++depth);
    else if (c == ']' || c == '}') --depth;
    if (deepest > max_depth) return deepest;
  }
  return deepest;
}

struct field_error {
  error_code code;
  std::string message;
};

// Reads the fields of one request object, each at most once, and refuses any it does not know.
class reader {
 public:
  reader(const json& j, const limits& l) : j_(j), l_(l) {}

  std::string id() {
    const json* v = take("id");
    if (!v) throw field_error{error_code::invalid_field, "\"id\" is required (a string)"};
    if (!v->is_string()) throw field_error{error_code::invalid_field, "\"id\" must be a string"};
    const auto& s = v->get_ref<const std::string&>();
    if (s.empty() || s.size() > l_.max_id_bytes)
      throw field_error{error_code::invalid_field, "\"id\" must have 1 to " + std::to_string(l_.max_id_bytes) + " bytes"};
    return s;
  }
  std::optional<std::string> string(const char* name, size_t max_bytes) {
    const json* v = take(name);
    if (!v) return std::nullopt;
    if (!v->is_string()) throw field_error{error_code::invalid_field, std::string("\"") + name + "\" must be a string"};
    if (v->get_ref<const std::string&>().size() > max_bytes)
      throw field_error{error_code::too_large, std::string("\"") + name + "\" has more than " + std::to_string(max_bytes) + " bytes"};
    return v->get<std::string>();
  }
  bool boolean(const char* name, bool fallback) {
    const json* v = take(name);
    if (!v) return fallback;
    if (!v->is_boolean()) throw field_error{error_code::invalid_field, std::string("\"") + name + "\" must be true or false"};
    return v->get<bool>();
  }
  double number(const char* name, double fallback, double lo, double hi) {
    const json* v = take(name);
    if (!v) return fallback;
    if (!v->is_number()) throw field_error{error_code::invalid_field, std::string("\"") + name + "\" must be a number"};
    const double x = v->get<double>();
    if (!std::isfinite(x) || x < lo || x > hi) throw out_of_range(name, lo, hi);
    return x;
  }
  // `over`, when given, says why a value above hi is refused (the limit and what sets it).
  int64_t integer(const char* name, int64_t fallback, int64_t lo, int64_t hi, const std::string& over = {}) {
    const json* v = take(name);
    if (!v) return fallback;
    if (!v->is_number_integer()) throw field_error{error_code::invalid_field, std::string("\"") + name + "\" must be an integer"};
    const bool above = v->is_number_unsigned() ? v->get<uint64_t>() > static_cast<uint64_t>(hi) : v->get<int64_t>() > hi;
    if (above && !over.empty()) throw field_error{error_code::invalid_field, std::string("\"") + name + "\" is " + v->dump() + "; " + over};
    if (above || (!v->is_number_unsigned() && v->get<int64_t>() < lo)) throw out_of_range(name, static_cast<double>(lo), static_cast<double>(hi));
    return v->is_number_unsigned() ? static_cast<int64_t>(v->get<uint64_t>()) : v->get<int64_t>();
  }
  std::optional<uint64_t> seed() {
    const json* v = take("seed");
    if (!v) return std::nullopt;
    if (!v->is_number_unsigned() && !(v->is_number_integer() && v->get<int64_t>() >= 0))
      throw field_error{error_code::invalid_field, "\"seed\" must be an integer from 0 to 2^64-1"};
    return v->get<uint64_t>();
  }
  std::optional<std::vector<int32_t>> tokens(const char* name) {
    const json* v = take(name);
    if (!v) return std::nullopt;
    if (!v->is_array()) throw field_error{error_code::invalid_field, std::string("\"") + name + "\" must be an array of token ids"};
    if (v->size() > l_.max_tokens_in)
      throw field_error{error_code::too_large, std::string("\"") + name + "\" has more than " + std::to_string(l_.max_tokens_in) + " tokens"};
    std::vector<int32_t> out;
    out.reserve(v->size());
    for (const auto& t : *v) {
      if (!t.is_number_integer() || (t.is_number_unsigned() ? t.get<uint64_t>() > INT32_MAX : t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX))
        throw field_error{error_code::invalid_field, std::string("\"") + name + "\" must hold token ids (integers from 0)"};
      out.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    return out;
  }
  std::vector<std::string> strings(const char* name, size_t max_count, size_t max_bytes) {
    const json* v = take(name);
    if (!v) return {};
    if (!v->is_array()) throw field_error{error_code::invalid_field, std::string("\"") + name + "\" must be an array of strings"};
    if (v->size() > max_count)
      throw field_error{error_code::too_large, std::string("\"") + name + "\" has more than " + std::to_string(max_count) + " entries"};
    std::vector<std::string> out;
    for (const auto& s : *v) {
      if (!s.is_string() || s.get_ref<const std::string&>().empty())
        throw field_error{error_code::invalid_field, std::string("\"") + name + "\" must hold non-empty strings"};
      if (s.get_ref<const std::string&>().size() > max_bytes)
        throw field_error{error_code::too_large, std::string("an entry of \"") + name + "\" has more than " + std::to_string(max_bytes) + " bytes"};
      out.push_back(s.get<std::string>());
    }
    return out;
  }
  const json* array(const char* name) {
    const json* v = take(name);
    if (v && !v->is_array()) throw field_error{error_code::invalid_field, std::string("\"") + name + "\" must be an array"};
    return v;
  }
  const json* object(const char* name) {
    const json* v = take(name);
    if (v && !v->is_object()) throw field_error{error_code::invalid_field, std::string("\"") + name + "\" must be an object"};
    return v;
  }
  // Every field read: anything left is unknown (a typo the client would want to hear about).
  void done() const {
    for (const auto& [k, v] : j_.items())
      if (!seen_.count(k)) throw field_error{error_code::invalid_field, "unknown field \"" + k + "\""};
  }

 private:
  const json* take(const char* name) {
    auto it = j_.find(name);
    seen_.insert(name);
    return it == j_.end() ? nullptr : &*it;
  }
  static field_error out_of_range(const char* name, double lo, double hi) {
    json r = {lo, hi};
    return {error_code::invalid_field, std::string("\"") + name + "\" must be from " + r[0].dump() + " to " + r[1].dump()};
  }
  const json& j_;
  const limits& l_;
  std::set<std::string> seen_;
};

sampling read_sampling(reader& top, const limits& l) {
  sampling s;
  const json* obj = top.object("sampling");
  if (!obj) return s;
  reader r(*obj, l);
  // Types and finiteness here; meanings and ranges in check_sampling, shared with the command line.
  constexpr double any = std::numeric_limits<double>::max();
  s.temperature = r.number("temperature", s.temperature, -any, any);
  s.top_k = static_cast<int32_t>(r.integer("top_k", s.top_k, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()));
  s.top_p = r.number("top_p", s.top_p, -any, any);
  s.min_p = r.number("min_p", s.min_p, -any, any);
  s.repeat_penalty = r.number("repeat_penalty", s.repeat_penalty, -any, any);
  s.repeat_last_n = static_cast<int32_t>(r.integer("repeat_last_n", s.repeat_last_n, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()));
  s.frequency_penalty = r.number("frequency_penalty", s.frequency_penalty, -any, any);
  s.presence_penalty = r.number("presence_penalty", s.presence_penalty, -any, any);
  s.seed = r.seed();
  r.done();
  try {
    check_sampling(s);
  } catch (const std::invalid_argument& e) {
    throw field_error{error_code::invalid_field, e.what()};
  }
  return s;
}

}  // namespace

void check_sampling(const sampling& s) {
  auto g = [](double x) {  // short: 1e+308, not 309 digits
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", x);
    return std::string(buf);
  };
  auto in = [&](const char* name, double x, double lo, double hi) {
    if (!std::isfinite(x) || x < lo || x > hi)
      throw std::invalid_argument(std::string("\"") + name + "\" must be a finite number from " + g(lo) + " to " + g(hi) + " (it is " + g(x) + ")");
  };
  auto finite = [&](const char* name, double x) {
    if (!std::isfinite(x)) throw std::invalid_argument(std::string("\"") + name + "\" must be a finite number (it is " + g(x) + ")");
  };
  finite("temperature", s.temperature);
  if (s.temperature > 100) throw std::invalid_argument("\"temperature\" must be at most 100 (<= 0: greedy); it is " + g(s.temperature));
  finite("top_p", s.top_p);
  in("min_p", s.min_p, 0, 1);
  in("repeat_penalty", s.repeat_penalty, 0, 100);
  if (s.repeat_last_n < -1 || s.repeat_last_n > (1 << 20))
    throw std::invalid_argument("\"repeat_last_n\" must be from -1 (the whole context) to " + std::to_string(1 << 20) + "; it is " +
                                std::to_string(s.repeat_last_n));
  in("frequency_penalty", s.frequency_penalty, -100, 100);
  in("presence_penalty", s.presence_penalty, -100, 100);
}

std::variant<request, protocol_error> decode_request(std::string_view frame, const limits& l) {
  if (frame.size() > l.max_frame_bytes)
    return protocol_error{error_code::too_large, "the frame has " + std::to_string(frame.size()) + " bytes, more than " + std::to_string(l.max_frame_bytes), ""};
  if (nesting(frame) > max_depth) return protocol_error{error_code::bad_frame, "the frame nests deeper than " + std::to_string(max_depth) + " levels", ""};
  json j = json::parse(frame.begin(), frame.end(), nullptr, false);
  if (j.is_discarded()) return protocol_error{error_code::bad_frame, "the frame is not valid JSON (UTF-8 text, one object)", ""};
  if (!j.is_object()) return protocol_error{error_code::bad_frame, "the frame must be a JSON object", ""};
  // The id first, so that every later error can name the request.
  std::string id;
  if (auto it = j.find("id"); it != j.end() && it->is_string() && !it->get_ref<const std::string&>().empty() &&
                              it->get_ref<const std::string&>().size() <= l.max_id_bytes)
    id = it->get<std::string>();
  auto v = j.find("v");
  if (v == j.end() || !v->is_number_integer() || v->get<int64_t>() != protocol_version)
    return protocol_error{error_code::unsupported_version, "\"v\" must be " + std::to_string(protocol_version) + " (this server's protocol version)", id};
  auto t = j.find("type");
  if (t == j.end() || !t->is_string())
    return protocol_error{error_code::unknown_type, "\"type\" is required: generate, cancel, health, model_info, tokenize, detokenize or slot", id};
  const std::string type = t->get<std::string>();
  try {
    reader r(j, l);
    r.integer("v", 1, 1, 1);
    r.string("type", 32);
    request out;
    if (type == "generate") {
      generate_request g;
      g.id = r.id();
      g.prompt = r.string("prompt", l.max_prompt_bytes);
      auto tokens = r.tokens("tokens");
      if (const json* messages = r.array("messages")) g.messages = messages->dump();
      if (static_cast<int>(g.prompt.has_value()) + static_cast<int>(tokens.has_value()) + static_cast<int>(!g.messages.empty()) != 1)
        throw field_error{error_code::invalid_field, "give exactly one of \"prompt\" (text), \"tokens\" (ids) or \"messages\" (a conversation)"};
      if (const json* tools = r.array("tools")) g.tools = tools->dump();
      g.tool_choice = r.string("tool_choice", 128).value_or("");
      if ((!g.tools.empty() || !g.tool_choice.empty()) && g.messages.empty())
        throw field_error{error_code::invalid_field, "\"tools\" and \"tool_choice\" go with \"messages\""};
      if (tokens) {
        if (tokens->empty()) throw field_error{error_code::invalid_field, "\"tokens\" is empty"};
        g.tokens = std::move(*tokens);
      }
      // -1: as many as the server allows, until the end of the text or a full context (llama.cpp's -n -1).
      g.n_predict = static_cast<int32_t>(r.integer("n_predict", g.n_predict, -1, l.max_n_predict,
                                                   "this server generates at most " + std::to_string(l.max_n_predict) + " tokens a request" +
                                                       (l.max_n_predict_flag.empty() ? "" : " (" + l.max_n_predict_flag + ")")));
      g.params = read_sampling(r, l);
      g.stop = r.strings("stop", l.max_stop, l.max_stop_bytes);
      g.stream = r.boolean("stream", g.stream);
      g.parse_special = r.boolean("parse_special", g.parse_special);
      g.cache_prompt = r.boolean("cache_prompt", g.cache_prompt);
      g.grammar = r.string("grammar", l.max_prompt_bytes).value_or("");
      if (const json* schema = r.object("json_schema")) g.json_schema = schema->dump();
      if (!g.grammar.empty() && !g.json_schema.empty()) throw field_error{error_code::invalid_field, "give one of \"grammar\" and \"json_schema\", not both"};
      g.n_probs = static_cast<int32_t>(r.integer("n_probs", 0, 0, 20));
      g.logprobs = r.boolean("logprobs", false) || g.n_probs > 0;
      g.prompt_logprobs = r.boolean("prompt_logprobs", false);
      g.ignore_eos = r.boolean("ignore_eos", false);
      out = std::move(g);
    } else if (type == "cancel") {
      out = cancel_request{r.id()};
    } else if (type == "health") {
      out = health_request{r.id()};
    } else if (type == "model_info") {
      out = model_info_request{r.id()};
    } else if (type == "tokenize") {
      tokenize_request k;
      k.id = r.id();
      auto text = r.string("text", l.max_prompt_bytes);
      if (!text) throw field_error{error_code::invalid_field, "\"text\" is required"};
      k.text = std::move(*text);
      k.add_special = r.boolean("add_special", false);
      k.parse_special = r.boolean("parse_special", false);
      out = std::move(k);
    } else if (type == "detokenize") {
      detokenize_request k;
      k.id = r.id();
      auto tokens = r.tokens("tokens");
      if (!tokens) throw field_error{error_code::invalid_field, "\"tokens\" is required"};
      k.tokens = std::move(*tokens);
      out = std::move(k);
    } else if (type == "slot") {
      slot_request k;
      k.id = r.id();
      auto action = r.string("action", 16);  // (which ones the server does, it says: save, restore, erase)
      if (!action) throw field_error{error_code::invalid_field, "\"action\" is required: save, restore or erase"};
      k.action = std::move(*action);
      k.slot = r.integer("slot", 0, 0, 1 << 20);
      k.filename = r.string("filename", 255).value_or("");
      if (k.action != "erase" && k.filename.empty()) throw field_error{error_code::invalid_field, "\"filename\" is required to " + k.action};
      out = std::move(k);
    } else {
      return protocol_error{error_code::unknown_type, "unknown \"type\" \"" + type.substr(0, 32) + "\": generate, cancel, health, model_info, tokenize, detokenize or slot", id};
    }
    r.done();
    return out;
  } catch (const field_error& e) {
    return protocol_error{e.code, e.message, id};
  } catch (const json::exception& e) {  // not expected: the reader checks types first
    return protocol_error{error_code::invalid_field, e.what(), id};
  }
}

const std::string& request_id(const request& r) {
  return std::visit([](const auto& x) -> const std::string& { return x.id; }, r);
}

std::string_view request_type(const request& r) {
  struct names {
    std::string_view operator()(const generate_request&) const { return "generate"; }
    std::string_view operator()(const cancel_request&) const { return "cancel"; }
    std::string_view operator()(const health_request&) const { return "health"; }
    std::string_view operator()(const model_info_request&) const { return "model_info"; }
    std::string_view operator()(const tokenize_request&) const { return "tokenize"; }
    std::string_view operator()(const detokenize_request&) const { return "detokenize"; }
    std::string_view operator()(const slot_request&) const { return "slot"; }
  };
  return std::visit(names{}, r);
}

json generate_body(const generate_request& g) {
  json j{{"n_predict", g.n_predict}, {"stop", g.stop}, {"stream", g.stream}, {"parse_special", g.parse_special}, {"cache_prompt", g.cache_prompt}};
  if (g.prompt) j["prompt"] = *g.prompt;
  else if (!g.messages.empty()) j["messages"] = json::parse(g.messages, nullptr, false);
  else j["tokens"] = g.tokens;
  if (!g.tools.empty()) j["tools"] = json::parse(g.tools, nullptr, false);
  if (!g.tool_choice.empty()) j["tool_choice"] = g.tool_choice;
  const sampling& s = g.params;
  j["sampling"] = {{"temperature", s.temperature}, {"top_k", s.top_k}, {"top_p", s.top_p}, {"min_p", s.min_p}, {"repeat_penalty", s.repeat_penalty},
                   {"repeat_last_n", s.repeat_last_n}, {"frequency_penalty", s.frequency_penalty}, {"presence_penalty", s.presence_penalty}};
  if (s.seed) j["sampling"]["seed"] = *s.seed;
  if (!g.grammar.empty()) j["grammar"] = g.grammar;
  if (!g.json_schema.empty()) j["json_schema"] = json::parse(g.json_schema, nullptr, false);
  if (g.logprobs) j["logprobs"] = true;
  if (g.n_probs > 0) j["n_probs"] = g.n_probs;
  if (g.prompt_logprobs) j["prompt_logprobs"] = true;
  if (g.ignore_eos) j["ignore_eos"] = true;
  return j;
}

std::string encode_request(const request& r) {
  json j = std::holds_alternative<generate_request>(r) ? generate_body(std::get<generate_request>(r)) : json::object();
  j["v"] = protocol_version;
  j["type"] = std::string(request_type(r));
  j["id"] = request_id(r);
  if (const auto* k = std::get_if<tokenize_request>(&r)) j.update({{"text", k->text}, {"add_special", k->add_special}, {"parse_special", k->parse_special}});
  if (const auto* d = std::get_if<detokenize_request>(&r)) j["tokens"] = d->tokens;
  if (const auto* s = std::get_if<slot_request>(&r)) {
    j.update({{"action", s->action}, {"slot", s->slot}});
    if (!s->filename.empty()) j["filename"] = s->filename;
  }
  // Prompts and texts are the client's bytes: what is not UTF-8 goes as U+FFFD (the server refuses such frames).
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace hotcold::protocol
