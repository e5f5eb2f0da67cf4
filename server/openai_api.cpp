#include "server/openai_api.hpp"
#include "server/openai_embeddings.hpp"
#include "server/openai_request.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "protocol/messages.hpp"
#include "protocol/text_file.hpp"

namespace hotcold::server {
namespace {

using json = nlohmann::ordered_json;  // fields in the order the API documents them

std::string dumped(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// The API's usage object for a request that ended; OpenAI's prompt_tokens_details.cached_tokens: the
// prompt's tokens reused from the cache.
json usage_of(const protocol::done_reply& d) {
  return {{"prompt_tokens", d.prompt_tokens},
          {"completion_tokens", d.generated_tokens},
          {"total_tokens", d.prompt_tokens + d.generated_tokens},
          {"prompt_tokens_details", {{"cached_tokens", d.cached_tokens}}}};
}

// llama-server's timings object: the prompt's tokens computed and the time they took, the tokens
// generated and theirs, with their rates, and the prompt's tokens taken from the cache.
json timings_of(const protocol::done_reply& d) {
  const double queued = d.t.queued_ms, first = d.generated_tokens > 0 ? d.t.time_to_first_token_ms : d.t.total_ms;
  const double prompt_ms = std::max(0.0, first - queued), predicted_ms = d.generated_tokens > 0 ? std::max(0.0, d.t.total_ms - first) : 0.0;
  const int64_t prompt_n = d.prompt_tokens - d.cached_tokens;
  auto per_token = [](double ms, int64_t n) { return n > 0 ? ms / static_cast<double>(n) : 0.0; };
  auto per_second = [](double ms, int64_t n) { return ms > 0 ? 1000.0 * static_cast<double>(n) / ms : 0.0; };
  return {{"prompt_n", prompt_n}, {"prompt_ms", prompt_ms}, {"prompt_per_token_ms", per_token(prompt_ms, prompt_n)}, {"prompt_per_second", per_second(prompt_ms, prompt_n)},
          {"predicted_n", d.generated_tokens}, {"predicted_ms", predicted_ms}, {"predicted_per_token_ms", per_token(predicted_ms, d.generated_tokens)},
          {"predicted_per_second", per_second(predicted_ms, d.generated_tokens)}, {"cache_n", d.cached_tokens}, {"queued_ms", queued}};
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

// One token's log probabilities, as the API writes them (a prompt's first token has none).
struct lp_entry {
  std::string piece;
  std::optional<double> logprob;
  std::vector<protocol::token_prob> top;
};

json bytes_of(std::string_view s) {
  json out = json::array();
  for (unsigned char c : s) out.push_back(c);
  return out;
}

// Chat's logprobs object: {"content": [{token, logprob, bytes, top_logprobs}], "refusal": null}.
json chat_logprobs(const std::vector<lp_entry>& es) {
  json content = json::array();
  for (const auto& e : es) {
    json top = json::array();
    for (const auto& t : e.top) top.push_back({{"token", t.bytes}, {"logprob", t.logprob}, {"bytes", bytes_of(t.bytes)}});
    content.push_back({{"token", e.piece}, {"logprob", e.logprob ? json(*e.logprob) : json(nullptr)}, {"bytes", bytes_of(e.piece)}, {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}, {"refusal", nullptr}};
}

// Completions' logprobs object: tokens, token_logprobs, top_logprobs (each a {token: logprob} map),
// text_offset (characters into the choice's text; `offset` goes on from one chunk to the next).
json completion_logprobs(const std::vector<lp_entry>& es, int64_t& offset) {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  for (const auto& e : es) {
    tokens.push_back(e.piece);
    lps.push_back(e.logprob ? json(*e.logprob) : json(nullptr));
    json top = e.logprob ? json::object() : json(nullptr);
    for (const auto& t : e.top) top[t.bytes] = t.logprob;
    tops.push_back(std::move(top));
    offsets.push_back(offset);
    for (unsigned char c : e.piece) offset += (c & 0xC0) != 0x80;
  }
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

// A completion's replies from the scheduler turned into the API's: Server-Sent Events as they come, or
// one reply at the end. Choice k is the generate with id "http-k".
class completion_answer {
 public:
  completion_answer(const completion_request& r, http_exchange& ex, std::string model)
      : r_(r), ex_(ex), model_(std::move(model)), id_(random_id(r.chat ? "chatcmpl-" : "cmpl-")), created_(unix_now()), c_(static_cast<size_t>(r.n)) {
    for (auto& c : c_) c.ts = tool_stream(r.tools.format);
  }
  bool cancelled = false;  // the client went: nothing more is sent

  // Choice k's echoed prompt, where the server sends none (echo without logprobs: the tokens' pieces).
  void echo_pieces(const vocab& v) {
    for (auto& c : c_)
      for (token_id t : r_.tokens) c.echo.push_back({v.piece(t), std::nullopt, {}}), c.echo_text += v.piece(t);
  }

  // True when the answer is complete (or cannot go on).
  bool on(const protocol::reply& m) {
    if (const auto* e = std::get_if<protocol::error_reply>(&m)) {
      const auto f = from_protocol(*e, r_.chat);
      if (!started_) ex_.reply(failure_reply(f));
      else ex_.send(error_event(f));
      return true;
    }
    const std::string& rid = protocol::reply_id(m);
    const size_t k = rid.size() > 5 ? std::strtoul(rid.c_str() + 5, nullptr, 10) : 0;
    if (k >= c_.size()) return false;
    choice& c = c_[k];
    if (std::holds_alternative<protocol::accepted_reply>(m)) {
      if (!started_ && r_.stream && !cancelled) {
        std::string first;
        if (r_.chat)
          for (size_t i = 0; i < c_.size(); ++i)
            first += chunk(json{{"index", i}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}});
        http_reply head{200, "text/event-stream", first};
        head.headers.emplace_back("X-Accel-Buffering", "no");
        ex_.begin_stream(head);
      }
      started_ = true;
      return false;
    }
    if (const auto* p = std::get_if<protocol::prompt_token_reply>(&m)) {  // echo
      c.echo.push_back(entry(p->bytes, p->probs));
      c.echo_text += p->bytes;
      return false;
    }
    if (const auto* t = std::get_if<protocol::token_reply>(&m)) {
      flush_echo(k);
      if (r_.logprobs && t->probs) c.waiting.push_back(entry(t->bytes, t->probs));
      c.pending += t->bytes;
      const size_t whole_part = complete_utf8(c.pending);
      if (whole_part == 0) return false;
      const std::string piece = c.pending.substr(0, whole_part);
      c.pending.erase(0, whole_part);
      if (r_.tools.active()) return release(k, c.ts.add(piece)), false;
      c.text += piece;
      if (r_.stream && !cancelled) ex_.send(chunk(piece_choice(k, piece, nullptr, take_logprobs(c))));
      return false;
    }
    if (const auto* done = std::get_if<protocol::done_reply>(&m)) return finish(k, *done);
    return false;
  }

 private:
  struct choice {
    std::string text, pending;  // sent (or kept, not streaming); bytes of a character not yet whole
    std::string echo_text;
    std::vector<lp_entry> echo, waiting;  // the prompt's log probabilities; the tokens' not sent yet
    int64_t offset = 0;                   // characters written so far (completions' text_offset)
    bool echoed = false;
    std::optional<protocol::done_reply> done;
    std::string reason;
    tool_stream ts;                    // with tools: content apart from calls
    std::vector<parsed_call> calls;
  };
  // With tools: content as it is released, each call as it comes (streamed as OpenAI streams them: its
  // id, type and name, then its arguments in pieces).
  void release(size_t k, tool_stream::out o) {
    choice& c = c_[k];
    c.text += o.content;
    if (r_.stream && !cancelled && !o.content.empty()) ex_.send(chunk(piece_choice(k, o.content, nullptr, take_logprobs(c))));
    for (auto& call : o.calls) c.calls.push_back(std::move(call));
    if (!r_.stream || cancelled) return;
    std::string events;
    for (const auto& d : o.deltas) {  // a call's id, type and name first, then its arguments as they come
      json tc = d.name.empty() ? json{{"index", d.index}, {"function", {{"arguments", d.arguments}}}}
                               : json{{"index", d.index}, {"id", call_id(k, d.index)}, {"type", "function"}, {"function", {{"name", d.name}, {"arguments", d.arguments}}}};
      events += chunk(json{{"index", k}, {"delta", {{"tool_calls", json::array({std::move(tc)})}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}});
    }
    if (!events.empty()) ex_.send(events);
  }
  std::string call_id(size_t k, size_t index) const {
    if (r_.tools.format != tool_format::mistral) return fmt::format("call_{}_{}_{}", id_.substr(id_.size() - 12), k, index);
    // Mistral's templates take 9 letters or digits: the same, hashed (one reply's ids differ but by a 1 in 62^9 chance).
    constexpr std::string_view digits = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    uint64_t h = std::hash<std::string>{}(fmt::format("{}/{}/{}", id_, k, index));
    std::string id;
    for (int i = 0; i < 9; ++i, h /= digits.size()) id += digits[h % digits.size()];
    return id;
  }
  json message_of(size_t k, choice& x) {
    json m{{"role", "assistant"}, {"content", x.calls.empty() || !x.text.empty() ? json(x.text) : json(nullptr)}};
    if (!x.calls.empty()) {
      json calls = json::array();
      for (size_t i = 0; i < x.calls.size(); ++i)
        calls.push_back({{"id", call_id(k, i)}, {"type", "function"}, {"function", {{"name", x.calls[i].name}, {"arguments", x.calls[i].arguments}}}});
      m["tool_calls"] = std::move(calls);
    }
    m["refusal"] = nullptr;
    return m;
  }
  static lp_entry entry(const std::string& bytes, const std::optional<protocol::token_probs>& p) {
    return p ? lp_entry{bytes, p->logprob, p->top} : lp_entry{bytes, std::nullopt, {}};
  }
  json envelope(json choices) const {
    return {{"id", id_}, {"object", r_.chat ? "chat.completion.chunk" : "text_completion"}, {"created", created_}, {"model", model_}, {"choices", std::move(choices)}};
  }
  // One event of the stream: with include_usage its `usage` (null but on the last).
  std::string event(json c, json usage = nullptr) const {
    if (r_.include_usage) c["usage"] = std::move(usage);
    return "data: " + dumped(c) + "\n\n";
  }
  std::string chunk(json choice) const { return event(envelope(json::array({std::move(choice)}))); }
  json piece_choice(size_t k, const std::string& text, const json& finish, json logprobs) const {
    if (r_.chat) return json{{"index", k}, {"delta", text.empty() && !finish.is_null() ? json::object() : json{{"content", text}}}, {"logprobs", std::move(logprobs)}, {"finish_reason", finish}};
    return json{{"index", k}, {"text", text}, {"logprobs", std::move(logprobs)}, {"finish_reason", finish}};
  }
  // The log probabilities of the tokens since the last piece sent (streaming), or of all (at the end).
  json take_logprobs(choice& c) const {
    if (!r_.logprobs) return nullptr;
    json out = r_.chat ? chat_logprobs(c.waiting) : completion_logprobs(c.waiting, c.offset);
    c.waiting.clear();
    return out;
  }
  // Echo's prompt, before the first generated token: its own event when streaming.
  void flush_echo(size_t k) {
    choice& c = c_[k];
    if (!r_.echo || c.echoed) return;
    c.echoed = true;
    if (!r_.stream) return;
    json lp = nullptr;
    if (r_.logprobs) lp = completion_logprobs(c.echo, c.offset);
    if (!cancelled) ex_.send(chunk(piece_choice(k, c.echo_text, nullptr, std::move(lp))));
  }
  // Choice k ended: streaming, its last pieces and its finish; once every choice has, the rest.
  bool finish(size_t k, const protocol::done_reply& done) {
    if (cancelled) return true;
    choice& c = c_[k];
    const auto reason = finish_reason(done.finish);
    if (!reason) {
      const std::string why = done.error && !done.error->empty() ? fmt::format("the generation ended early ({}): {}", done.finish, *done.error)
                                                                 : fmt::format("the generation ended early ({})", done.finish);  // (why, as ZeroMQ clients get it)
      const api_failure f{done.finish == "cancelled" ? 503 : 500, why, "server_error", done.finish, ""};
      if (!r_.stream) ex_.reply(failure_reply(f));
      else ex_.send(error_event(f));
      return true;
    }
    c.done = done, c.reason = *reason;
    if (r_.tools.active()) {
      c.pending.clear();  // (bytes that never made a character)
      release(k, c.ts.finish());
      if (!c.calls.empty()) c.reason = "tool_calls";
    }
    if (r_.stream) {
      flush_echo(k);
      std::string tail;
      if (!c.pending.empty() || !c.waiting.empty()) tail += chunk(piece_choice(k, c.pending, nullptr, take_logprobs(c)));  // bytes that never made a character
      json last = envelope(json::array({piece_choice(k, "", c.reason, nullptr)}));
      last["timings"] = timings_of(done);
      ex_.send(tail + event(std::move(last)));
    }
    if (std::any_of(c_.begin(), c_.end(), [](const choice& x) { return !x.done; })) return false;
    // Every choice has ended: the prompt counted once, the generated tokens of all.
    protocol::done_reply total = *c_[0].done;
    for (size_t i = 1; i < c_.size(); ++i) total.generated_tokens += c_[i].done->generated_tokens;
    const json usage = usage_of(total);
    if (r_.stream) {
      ex_.send((r_.include_usage ? event(envelope(json::array()), usage) : std::string()) + "data: [DONE]\n\n");
      return true;
    }
    json choices = json::array();
    for (size_t i = 0; i < c_.size(); ++i) {
      choice& x = c_[i];
      x.text += x.pending;
      if (r_.echo) x.text = x.echo_text + x.text, x.waiting.insert(x.waiting.begin(), x.echo.begin(), x.echo.end());
      choices.push_back(r_.chat ? json{{"index", i}, {"message", message_of(i, x)}, {"logprobs", take_logprobs(x)}, {"finish_reason", x.reason}}
                                : json{{"index", i}, {"text", x.text}, {"logprobs", take_logprobs(x)}, {"finish_reason", x.reason}});
    }
    json reply{{"id", id_}, {"object", r_.chat ? "chat.completion" : "text_completion"}, {"created", created_}, {"model", model_}, {"choices", choices}, {"usage", usage},
               {"timings", timings_of(total)}};
    ex_.reply({200, "application/json", dumped(reply) + "\n"});
    return true;
  }

  const completion_request& r_;
  http_exchange& ex_;
  const std::string model_, id_;
  const int64_t created_;
  bool started_ = false;
  std::vector<choice> c_;
};

// One completion: the request to the scheduler over the in-process endpoint, its tokens to the client
// (as Server-Sent Events, or in one reply at the end). The client going away cancels it.
void run_completion(const openai_setup& s, const json& body, bool chat, const std::string& client, http_exchange& ex) {
  completion_request r;
  try {
    r = parse_request(body, chat, s);
    const int64_t room = s.n_ctx - static_cast<int64_t>(r.tokens.size());
    if (room <= 0)
      throw api_failure{400, fmt::format("the {} is {} tokens; the context holds {} (serve -c)", r.chat ? "conversation" : "prompt", r.tokens.size(), s.n_ctx),
                        "invalid_request_error", "context_length_exceeded", r.chat ? "messages" : "prompt"};
    if (r.chat && r.n_predict == 0) r.n_predict = std::min<int64_t>(room, s.max_tokens);
  } catch (const api_failure& f) {
    ex.reply(failure_reply(f));
    return;
  }
  zmq::socket_t sock(*s.zmq, zmq::socket_type::dealer);
  sock.set(zmq::sockopt::linger, 0);
  // No bound on the replies waiting here: the server's own per-client byte limit is the bound, and a
  // client that stops reading is dropped by the send deadline, its sequence cancelled.
  sock.set(zmq::sockopt::rcvhwm, 0);
  // The scheduler shares its queue among clients by the part of this identity before its last '|'.
  sock.set(zmq::sockopt::routing_id, fmt::format("{}|{}", client, random_id("")));
  sock.connect(s.endpoint);
  protocol::generate_request g;
  g.tokens.assign(r.tokens.begin(), r.tokens.end());
  g.n_predict = static_cast<int32_t>(r.n_predict);
  g.params = r.sampling;
  g.stop = r.stop;
  g.cache_prompt = r.cache_prompt;
  g.grammar = r.grammar;
  g.logprobs = r.logprobs, g.n_probs = r.n_probs, g.prompt_logprobs = r.echo && r.logprobs, g.ignore_eos = r.ignore_eos;
  // n choices: n generates of the same prompt (the later ones reuse the first's cached rows), seeds
  // seed, seed + 1, ... where the request gives one.
  for (int32_t k = 0; k < r.n; ++k) {
    g.id = fmt::format("http-{}", k);
    if (r.sampling.seed) g.params.seed = *r.sampling.seed + static_cast<uint64_t>(k);
    sock.send(zmq::buffer(protocol::encode_request(g)), zmq::send_flags::none);
  }
  completion_answer answer(r, ex, body.value("model", s.model_id));
  if (r.echo && !r.logprobs) answer.echo_pieces(*s.v);  // (the prompt's text alone)

  bool watch_client = true;  // wait on the connection too: its end is seen at once
  std::chrono::steady_clock::time_point cancelled_at;
  for (;;) {
    if (!answer.cancelled && ex.client_gone()) {  // it will not read the rest: free its sequence
      for (int32_t k = 0; k < r.n; ++k)
        sock.send(zmq::buffer(protocol::encode_request(protocol::cancel_request{fmt::format("http-{}", k)})), zmq::send_flags::dontwait);
      answer.cancelled = true;
      cancelled_at = std::chrono::steady_clock::now();
    }
    // The scheduler has ended (nothing more comes), or its answer to the cancel is overdue (the
    // replies to a client it cut off are dropped): this thread is done.
    if (ex.stopping() || (answer.cancelled && std::chrono::steady_clock::now() - cancelled_at > std::chrono::seconds(5))) return;
    zmq::pollitem_t items[] = {{sock.handle(), 0, ZMQ_POLLIN, 0}, {nullptr, ex.client_fd(), ZMQ_POLLIN, 0}};
    const bool with_client = watch_client && !answer.cancelled;
    if (zmq::poll(items, with_client ? 2 : 1, std::chrono::milliseconds(50)) == 0) continue;
    if (with_client && (items[1].revents & ZMQ_POLLIN) && !ex.client_gone()) watch_client = false;  // it sent more: check it every 50 ms instead
    if (!(items[0].revents & ZMQ_POLLIN)) continue;
    zmq::message_t msg;
    if (!sock.recv(msg, zmq::recv_flags::dontwait)) continue;
    auto decoded = protocol::decode_reply(msg.to_string_view());
    if (!std::holds_alternative<protocol::reply>(decoded)) continue;  // (the server writes every reply with the same codec)
    if (answer.on(std::get<protocol::reply>(decoded))) return;
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
  const bool chat = path == "/v1/chat/completions", completion = path == "/v1/completions", embeddings = path == "/v1/embeddings";
  if (chat || completion || embeddings) {
    if (req.method != "POST") return error(405, fmt::format("{} takes POST, not {}", path, req.method), "invalid_request_error", "method_not_allowed");
    // JSON only: a page may send text/plain or a form to another site without asking first, never JSON.
    if (!json_media_type(req.header("content-type")))
      return error(415, fmt::format("the body must be JSON, sent with 'Content-Type: application/json'{}",
                                    req.header("content-type").empty() ? " (the request has no Content-Type)" : " (not '" + req.header("content-type") + "')"),
                   "invalid_request_error", "unsupported_media_type");
    json body = json::parse(req.body, nullptr, false);
    if (body.is_discarded()) return error(400, "the body is not valid JSON", "invalid_request_error", "invalid_json");
    if (!body.is_object()) return error(400, "the body must be a JSON object", "invalid_request_error", "invalid_json");
    const json* model = field(body, "model");  // (absent: the one model served, as llama-server takes it)
    if (model && !model->is_string()) return error(400, "'model' must be a string", "invalid_request_error", "invalid_value", "model");
    const std::string name = model ? model->get<std::string>() : s.model_id;
    if (name != s.model_id && name != s.model_path)
      return error(404, fmt::format("The model '{}' does not exist; this server has '{}'", name, s.model_id), "invalid_request_error", "model_not_found", "model");
    http_reply r;
    if (embeddings) r.work = [setup = s_, body = std::move(body)](http_exchange& ex) { ex.reply(embeddings_answer(*setup, body)); };
    else r.work = [setup = s_, body = std::move(body), chat, client = client_of(req)](http_exchange& ex) { run_completion(*setup, body, chat, client, ex); };
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
  return error(404, fmt::format("Unknown request URL: {} {} (this server has POST /v1/chat/completions, POST /v1/completions, POST /v1/embeddings, GET /v1/models)", req.method, path),
               "invalid_request_error", "unknown_url");
}

}  // namespace hotcold::server
