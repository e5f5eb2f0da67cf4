#include "server/openai_api.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "model/json_schema.hpp"
#include "protocol/messages.hpp"
#include "protocol/text_file.hpp"

namespace hotcold::server {
namespace {

using json = nlohmann::ordered_json;  // fields in the order the API documents them

// A request the API refuses: the status and the error object's fields.
struct api_failure {
  int status;
  std::string message, type, code, param;
};

api_failure bad_field(std::string param, std::string message) { return {400, std::move(message), "invalid_request_error", "invalid_value", std::move(param)}; }

std::string dumped(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// The field, or nullptr when it is absent or null (the API treats both as "not given").
const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

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

// The API's usage object for a request that ended; OpenAI's prompt_tokens_details.cached_tokens: the
// prompt's tokens reused from the cache.
json usage_of(const protocol::done_reply& d) {
  return {{"prompt_tokens", d.prompt_tokens},
          {"completion_tokens", d.generated_tokens},
          {"total_tokens", d.prompt_tokens + d.generated_tokens},
          {"prompt_tokens_details", {{"cached_tokens", d.cached_tokens}}}};
}

// A completion request as the scheduler takes it.
struct completion_request {
  bool chat = true, stream = false, include_usage = false;
  bool cache_prompt = true;  // llama-server's field: reuse the cached rows of the prompt's beginning
  std::vector<token_id> tokens;
  int64_t n_predict = 0;
  protocol::sampling sampling;  // what the API does not give: hotcold run's defaults
  std::vector<std::string> stop;
  std::string grammar;  // GBNF the output follows (from grammar, json_schema or response_format), checked
};

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
  if (auto n = whole(body, "n", 1, 128); n && *n != 1) throw unsupported("n", "'n' above 1 (one choice per request; send several requests)");
  protocol::sampling& p = r.sampling;
  if (auto t = number(body, "temperature", 0, 2)) p.temperature = *t;
  if (auto t = number(body, "top_p", 0, 1)) p.top_p = *t;
  if (auto f = number(body, "frequency_penalty", -2, 2)) p.frequency_penalty = *f;
  if (auto f = number(body, "presence_penalty", -2, 2)) p.presence_penalty = *f;
  // llama.cpp's server takes these too; hotcold's sampler has them.
  if (auto k = whole(body, "top_k", -1, 1 << 30)) p.top_k = static_cast<int32_t>(*k);
  if (auto m = number(body, "min_p", 0, 1)) p.min_p = *m;
  if (auto t = number(body, "repeat_penalty", 0, 100)) p.repeat_penalty = *t;
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
  r.stream = flag(body, "stream");
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
    if (auto m = whole(body, name, 1, max_allowed)) r.n_predict = *m;
  }
}

completion_request parse_chat(const json& body, const openai_setup& s) {
  completion_request r;
  r.chat = true;
  if (const json* lp = field(body, "logprobs"); lp && (!lp->is_boolean() || lp->get<bool>())) throw unsupported("logprobs", "'logprobs'");
  if (field(body, "top_logprobs")) throw unsupported("top_logprobs", "'top_logprobs'");
  for (const char* name : {"tools", "functions"})
    if (const json* t = field(body, name); t && !(t->is_array() && t->empty())) throw unsupported(name, "tool and function calling");
  for (const char* name : {"tool_choice", "function_call"})
    if (const json* t = field(body, name); t && !(t->is_string() && t->get<std::string>() == "none")) throw unsupported(name, "tool and function calling");
  common_fields(body, r, s);
  const json* ms = field(body, "messages");
  if (!ms) throw api_failure{400, "'messages' is required", "invalid_request_error", "missing_required_parameter", "messages"};
  if (!ms->is_array() || ms->empty()) throw bad_field("messages", "'messages' must be a non-empty list of messages");
  std::vector<chat_message> conversation;
  for (size_t i = 0; i < ms->size(); ++i) {
    const json& m = (*ms)[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) throw bad_field(fmt::format("messages[{}]", i), "each message must be an object with a 'role'");
    std::string role = m["role"].get<std::string>();
    if (role == "developer") role = "system";  // the API's newer name for it
    if (role != "system" && role != "user" && role != "assistant")
      throw bad_field(fmt::format("messages[{}].role", i), fmt::format("role '{}' is not supported here (system, developer, user, assistant)", role));
    conversation.push_back({role, content_text(m, i, role)});
  }
  if (!s.chat) throw api_failure{400, s.chat_problem, "invalid_request_error", "chat_template", ""};
  try {
    r.tokens = s.chat->tokenize(*s.v, conversation, true);
  } catch (const chat_template_error& e) {
    throw bad_field("messages", e.what());
  }
  return r;
}

completion_request parse_completion(const json& body, const openai_setup& s) {
  completion_request r;
  r.chat = false;
  r.n_predict = 16;  // the API's default for this route
  if (field(body, "logprobs")) throw unsupported("logprobs", "'logprobs'");
  if (flag(body, "echo")) throw unsupported("echo", "'echo'");
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

// How long a complete UTF-8 text `s` starts with: a character cut at the end waits for its next bytes.
size_t complete_utf8(std::string_view s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= std::min<size_t>(4, n); ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    return len > back ? n - back : n;
  }
  return n;
}

std::string random_id(const char* prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}{:016x}{:08x}", prefix, rng(), static_cast<uint32_t>(rng()));
}

int64_t unix_now() { return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count(); }

// The scheduler's finish, as the API names it (nullopt: the request failed).
std::optional<std::string> finish_reason(const std::string& finish) {
  if (finish == "length" || finish == "context") return "length";
  if (finish == "stop" || finish == "stop_string") return "stop";
  return std::nullopt;
}

// An error reply of the ZeroMQ protocol, as the API answers it.
api_failure from_protocol(const protocol::error_reply& e, bool chat) {
  const std::string& message = e.error.message;
  switch (e.error.code) {
    case protocol::error_code::busy: {
      api_failure f{429, message, "rate_limit_error", "queue_full", ""};
      f.param = std::to_string(std::max<int64_t>(1, (e.retry_after_ms.value_or(1000) + 999) / 1000));  // Retry-After, seconds
      return f;
    }
    case protocol::error_code::shutting_down: return {503, message, "server_error", "shutting_down", ""};
    case protocol::error_code::too_large: return {400, message, "invalid_request_error", "context_length_exceeded", chat ? "messages" : "prompt"};
    case protocol::error_code::invalid_field: return {400, message, "invalid_request_error", "invalid_value", ""};
    default: return {500, message, "server_error", std::string(protocol::error_code_name(e.error.code)), ""};
  }
}

http_reply failure_reply(const api_failure& f) {
  if (f.status == 429 || f.status == 503) {
    auto r = openai_api::error(f.status, f.message, f.type, f.code);
    r.headers.emplace_back("Retry-After", f.status == 429 && !f.param.empty() ? f.param : "5");
    return r;
  }
  return openai_api::error(f.status, f.message, f.type, f.code, f.param);
}

// A failure after a stream has begun: one event with the error object; the stream then ends.
std::string error_event(const api_failure& f) {
  return "data: " + dumped(json{{"error", {{"message", f.message}, {"type", f.type}, {"param", nullptr}, {"code", f.code}}}}) + "\n\n";
}

// Whether a Content-Type names JSON: application/json, with parameters (charset) or not, in any case.
bool json_media_type(std::string_view type) {
  std::string t = protocol::trim_blanks(std::string(type.substr(0, type.find(';'))));
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return t == "application/json";
}

// Who a request comes from, for the scheduler's shares of its queue: the key it was let in with
// (a digest: keys are not shown in /metrics), else its address.
std::string client_of(const http_request& req) {
  if (!req.key.empty()) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (unsigned char c : req.key) h = (h ^ c) * 1099511628211ull;
    return fmt::format("key:{:08x}", static_cast<uint32_t>(h ^ (h >> 32)));
  }
  return "http:" + (req.peer.empty() ? std::string("unknown") : req.peer);
}

// One completion: the request to the scheduler over the in-process endpoint, its tokens to the client
// (as Server-Sent Events, or in one reply at the end). The client going away cancels it.
void run_completion(const openai_setup& s, const json& body, bool chat, const std::string& client, http_exchange& ex) {
  completion_request r;
  try {
    r = chat ? parse_chat(body, s) : parse_completion(body, s);
    const int64_t room = s.n_ctx - static_cast<int64_t>(r.tokens.size());
    if (room <= 0)
      throw api_failure{400, fmt::format("the {} is {} tokens; the context holds {} (serve -c)", r.chat ? "conversation" : "prompt", r.tokens.size(), s.n_ctx),
                        "invalid_request_error", "context_length_exceeded", r.chat ? "messages" : "prompt"};
    if (r.chat && r.n_predict == 0) r.n_predict = std::min<int64_t>(room, s.max_tokens);
  } catch (const api_failure& f) {
    ex.reply(failure_reply(f));
    return;
  }
  const std::string model = body.value("model", s.model_id);
  zmq::socket_t sock(*s.zmq, zmq::socket_type::dealer);
  sock.set(zmq::sockopt::linger, 0);
  // No bound on the replies waiting here: the server's own per-client byte limit is the bound, and a
  // client that stops reading is dropped by the send deadline, its sequence cancelled.
  sock.set(zmq::sockopt::rcvhwm, 0);
  // The scheduler shares its queue among clients by the part of this identity before its last '|'.
  sock.set(zmq::sockopt::routing_id, fmt::format("{}|{}", client, random_id("")));
  sock.connect(s.endpoint);
  protocol::generate_request g;
  g.id = "http";
  g.tokens.assign(r.tokens.begin(), r.tokens.end());
  g.n_predict = static_cast<int32_t>(r.n_predict);
  g.params = r.sampling;
  g.stop = r.stop;
  g.cache_prompt = r.cache_prompt;
  g.grammar = r.grammar;
  sock.send(zmq::buffer(protocol::encode_request(g)), zmq::send_flags::none);

  const std::string id = random_id(r.chat ? "chatcmpl-" : "cmpl-");
  const int64_t created = unix_now();
  // One event of the stream: its choices, and with include_usage its `usage` (null but on the last).
  auto event = [&](json choices, json usage) {
    json c{{"id", id}, {"object", r.chat ? "chat.completion.chunk" : "text_completion"}, {"created", created}, {"model", model}, {"choices", std::move(choices)}};
    if (r.include_usage) c["usage"] = std::move(usage);
    return "data: " + dumped(c) + "\n\n";
  };
  auto chunk = [&](json choice) { return event(json::array({std::move(choice)}), nullptr); };
  auto piece_choice = [&](const std::string& text, const json& finish) {
    if (r.chat) return json{{"index", 0}, {"delta", text.empty() && !finish.is_null() ? json::object() : json{{"content", text}}}, {"logprobs", nullptr}, {"finish_reason", finish}};
    return json{{"index", 0}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", finish}};
  };

  std::string text, pending;  // sent (or kept, not streaming); bytes of a character not yet whole
  bool cancelled = false, started = false;
  bool watch_client = true;  // wait on the connection too: its end is seen at once
  std::chrono::steady_clock::time_point cancelled_at;
  for (;;) {
    if (!cancelled && ex.client_gone()) {  // it will not read the rest: free its sequence
      sock.send(zmq::buffer(protocol::encode_request(protocol::cancel_request{g.id})), zmq::send_flags::dontwait);
      cancelled = true;
      cancelled_at = std::chrono::steady_clock::now();
    }
    // The scheduler has ended (nothing more comes), or its answer to the cancel is overdue (the
    // replies to a client it cut off are dropped): this thread is done.
    if (ex.stopping() || (cancelled && std::chrono::steady_clock::now() - cancelled_at > std::chrono::seconds(5))) return;
    zmq::pollitem_t items[] = {{sock.handle(), 0, ZMQ_POLLIN, 0}, {nullptr, ex.client_fd(), ZMQ_POLLIN, 0}};
    const bool with_client = watch_client && !cancelled;
    if (zmq::poll(items, with_client ? 2 : 1, std::chrono::milliseconds(50)) == 0) continue;
    if (with_client && (items[1].revents & ZMQ_POLLIN) && !ex.client_gone()) watch_client = false;  // it sent more: check it every 50 ms instead
    if (!(items[0].revents & ZMQ_POLLIN)) continue;
    zmq::message_t msg;
    if (!sock.recv(msg, zmq::recv_flags::dontwait)) continue;
    auto decoded = protocol::decode_reply(msg.to_string_view());
    if (!std::holds_alternative<protocol::reply>(decoded)) continue;  // (the server writes every reply with the same codec)
    const protocol::reply& m = std::get<protocol::reply>(decoded);
    if (const auto* e = std::get_if<protocol::error_reply>(&m)) {
      const auto f = from_protocol(*e, r.chat);
      if (!started) ex.reply(failure_reply(f));
      else ex.send(error_event(f));
      return;
    }
    if (std::holds_alternative<protocol::accepted_reply>(m)) {
      started = true;
      if (r.stream && !cancelled) {
        http_reply head{200, "text/event-stream", r.chat ? chunk(json{{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}}) : ""};
        head.headers.emplace_back("X-Accel-Buffering", "no");
        ex.begin_stream(head);
      }
      continue;
    }
    if (const auto* t = std::get_if<protocol::token_reply>(&m)) {
      pending += t->bytes;
      const size_t whole_part = complete_utf8(pending);
      if (whole_part == 0) continue;
      const std::string piece = pending.substr(0, whole_part);
      pending.erase(0, whole_part);
      text += piece;
      if (r.stream && !cancelled) ex.send(chunk(piece_choice(piece, nullptr)));
      continue;
    }
    const auto* done = std::get_if<protocol::done_reply>(&m);
    if (!done) continue;
    text += pending;
    const auto reason = finish_reason(done->finish);
    if (cancelled) return;
    if (!reason) {
      const api_failure f{done->finish == "cancelled" ? 503 : 500, fmt::format("the generation ended early ({})", done->finish), "server_error", done->finish, ""};
      if (!r.stream) ex.reply(failure_reply(f));
      else ex.send(error_event(f));
      return;
    }
    const json usage = usage_of(*done);
    if (r.stream) {
      std::string tail;
      if (!pending.empty()) tail += chunk(piece_choice(pending, nullptr));  // bytes that never made a character
      tail += chunk(piece_choice("", *reason));
      if (r.include_usage) tail += event(json::array(), usage);
      ex.send(tail + "data: [DONE]\n\n");
      return;
    }
    json choice = r.chat ? json{{"index", 0}, {"message", {{"role", "assistant"}, {"content", text}, {"refusal", nullptr}}}, {"logprobs", nullptr}, {"finish_reason", *reason}}
                         : json{{"index", 0}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", *reason}};
    json reply{{"id", id}, {"object", r.chat ? "chat.completion" : "text_completion"}, {"created", created}, {"model", model}, {"choices", json::array({choice})}, {"usage", usage}};
    ex.reply({200, "application/json", dumped(reply) + "\n"});
    return;
  }
}

}  // namespace

http_reply openai_api::error(int status, std::string_view message, std::string_view type, std::string_view code, std::string_view param) {
  json e{{"message", message}, {"type", type}, {"param", param.empty() ? json(nullptr) : json(param)}, {"code", code.empty() ? json(nullptr) : json(code)}};
  return {status, "application/json", dumped(json{{"error", e}}) + "\n"};
}

http_reply openai_api::server_error(int status, const std::string& code, const std::string& message) {
  auto r = error(status, message, status >= 500 ? "server_error" : "invalid_request_error", code);
  if (status == 503) r.headers.emplace_back("Retry-After", "1");
  return r;
}

http_reply openai_api::operator()(const http_request& req) const {
  const openai_setup& s = *s_;
  const std::string path = req.path();
  const bool chat = path == "/v1/chat/completions", completion = path == "/v1/completions";
  if (chat || completion) {
    if (req.method != "POST") return error(405, fmt::format("{} takes POST, not {}", path, req.method), "invalid_request_error", "method_not_allowed");
    // JSON only: a page may send text/plain or a form to another site without asking first, never JSON.
    if (!json_media_type(req.header("content-type")))
      return error(415, fmt::format("the body must be JSON, sent with 'Content-Type: application/json'{}",
                                    req.header("content-type").empty() ? " (the request has no Content-Type)" : " (not '" + req.header("content-type") + "')"),
                   "invalid_request_error", "unsupported_media_type");
    json body = json::parse(req.body, nullptr, false);
    if (body.is_discarded()) return error(400, "the body is not valid JSON", "invalid_request_error", "invalid_json");
    if (!body.is_object()) return error(400, "the body must be a JSON object", "invalid_request_error", "invalid_json");
    const json* model = field(body, "model");
    if (!model) return error(400, "'model' is required (GET /v1/models lists it)", "invalid_request_error", "missing_required_parameter", "model");
    if (!model->is_string()) return error(400, "'model' must be a string", "invalid_request_error", "invalid_value", "model");
    const std::string name = model->get<std::string>();
    if (name != s.model_id && name != s.model_path)
      return error(404, fmt::format("The model '{}' does not exist; this server has '{}'", name, s.model_id), "invalid_request_error", "model_not_found", "model");
    http_reply r;
    r.work = [setup = s_, body = std::move(body), chat, client = client_of(req)](http_exchange& ex) { run_completion(*setup, body, chat, client, ex); };
    return r;
  }
  const json model_object{{"id", s.model_id}, {"object", "model"}, {"created", s.created}, {"owned_by", "hotcold"}};
  if (path == "/v1/models" || path.rfind("/v1/models/", 0) == 0) {
    if (req.method != "GET") return error(405, fmt::format("{} takes GET, not {}", path, req.method), "invalid_request_error", "method_not_allowed");
    if (path == "/v1/models") return {200, "application/json", dumped(json{{"object", "list"}, {"data", json::array({model_object})}}) + "\n"};
    const std::string name = path.substr(11);
    if (name != s.model_id) return error(404, fmt::format("The model '{}' does not exist", name), "invalid_request_error", "model_not_found", "model");
    return {200, "application/json", dumped(model_object) + "\n"};
  }
  return error(404, fmt::format("Unknown request URL: {} {} (this server has POST /v1/chat/completions, POST /v1/completions, GET /v1/models)", req.method, path),
               "invalid_request_error", "unknown_url");
}

}  // namespace hotcold::server
