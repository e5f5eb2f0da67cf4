#include "server/openai_embeddings.hpp"

#include <cstring>
#include <set>

#include <fmt/format.h>

#include "protocol/messages.hpp"

namespace hotcold::server {
namespace {

using json = api_json;

http_reply refused(const std::string& param, const std::string& message, const std::string& code = "invalid_value") {
  return openai_api::error(400, message, "invalid_request_error", code, param);
}

// The inputs' tokens, or a refusal.
std::variant<std::vector<std::vector<token_id>>, http_reply> inputs_of(const openai_setup& s, const json& input) {
  std::vector<std::vector<token_id>> out;
  auto ids = [&](const json& list) -> std::optional<std::vector<token_id>> {
    std::vector<token_id> t;
    for (const auto& x : list) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || static_cast<uint64_t>(x.get<int64_t>()) >= s.v->size()) return std::nullopt;
      t.push_back(static_cast<token_id>(x.get<int64_t>()));
    }
    return t;
  };
  const std::string what = fmt::format("'input' must be a string, a list of strings, a list of token ids (0..{}) or a list of such lists", s.v->size() - 1);
  if (input.is_string()) {
    out.push_back(s.v->tokenize(input.get<std::string>(), true, false));
  } else if (input.is_array() && !input.empty() && input.front().is_number_integer()) {
    auto t = ids(input);
    if (!t) return refused("input", what);
    out.push_back(std::move(*t));
  } else if (input.is_array() && !input.empty()) {
    for (const auto& one : input) {
      if (one.is_string()) out.push_back(s.v->tokenize(one.get<std::string>(), true, false));
      else if (auto t = one.is_array() ? ids(one) : std::nullopt) out.push_back(std::move(*t));
      else return refused("input", what);
    }
  } else {
    return refused("input", what);
  }
  if (out.size() > 2048) return refused("input", fmt::format("'input' has {} entries; at most 2048", out.size()));
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i].empty()) return refused("input", fmt::format("input {} has no tokens", i));
    if (static_cast<int64_t>(out[i].size()) > s.embeddings->n_ctx())
      return refused("input", fmt::format("input {} is {} tokens; the context holds {} (serve -c)", i, out[i].size(), s.embeddings->n_ctx()), "context_length_exceeded");
  }
  return out;
}

}  // namespace

http_reply embeddings_answer(const openai_setup& s, const json& body) {
  if (!s.embeddings)
    return openai_api::error(501, "embeddings are off: start serve with --embeddings (and --pooling mean|last|cls)", "invalid_request_error", "not_implemented");
  static const std::set<std::string> known = {"model", "input", "encoding_format", "dimensions", "user"};
  for (const auto& [k, v] : body.items())
    if (!known.count(k)) return refused(k, fmt::format("'{}' is not a field of /v1/embeddings (model, input, encoding_format, dimensions, user)", k), "unsupported_parameter");
  const json* input = field(body, "input");
  if (!input) return refused("input", "'input' is required", "missing_required_parameter");
  std::string format = "float";
  if (const json* f = field(body, "encoding_format")) {
    if (!f->is_string() || (f->get<std::string>() != "float" && f->get<std::string>() != "base64")) return refused("encoding_format", "'encoding_format' is float or base64");
    format = f->get<std::string>();
  }
  if (const json* d = field(body, "dimensions"); d && !(d->is_number_integer() && d->get<int64_t>() == s.embeddings->n_embd()))
    return refused("dimensions", fmt::format("'dimensions': this model's embeddings have {} (no other is made)", s.embeddings->n_embd()), "unsupported_parameter");
  auto in = inputs_of(s, *input);
  if (auto* r = std::get_if<http_reply>(&in)) return std::move(*r);
  const auto& all = std::get<std::vector<std::vector<token_id>>>(in);
  json data = json::array();
  int64_t tokens = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    const std::vector<float> e = s.embeddings->embed(all[i]);
    tokens += static_cast<int64_t>(all[i].size());
    json vec;
    if (format == "base64") {
      std::string bytes(e.size() * sizeof(float), '\0');
      std::memcpy(bytes.data(), e.data(), bytes.size());  // (little-endian float32, as the clients decode it)
      vec = protocol::base64(bytes);
    } else {
      vec = e;
    }
    data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", std::move(vec)}});
  }
  const json reply{{"object", "list"}, {"data", std::move(data)}, {"model", body.value("model", s.model_id)}, {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}};
  return {200, "application/json", reply.dump(-1, ' ', false, json::error_handler_t::replace) + "\n"};
}

}  // namespace hotcold::server
