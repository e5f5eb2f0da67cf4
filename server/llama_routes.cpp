#include "server/llama_routes.hpp"

#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "server/openai_api.hpp"
#include "model/utf8.hpp"
#include "protocol/messages.hpp"

namespace hotcold::server {
namespace {

using json = nlohmann::ordered_json;

http_reply answer(const json& j) { return {200, "application/json", j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n"}; }
http_reply refused(const std::string& message, const std::string& param) { return openai_api::error(400, message, "invalid_request_error", "invalid_value", param); }

bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();)
    if (!utf8_decode(s, i)) return false;
  return true;
}

// A JSON body, or why not.
std::optional<json> body_of(const http_request& req, std::string& why) {
  json b = json::parse(req.body, nullptr, false);
  if (b.is_discarded() || !b.is_object()) {
    why = "the body must be a JSON object";
    return std::nullopt;
  }
  return b;
}

bool flag(const json& b, const char* name, bool fallback, std::string& why) {
  auto it = b.find(name);
  if (it == b.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) why = fmt::format("'{}' must be true or false", name);
  return it->is_boolean() ? it->get<bool>() : fallback;
}

http_reply tokenize(const llama_routes_setup& s, const json& b) {
  std::string why;
  if (!b.contains("content") || !b["content"].is_string()) return refused("'content' is required: the text to tokenize", "content");
  const bool add_special = flag(b, "add_special", false, why), parse_special = flag(b, "parse_special", true, why), pieces = flag(b, "with_pieces", false, why);
  if (!why.empty()) return refused(why, "");
  const auto ids = s.v->tokenize(b["content"].get<std::string>(), add_special, parse_special);
  json tokens = json::array();
  for (token_id t : ids) {
    if (!pieces) {
      tokens.push_back(t);
      continue;
    }
    // A piece that is not UTF-8 on its own (half a character) as its bytes, as llama-server writes it.
    const std::string p = s.v->piece(t, true);
    json bytes = json::array();
    for (unsigned char c : p) bytes.push_back(c);
    tokens.push_back({{"id", t}, {"piece", valid_utf8(p) ? json(p) : bytes}});
  }
  return answer({{"tokens", tokens}});
}

http_reply detokenize(const llama_routes_setup& s, const json& b) {
  if (!b.contains("tokens") || !b["tokens"].is_array()) return refused("'tokens' is required: a list of token ids", "tokens");
  std::vector<token_id> ids;
  for (const auto& t : b["tokens"]) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || static_cast<uint64_t>(t.get<int64_t>()) >= s.v->size())
      return refused(fmt::format("'tokens' must hold ids 0..{}", s.v->size() - 1), "tokens");
    ids.push_back(static_cast<token_id>(t.get<int64_t>()));
  }
  return answer({{"content", s.v->detokenize(ids)}});
}

http_reply props(const llama_routes_setup& s) {
  const protocol::sampling d;  // the defaults a request's missing fields take
  json params{{"n_predict", -1},          {"temperature", d.temperature},     {"top_k", d.top_k},
              {"top_p", d.top_p},         {"min_p", d.min_p},                 {"repeat_penalty", d.repeat_penalty},
              {"repeat_last_n", d.repeat_last_n}, {"frequency_penalty", d.frequency_penalty}, {"presence_penalty", d.presence_penalty},
              {"max_tokens", s.max_tokens}};
  return answer({{"default_generation_settings", {{"n_ctx", s.n_ctx}, {"params", params}}},
                 {"total_slots", s.total_slots},
                 {"model_path", s.model_path},
                 {"model_alias", s.model_id},
                 {"chat_template", s.chat_template},
                 {"modalities", {{"vision", false}, {"audio", false}}},
                 {"build_info", "hotcold"}});
}

http_reply slots(const llama_routes_setup& s) {
  json out = json::array();
  const auto seen = s.m ? s.m->slots() : std::vector<actors::live_stats::slot_view>{};
  for (int64_t k = 0; k < s.total_slots; ++k) {
    const auto v = static_cast<size_t>(k) < seen.size() ? seen[static_cast<size_t>(k)] : actors::live_stats::slot_view{};
    out.push_back({{"id", k}, {"n_ctx", s.n_ctx}, {"is_processing", v.request >= 0}, {"id_task", v.request}, {"n_cached", v.cached}});
  }
  return answer(out);
}

}  // namespace

std::optional<http_reply> llama_route(const llama_routes_setup& s, const http_request& req) {
  const std::string path = req.path();
  const bool post = path == "/tokenize" || path == "/detokenize", get = path == "/props" || path == "/slots";
  if (!post && !get) return std::nullopt;
  if (req.method != (post ? "POST" : "GET"))
    return openai_api::error(405, fmt::format("{} takes {}, not {}", path, post ? "POST" : "GET", req.method), "invalid_request_error", "method_not_allowed");
  if (path == "/props") return props(s);
  if (path == "/slots") return slots(s);
  std::string why;
  const auto b = body_of(req, why);
  if (!b) return refused(why, "");
  // (Tokenizing a long text takes a while: on the request's own thread.)
  http_reply r;
  r.work = [s, b = *b, tok = path == "/tokenize"](http_exchange& ex) { ex.reply(tok ? tokenize(s, b) : detokenize(s, b)); };
  return r;
}

}  // namespace hotcold::server
