#pragma once
// serve's HTTP side put together: the pages for people (serve_monitor: the dashboard, /metrics,
// /api/*, /health) and the OpenAI-style API for programs (openai_api, under /v1/) behind one
// http_server, with the options' tokens, keys, chat template and model name.
#include <memory>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "actors/pipeline.hpp"
#include "server/metrics.hpp"
#include "server/openai_api.hpp"
#include "server/http_server.hpp"
#include "loader/open.hpp"
#include "server/serve_monitor.hpp"
#include "server/server_options.hpp"

namespace hotcold::server {

class stats_history;

struct serve_http_parts {
  const server_options& o;
  const loader::opened_model& l;
  const server::metrics& metrics;
  const serve_status& status;
  zmq::context_t& zmq;
  std::string local_endpoint;  // the server's in-process ROUTER, where the API's requests go
  const stats_history* history = nullptr;  // the last minutes' samples, for the dashboard's graphs
};

// What the API reads requests with (the vocabulary, the context, the chat template or why there is
// none, the model's names); note: where the template's choice is worth a line. Without zmq, endpoint,
// created or embeddings (start_serve_http fills them).
openai_setup chat_setup(const loader::opened_model& l, const server_options& o, std::string* note);
// The actor pipeline serve runs (its options from the loaded model and serve's flags).
actors::pipeline_options pipeline_options_of(const loader::opened_model& l, const server_options& o);

// Starts it on o.http. Throws std::invalid_argument / std::runtime_error as http_server does.
std::unique_ptr<http_server> start_serve_http(const serve_http_parts& p);

// What web pages may do: --allowed-hosts, --cors-origins. Throws std::invalid_argument for a malformed
// entry, or `*` without a key.
browser_guard browsers_of(const server_options& o);

// --api-key and the keys of --api-key-file; throws std::invalid_argument for a bad key or file.
std::vector<std::string> api_keys(const server_options& o);

}  // namespace hotcold::server
