#include "server/openai_request.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "model/json_schema.hpp"

namespace hotcold::server {

const api_json* field(const api_json& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

namespace {

using json = api_json;

api_failure bad_field(std::string param, std::string message) { return {400, std::move(message), "invalid_request_error", "invalid_value", std::move(param)}; }


std::optional<double> number(const json& body, const char* name, double lo, double hi) {
  const json* f = field(body, name);
  if (!f) return std::nullopt;
  if (!f->is_number()) throw bad_field(name, fmt::format("'{}' must be a number", name));
  const double v = f->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi) throw bad_field(name, fmt::format("'{}' must be between {} and {}; it is {}", name, lo, hi, v));
  return v;
}

std::optional<int64_t> whole(const json& body, const char* name, int64_t lo, int64_t hi) {
  const json* f = field(body, name);
  if (!f) return std::nullopt;
  if (!f->is_number_integer()) throw bad_field(name, fmt::format("'{}' must be an integer", name));
  if (f->is_number_unsigned() && f->get<uint64_t>() > static_cast<uint64_t>(hi))
    throw bad_field(name, fmt::format("'{}' must be between {} and {}", name, lo, hi));
  const int64_t v = f->get<int64_t>();
  if (v < lo || v > hi) throw bad_field(name, fmt::format("'{}' must be between {} and {}; it is {}", name, lo, hi, v));
  return v;
}

bool flag(const json& body, const char* name) {
  const json* f = field(body, name);
  if (!f) return false;
  if (!f->is_boolean()) throw bad_field(name, fmt::format("'{}' must be true or false", name));
  return f->get<bool>();
}

api_failure unsupported(std::string param, std::string what) {
  return {400, fmt::format("{} is not supported by this server", what), "invalid_request_error", "unsupported_parameter", std::move(param)};
}



// The output's constraint: llama-server's `grammar` (GBNF) or `json_schema`, or OpenAI's
// `response_format` (json_object: any object, or llama-server's {"type":"json_object","schema":...};
// json_schema: {"json_schema": {"name", "schema", "strict"}}); at most one. Turned into GBNF and checked
// here, so that a bad one is a 400 naming its field.
std::string constraint(const json& body) {
  std::vector<std::string> given;
  for (const char* name : {"grammar", "json_schema", "response_format"})
    if (field(body, name)) given.push_back(name);
  if (given.size() > 1) throw bad_field(given[1], fmt::format("give one of 'grammar', 'json_schema' and 'response_format', not '{}' and '{}'", given[0], given[1]));
  if (given.empty()) return {};
  const std::string name = given[0];
  const json& f = body[name];
  std::string gbnf, schema;
  if (name == "grammar") {
    if (!f.is_string()) throw bad_field(name, "'grammar' must be a string of GBNF");
    gbnf = f.get<std::string>();
  } else if (name == "json_schema") {
    if (!f.is_object() && !f.is_boolean()) throw bad_field(name, "'json_schema' must be a JSON Schema (an object)");
    schema = f.dump();
  } else {
    if (!f.is_object() || !f.contains("type") || !f["type"].is_string()) throw bad_field(name, "'response_format' must be an object with a 'type'");
    const std::string type = f["type"].get<std::string>();
    if (type == "text") return {};
    if (type == "json_object") {
      schema = f.contains("schema") ? f["schema"].dump() : R"({"type":"object"})";
    } else if (type == "json_schema") {
      const json* js = field(f, "json_schema");
      if (!js || !js->is_object()) throw bad_field("response_format.json_schema", "'response_format' of type json_schema needs 'json_schema': {\"name\", \"schema\"}");
      const json* s = field(*js, "schema");
      if (!s) throw bad_field("response_format.json_schema.schema", "'response_format.json_schema' needs its 'schema'");
      if (const json* strict = field(*js, "strict"); strict && !strict->is_boolean()) throw bad_field("response_format.json_schema.strict", "'strict' must be true or false");
      schema = s->dump();
    } else {
      throw bad_field("response_format.type", fmt::format("'response_format' type '{}': text, json_object or json_schema", type));
    }
  }
  try {
    return checked_grammar(gbnf, schema);
  } catch (const std::invalid_argument& e) {
    throw bad_field(name, name == "grammar" ? std::string(e.what()) : fmt::format("{}: {}", name, e.what()));
  }
}

// A message's content: a string, or (the newer form) a list of parts of which only text is known here.
std::string content_text(const json& m, size_t i, const std::string& role) {
  const std::string param = fmt::format("messages[{}].content", i);
  auto it = m.find("content");
  if (it == m.end() || it->is_null()) {
    if (role == "assistant") return {};
    throw bad_field(param, fmt::format("messages[{}] ({}) has no content", i, role));
  }
  if (it->is_string()) return it->get<std::string>();
  if (!it->is_array()) throw bad_field(param, "a message's content must be a string or a list of text parts");
  std::string text;
  for (size_t k = 0; k < it->size(); ++k) {
    const json& part = (*it)[k];
    const std::string p = fmt::format("{}[{}]", param, k);
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) throw bad_field(p, "each content part must be an object with a 'type'");
    if (part["type"] != "text") throw unsupported(p, fmt::format("a content part of type '{}' (only text)", part["type"].get<std::string>()));
    if (!part.contains("text") || !part["text"].is_string()) throw bad_field(p, "a text part needs 'text', a string");
    text += part["text"].get<std::string>();
  }
  return text;
}

// What the two completion routes share: the sampling fields, stop, stream, n and the fields the API
// has that this server does not do.
void common_fields(const json& body, completion_request& r, const openai_setup& s) {
  if (auto n = whole(body, "n", 1, 16)) r.n = static_cast<int32_t>(*n);
  protocol::sampling& p = r.sampling;
  if (auto t = number(body, "temperature", 0, 2)) p.temperature = *t;
  if (auto t = number(body, "top_p", 0, 1)) p.top_p = *t;
  if (auto f = number(body, "frequency_penalty", -2, 2)) p.frequency_penalty = *f;
  if (auto f = number(body, "presence_penalty", -2, 2)) p.presence_penalty = *f;
  // llama.cpp's server takes these too; hotcold's sampler has them.
  if (auto k = whole(body, "top_k", -1, 1 << 30)) p.top_k = static_cast<int32_t>(*k);
  if (auto m = number(body, "min_p", 0, 1)) p.min_p = *m;
  if (auto t = number(body, "repeat_penalty", 0, 100)) p.repeat_penalty = *t;
  if (auto n = whole(body, "repeat_last_n", -1, 1 << 20)) p.repeat_last_n = static_cast<int32_t>(*n);
  if (const json* seed = field(body, "seed")) {
    if (!seed->is_number_integer() || (!seed->is_number_unsigned() && seed->get<int64_t>() < 0))
      throw bad_field("seed", "'seed' must be a whole number 0..2^64-1");
    p.seed = seed->get<uint64_t>();
  }
  if (const json* stop = field(body, "stop")) {
    if (stop->is_string()) {
      r.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const auto& x : *stop) {
        if (!x.is_string()) throw bad_field("stop", "'stop' must be a string or a list of strings");
        r.stop.push_back(x.get<std::string>());
      }
    } else {
      throw bad_field("stop", "'stop' must be a string or a list of strings");
    }
    if (r.stop.size() > 4) throw bad_field("stop", fmt::format("'stop' has {} strings; at most 4", r.stop.size()));
    for (const auto& x : r.stop)
      if (x.empty() || x.size() > 256) throw bad_field("stop", "each stop string must be 1..256 bytes");
  }
  r.grammar = constraint(body);
  if (auto n = whole(body, "n_probs", 0, 20); n && *n > 0) r.logprobs = true, r.n_probs = std::max(r.n_probs, static_cast<int32_t>(*n));  // llama-server's
  r.stream = flag(body, "stream");
  r.ignore_eos = flag(body, "ignore_eos");
  r.cache_prompt = field(body, "cache_prompt") ? flag(body, "cache_prompt") : true;
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) throw bad_field("stream_options", "'stream_options' must be an object");
    r.include_usage = r.stream && flag(*so, "include_usage");
  }
  if (const json* lb = field(body, "logit_bias"); lb && !(lb->is_object() && lb->empty())) throw unsupported("logit_bias", "'logit_bias'");
  const int64_t max_allowed = s.max_tokens;
  for (const char* name : {"max_tokens", "max_completion_tokens"}) {
    const json* f = field(body, name);
    if (f && f->is_number_integer() && (f->is_number_unsigned() ? f->get<uint64_t>() > static_cast<uint64_t>(max_allowed) : f->get<int64_t>() > max_allowed))
      throw bad_field(name, fmt::format("'{}' is {}; this server generates at most {} tokens a request (serve --max-tokens)", name, f->dump(), max_allowed));
    if (auto m = whole(body, name, r.echo ? 0 : 1, max_allowed)) r.n_predict = *m;  // (0 with echo: the prompt's log probabilities alone)
  }
}

// An assistant message's tool_calls: [{"id", "type": "function", "function": {"name", "arguments"}}],
// the arguments a JSON object (as the API sends it, a string holding one).
std::vector<tool_call> calls_of(const json& calls, size_t i) {
  const std::string where = fmt::format("messages[{}].tool_calls", i);
  if (!calls.is_array()) throw bad_field(where, "'tool_calls' must be a list of calls");
  std::vector<tool_call> out;
  for (const auto& c : calls) {
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object() || !c["function"].contains("name") || !c["function"]["name"].is_string())
      throw bad_field(where, "each call is {\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}}");
    const json& f = c["function"];
    const auto args = arguments_object(f.contains("arguments") ? f["arguments"] : json::object());
    if (!args) throw bad_field(where, "a call's arguments must be a JSON object (or a string holding one)");
    const auto id = c.find("id");  // (Mistral's templates write it)
    out.push_back({f["name"].get<std::string>(), args->dump(-1, ' ', false, json::error_handler_t::replace), id != c.end() && id->is_string() ? id->get<std::string>() : ""});
  }
  return out;
}

completion_request parse_chat(const json& body, const openai_setup& s) {
  completion_request r;
  r.chat = true;
  r.logprobs = flag(body, "logprobs");
  if (auto n = whole(body, "top_logprobs", 0, 20)) {
    if (!r.logprobs) throw bad_field("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    r.n_probs = static_cast<int32_t>(*n);
  }
  for (const char* name : {"functions", "function_call"})
    if (field(body, name)) throw unsupported(name, fmt::format("'{}' (the API's older form of tools: send tools and tool_choice)", name));
  try {
    r.tools = tools_of(body);
    if (s.chat) r.tools.format = tool_format_of(*s.chat);
    if (r.tools.format == tool_format::llama31) r.tools.parallel = false;  // (one call a message)
  } catch (const std::invalid_argument& e) {
    const std::string why = e.what();
    throw bad_field(why.substr(0, why.find_first_of(":[.")), why);
  }
  common_fields(body, r, s);
  if (r.tools.active()) {
    if (!r.grammar.empty()) throw bad_field("tools", "tools together with 'grammar', 'json_schema' or 'response_format' are not taken");
    if (s.chat && !s.chat->has_tools())
      throw bad_field("tools", fmt::format("the chat template '{}' has no tools (a model whose template has them, or serve --chat-template qwen2.5)", s.chat->name()));
    if (r.tools.choice != "auto") r.grammar = checked_grammar(call_grammar(r.tools), "");  // a well-formed call, whatever the model would say
  }
  const json* ms = field(body, "messages");
  if (!ms) throw api_failure{400, "'messages' is required", "invalid_request_error", "missing_required_parameter", "messages"};
  if (!ms->is_array() || ms->empty()) throw bad_field("messages", "'messages' must be a non-empty list of messages");
  std::vector<chat_message> conversation;
  for (size_t i = 0; i < ms->size(); ++i) {
    const json& m = (*ms)[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) throw bad_field(fmt::format("messages[{}]", i), "each message must be an object with a 'role'");
    std::string role = m["role"].get<std::string>();
    if (role == "developer") role = "system";  // the API's newer name for it
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      throw bad_field(fmt::format("messages[{}].role", i), fmt::format("role '{}' is not supported here (system, developer, user, assistant, tool)", role));
    chat_message msg{role, content_text(m, i, role)};
    if (const json* calls = field(m, "tool_calls"); calls && role == "assistant") msg.tool_calls = calls_of(*calls, i);
    if (const json* id = field(m, "tool_call_id"); id && role == "tool") {
      if (!id->is_string()) throw bad_field(fmt::format("messages[{}].tool_call_id", i), "'tool_call_id' must be a string");
      msg.tool_call_id = id->get<std::string>();
    }
    conversation.push_back(std::move(msg));
  }
  if (!s.chat) throw api_failure{400, s.chat_problem, "invalid_request_error", "chat_template", ""};
  try {
    std::vector<std::string> offered;
    if (r.tools.active())
      for (const auto& t : r.tools.tools) offered.push_back(t.tool);
    r.tokens = s.chat->tokenize(*s.v, conversation, true, offered);
  } catch (const chat_template_error& e) {
    throw bad_field("messages", e.what());
  }
  return r;
}

completion_request parse_completion(const json& body, const openai_setup& s) {
  completion_request r;
  r.chat = false;
  r.n_predict = 16;  // the API's default for this route
  if (auto n = whole(body, "logprobs", 0, 20)) r.logprobs = true, r.n_probs = static_cast<int32_t>(*n);
  r.echo = flag(body, "echo");
  if (const json* sf = field(body, "suffix"); sf && !(sf->is_string() && sf->get<std::string>().empty())) throw unsupported("suffix", "'suffix'");
  if (auto b = whole(body, "best_of", 1, 128); b && *b != 1) throw unsupported("best_of", "'best_of' above 1");
  common_fields(body, r, s);
  const json* p = field(body, "prompt");
  if (!p) throw api_failure{400, "'prompt' is required", "invalid_request_error", "missing_required_parameter", "prompt"};
  // A string, a list of token ids, or a list of one of either (several prompts at once: one request each).
  const json* one = p;
  if (p->is_array() && !p->empty() && (p->front().is_string() || p->front().is_array())) {
    if (p->size() != 1) throw unsupported("prompt", "more than one prompt a request");
    one = &p->front();
  }
  if (one->is_string()) {
    r.tokens = s.v->tokenize(one->get<std::string>(), true, false);
  } else if (one->is_array() && !one->empty()) {
    for (const auto& t : *one) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || static_cast<uint64_t>(t.get<int64_t>()) >= s.v->size())
        throw bad_field("prompt", fmt::format("a prompt of token ids needs whole numbers 0..{}", s.v->size() - 1));
      r.tokens.push_back(static_cast<token_id>(t.get<int64_t>()));
    }
  } else {
    throw bad_field("prompt", "'prompt' must be a string or a list of token ids");
  }
  return r;
}

// Every field a body may have (docs/openai-api.md's table): what this server does, and the few it takes
// and sets aside because they change nothing in what is generated. Anything else is refused by name,
// so that no field a client relies on is silently ignored.
const std::set<std::string> common_names = {"model", "stream", "stream_options", "max_tokens", "max_completion_tokens", "temperature", "top_p", "frequency_penalty",
                                            "presence_penalty", "top_k", "min_p", "repeat_penalty", "repeat_last_n", "seed", "stop", "n", "cache_prompt",
                                            "logit_bias", "grammar", "json_schema", "response_format", "n_probs", "ignore_eos", "logprobs"};
const std::set<std::string> chat_names = {"messages", "top_logprobs", "tools", "functions", "tool_choice", "function_call", "parallel_tool_calls"};
const std::set<std::string> completion_names = {"prompt", "echo", "suffix", "best_of"};
// Taken and set aside: who calls (user; OpenAI's abuse checks), labels (metadata), OpenAI's storage and
// billing (store, service_tier), a speed hint that changes no token (prediction).
const std::set<std::string> set_aside = {"user", "metadata", "store", "service_tier", "prediction"};
// llama.cpp's samplers hotcold's chain does not have: taken at the value that switches them off.
const std::vector<std::pair<const char*, double>> neutral = {{"typical_p", 1}, {"tfs_z", 1}, {"mirostat", 0}, {"dry_multiplier", 0}, {"xtc_probability", 0}, {"top_n_sigma", -1}};

void check_names(const json& body, bool chat) {
  for (const auto& [k, v] : body.items()) {
    if (common_names.count(k) || set_aside.count(k) || (chat ? chat_names : completion_names).count(k)) continue;
    const auto off = std::find_if(neutral.begin(), neutral.end(), [&](const auto& n) { return k == n.first; });
    if (off != neutral.end()) {
      if (v.is_null() || (v.is_number() && v.get<double>() == off->second)) continue;
      throw unsupported(k, fmt::format("'{}' other than {} (llama.cpp's sampler; hotcold's chain has temperature, top_k, top_p, min_p and the penalties)", k, off->second));
    }
    if ((chat ? completion_names : chat_names).count(k)) throw unsupported(k, fmt::format("'{}' on {}", k, chat ? "/v1/chat/completions (it is a field of /v1/completions)" : "/v1/completions (it is a field of /v1/chat/completions)"));
    throw unsupported(k, fmt::format("the field '{}'", k));
  }
}

}  // namespace

chat_request chat_of(const std::string& messages, const std::string& tools, const std::string& tool_choice, const openai_setup& s) {
  api_json body{{"messages", api_json::parse(messages, nullptr, false)}};
  if (!tools.empty()) body["tools"] = api_json::parse(tools, nullptr, false);
  if (tool_choice == "auto" || tool_choice == "none" || tool_choice == "required") body["tool_choice"] = tool_choice;
  else if (!tool_choice.empty()) body["tool_choice"] = {{"type", "function"}, {"function", {{"name", tool_choice}}}};
  try {
    completion_request r = parse_chat(body, s);
    return {std::move(r.tokens), std::move(r.tools), std::move(r.grammar)};
  } catch (const api_failure& f) {
    throw std::invalid_argument(f.param.empty() ? f.message : fmt::format("{}: {}", f.param, f.message));
  }
}

completion_request parse_request(const api_json& body, bool chat, const openai_setup& s) {
  check_names(body, chat);
  return chat ? parse_chat(body, s) : parse_completion(body, s);
}

}  // namespace hotcold::server
