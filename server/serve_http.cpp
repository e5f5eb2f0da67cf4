#include "server/serve_http.hpp"

#include "server/serve_about.hpp"

#include <chrono>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "server/openai_api.hpp"
#include "server/llama_routes.hpp"
#include "server/slots_http.hpp"
#include "model/chat_template.hpp"
#include "model/file_identity.hpp"

namespace hotcold::server {

// A body of the OpenAI-style API may hold a long conversation.
constexpr size_t api_body_limit = 8 << 20;

std::vector<std::string> api_keys(const server_options& o) {
  std::vector<std::string> keys = o.api_key_file.empty() ? std::vector<std::string>{} : read_bearer_tokens(o.api_key_file, "--api-key-file");
  for (const auto& k : o.api_keys) {
    if (!usable_secret(k))
      throw std::invalid_argument("--api-key: a key must be at least 16 characters without blanks");
    keys.push_back(k);
  }
  return keys;
}

browser_guard browsers_of(const server_options& o) {
  browser_guard g;
  g.allowed_hosts = parse_allowed_hosts(o.allowed_hosts);
  g.origins = parse_cors_origins(o.cors_origins);
  if (g.any_origin() && api_keys(o).empty() && o.http_token_file.empty())
    throw std::invalid_argument("--cors-origins '*': any web page could drive this server; give --api-key (or --http-token-file) with it");
  return g;
}

openai_setup chat_setup(const loader::opened_model& l, const server_options& o, std::string* note) {
  openai_setup api;
  api.model_path = l.m->path();
  api.model_id = o.alias.empty() ? std::filesystem::path(api.model_path).filename().string() : o.alias;
  api.v = &l.m->vocabulary();
  api.n_ctx = l.ctx->n_ctx();
  api.max_tokens = o.max_tokens;
  try {
    api.chat = chat_template::choose(l.m->chat_template_text(), o.chat_template, note);
  } catch (const chat_template_error& e) {
    api.chat_problem = fmt::format("{}; start serve with --chat-template NAME to chat with this model", e.what());
  }
  return api;
}

actors::pipeline_options pipeline_options_of(const loader::opened_model& l, const server_options& o) {
  actors::pipeline_options po;
  po.hot = l.hot;
  po.trace = l.trace.get();
  po.recall_every = o.recall_every;
  po.stages = o.stages;
  po.prefix_store_bytes = o.prefix_store_bytes;
  po.context_shift = o.context_shift, po.keep = o.keep;
  po.model_identity = file_identity(l.m->path());
  // Over stages on other hosts, a step of several sequences goes in as many micro-batches as there
  // are stages, so that each works on one while the next works on another (docs/distributed.md).
  // Not where every stage is on one host: there they share one memory bus, and each micro-batch
  // reads a stage's weights again (4 decoding sequences over 2 stages: 0.88x, measured).
  po.micro_batches = o.micro_batches > 0 ? o.micro_batches : o.stages.one_host() ? 1 : static_cast<int>(o.stages.stages.size());
  return po;
}

std::unique_ptr<http_server> start_serve_http(const serve_http_parts& p) {
  const server_options& o = p.o;
  http_options ho;
  ho.address = o.http;
  ho.allow_remote = o.allow_remote_http;
  if (!o.http_token_file.empty()) ho.tokens = read_bearer_tokens(o.http_token_file);
  ho.api_prefix = ho.large_body_prefix = "/v1/";
  ho.api_paths = {"/slots", "/tokenize", "/detokenize", "/props"};  // (llama-server's: the API's keys guard them)
  ho.api_keys = api_keys(o);
  if (ho.api_keys.empty()) ho.api_keys = ho.tokens;  // the server's tokens open the API too
  ho.browsers = browsers_of(o);
  ho.large_body = api_body_limit;
  ho.error_reply = [](int status, const std::string& code, const std::string& message, const std::string& target) -> http_reply {
    if (target.rfind("/v1/", 0) == 0) return openai_api::server_error(status, code, message);
    // A page's refusal, in JSON: {"error": {"message", "code"}}.
    if (status == 403 || status == 401) return {status, "application/json", nlohmann::json{{"error", {{"message", message}, {"code", code}}}}.dump() + "\n"};
    return {status, "text/plain", message + "\n"};
  };
  std::string note;
  openai_setup api = chat_setup(p.l, o, &note);
  if (!note.empty()) fmt::print(stderr, "hotcold serve: {}\n", note);
  if (!api.chat) fmt::print(stderr, "hotcold serve: /v1/chat/completions is off: {}\n", api.chat_problem);
  api.zmq = &p.zmq;
  api.endpoint = p.local_endpoint;
  api.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  if (o.embeddings) {
    const auto how = o.pooling.empty() ? default_pooling(*p.l.m) : pooling_from_name(o.pooling);
    if (!how) throw std::invalid_argument(fmt::format("--pooling {}: mean, last or cls", o.pooling));
    api.embeddings = std::make_shared<embedder>(p.l.m, api.n_ctx, static_cast<int>(p.l.ctx->pool().size()), *how);
    fmt::print(stderr, "hotcold serve: /v1/embeddings on ({} pooling, {} dimensions, inputs up to {} tokens)\n", pooling_name(*how), p.l.m->hp().n_embd, api.n_ctx);
  }
  llama_routes_setup small;
  small.v = api.v, small.m = &p.metrics, small.n_ctx = api.n_ctx, small.total_slots = p.l.ctx->n_seq(), small.max_tokens = o.max_tokens;
  small.model_path = api.model_path, small.model_id = api.model_id, small.chat_template = p.l.m->chat_template_text();
  const size_t n_tokens = ho.tokens.size(), n_keys = ho.api_keys.size();
  const std::string id = api.model_id, tmpl = api.chat ? std::string(api.chat->name()) : "none";
  // The pages answer other machines when told to, or when tokens guard them.
  auto h = std::make_unique<http_server>(std::move(ho), [small, slots = api, api = openai_api(api), pages = serve_monitor(p.metrics, p.status, o.allow_remote || n_tokens > 0, about_of(p.l, o, tmpl), p.history)](
                                                            const http_request& r) {
    if (r.path().rfind("/v1/", 0) == 0) return api(r);
    if (r.path().rfind("/slots/", 0) == 0) return slots_request(slots, r);
    if (auto answer = llama_route(small, r)) return std::move(*answer);
    return pages(r);
  });
  fmt::print(stderr, "hotcold serve: HTTP on {} (/ the dashboard, /chat a chat page, /metrics, /api/stats, /api/events, /health{}; /v1/ the OpenAI-style API for model '{}', chat template {}{}; "
             "/tokenize, /detokenize, /props, /slots as llama-server's)\n",
             o.http, n_tokens ? fmt::format(": every request needs one of {} bearer tokens", n_tokens) : std::string(), id, tmpl,
             n_keys ? fmt::format(", {} keys", n_keys) : std::string());
  return h;
}

}  // namespace hotcold::server
