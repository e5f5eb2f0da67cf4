#include "tools/client.hpp"

#include <fmt/format.h>

#include "protocol/endpoint.hpp"
#include "protocol/messages.hpp"

namespace hotcold::tools {

using json = nlohmann::json;

client::client(const std::string& endpoint, std::chrono::milliseconds timeout, const std::optional<curve>& keys)
    : sock_(ctx_, zmq::socket_type::dealer), timeout_(timeout) {
  const auto ep = protocol::parse_endpoint(endpoint);  // a clear message for a malformed endpoint
  sock_.set(zmq::sockopt::linger, 0);
  if (ep.needs_ipv6()) sock_.set(zmq::sockopt::ipv6, 1);
  if (keys) {
    sock_.set(zmq::sockopt::curve_serverkey, keys->server_public_key);
    sock_.set(zmq::sockopt::curve_publickey, keys->public_key);
    sock_.set(zmq::sockopt::curve_secretkey, keys->secret_key);
  }
  sock_.connect(ep.zmq_address());
}

std::string client::new_id() { return fmt::format("c{}", next_++); }

void client::send_raw(std::string_view frame) { sock_.send(zmq::buffer(frame.data(), frame.size()), zmq::send_flags::none); }

std::optional<json> client::next_reply(std::chrono::milliseconds timeout) {
  zmq::pollitem_t items[] = {{sock_.handle(), 0, ZMQ_POLLIN, 0}};
  if (zmq::poll(items, 1, timeout) == 0) return std::nullopt;
  zmq::message_t m;
  if (!sock_.recv(m, zmq::recv_flags::dontwait)) return std::nullopt;
  json j = json::parse(m.to_string_view(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw client_error("the server sent a frame that is not a JSON object");
  return j;
}

json client::wait_for(const std::string& id) {
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) throw client_error(fmt::format("no reply from the server within {} ms", timeout_.count()));
    auto r = next_reply(left);
    if (!r) continue;
    if (r->value("id", json()).is_string() && (*r)["id"] == id) return *r;
    if ((*r)["id"].is_null() && r->value("type", "") == "error") throw client_error(r->value("message", "error"));
  }
}

json client::call(const std::string& type, json fields) {
  const std::string id = new_id();
  fields["v"] = protocol::protocol_version;
  fields["type"] = type;
  fields["id"] = id;
  send_raw(fields.dump());
  json r = wait_for(id);
  if (r.value("type", "") == "error") throw client_error(fmt::format("{}: {}", r.value("code", "error"), r.value("message", "")));
  return r;
}

client::generation client::generate(json request, const std::function<void(const json&, std::string_view)>& on_token, std::optional<int64_t> cancel_after) {
  const std::string id = new_id();
  request["v"] = protocol::protocol_version;
  request["type"] = "generate";
  request["id"] = id;
  send_raw(request.dump());
  generation g;
  int64_t tokens = 0;
  bool cancelled = false;
  for (;;) {
    json r = wait_for(id);
    const std::string type = r.value("type", "");
    if (type == "error") throw client_error(fmt::format("{}: {}", r.value("code", "error"), r.value("message", "")));
    if (type == "accepted") g.seed = r.value("seed", uint64_t{0});
    if (type == "token") {
      const std::string bytes = protocol::unbase64(r.value("bytes", ""));
      g.text += bytes;
      if (on_token) on_token(r, bytes);
      if (cancel_after && ++tokens >= *cancel_after && !cancelled) {
        send_raw(json{{"v", protocol::protocol_version}, {"type", "cancel"}, {"id", id}}.dump());
        cancelled = true;
      }
    }
    if (type == "done") {
      if (r.contains("text")) g.text = r["text"].get<std::string>();
      g.done = std::move(r);
      return g;
    }
  }
}

}  // namespace hotcold::tools
