// The checks of serve's options that run before the model loads (server.hpp's check_bind).
#include <stdexcept>

#include <fmt/format.h>

#include "model/chat_template.hpp"
#include "protocol/curve.hpp"
#include "protocol/endpoint.hpp"
#include "server/browser_guard.hpp"
#include "server/http_server.hpp"
#include "server/serve_http.hpp"
#include "server/server.hpp"

namespace hotcold::server {

namespace proto = protocol;

void check_bind(const server_options& o) {
  if (o.endpoint.empty() && o.http.empty()) throw std::invalid_argument("nothing to serve on: give --zmq ENDPOINT or --http HOST:PORT");
  if (o.endpoint.empty() && !o.curve_key.empty()) throw std::invalid_argument("--curve-key is for the ZeroMQ side: give --zmq ENDPOINT too");
  if (o.curve_key.empty() != o.curve_clients.empty())
    throw std::invalid_argument("--curve-key and --curve-clients go together: the server's keys, and the clients it lets in");
  if (!o.endpoint.empty()) {
    const auto ep = proto::parse_endpoint(o.endpoint);
    if (!ep.is_loopback() && !o.allow_remote)
      throw std::invalid_argument(fmt::format("--zmq {}: not a loopback address; serving other machines needs --allow-remote", o.endpoint));
    if (!ep.is_loopback() && o.curve_key.empty())
      throw std::invalid_argument(fmt::format("--zmq {} --allow-remote: other machines must authenticate: give --curve-key and --curve-clients (see hotcold keygen)",
                                              o.endpoint));
  }
  // Their errors before the model loads.
  const auto keys = api_keys(o);
  // (--chat-template serves the protocol's generate with messages too.)
  if (o.http.empty() && (!keys.empty() || !o.alias.empty() || !o.allowed_hosts.empty() || !o.cors_origins.empty()))
    throw std::invalid_argument("--api-key, --api-key-file, --alias, --allowed-hosts and --cors-origins are for the HTTP side: give --http HOST:PORT too");
  if (!o.chat_template.empty()) chat_template::named(o.chat_template);  // (an unknown name, before the model loads)
  if (!o.http.empty()) {
    check_http_bind(o.http, o.allow_remote_http, !o.http_token_file.empty() || !keys.empty());
    browsers_of(o);
  }
  if (!o.http_token_file.empty()) read_bearer_tokens(o.http_token_file);
  if (!o.chat_template.empty()) chat_template::named(o.chat_template);
  if (!o.curve_key.empty()) {
    proto::read_keypair(o.curve_key);
    proto::read_allowed_keys(o.curve_clients);
  }
}

}  // namespace hotcold::server
