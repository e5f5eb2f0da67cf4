#include "clients/client.hpp"

#include <cstring>

#include <fmt/format.h>

#include "protocol/endpoint.hpp"
#include "protocol/messages.hpp"

namespace hotcold::clients {

using json = nlohmann::json;

client::client(const std::string& endpoint, std::chrono::milliseconds timeout, const std::optional<curve>& keys)
    : sock_(ctx_, zmq::socket_type::dealer), timeout_(timeout) {
  const auto ep = protocol::parse_endpoint(endpoint);  // a clear message for a malformed endpoint
  sock_.set(zmq::sockopt::linger, 0);
  if (ep.needs_ipv6()) sock_.set(zmq::sockopt::ipv6, 1);
  const std::string events = fmt::format("inproc://hotcold-client-monitor-{}", static_cast<const void*>(this));
  if (zmq_socket_monitor(sock_.handle(), events.c_str(), ZMQ_EVENT_CONNECTED) == 0) monitor_.connect(events);
  if (keys) {
    sock_.set(zmq::sockopt::curve_serverkey, keys->server_public_key);
    sock_.set(zmq::sockopt::curve_publickey, keys->public_key);
    sock_.set(zmq::sockopt::curve_secretkey, keys->secret_key);
  }
  sock_.connect(ep.zmq_address());
}

std::string client::new_id() { return fmt::format("c{}", next_++); }

bool client::wait_connected(std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!connected_) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    zmq::pollitem_t items[] = {{monitor_.handle(), 0, ZMQ_POLLIN, 0}};
    if (zmq::poll(items, 1, left) == 0) continue;
    zmq::message_t event, address;  // (an event: 16-bit id and 32-bit value, then the endpoint)
    if (!monitor_.recv(event, zmq::recv_flags::dontwait)) continue;
    if (event.more()) (void)monitor_.recv(address, zmq::recv_flags::dontwait);
    uint16_t id = 0;
    if (event.size() >= 2) std::memcpy(&id, event.data(), 2);
    connected_ = id == ZMQ_EVENT_CONNECTED;
  }
  return true;
}

void client::send_raw(std::string_view frame) { sock_.send(zmq::buffer(frame.data(), frame.size()), zmq::send_flags::none); }

void client::send_request(std::string_view frame) {
  // (the server's limit: over it a too_large reply, and over 16 MiB the connection closes unread, with no reply)
  if (const size_t limit = protocol::limits{}.max_frame_bytes; frame.size() > limit)
    throw client_error(fmt::format("too_large: the request's frame has {} bytes, more than the server's {}", frame.size(), limit));
  send_raw(frame);
}

std::optional<std::string> client::next_frame(std::chrono::milliseconds timeout) {
  zmq::pollitem_t items[] = {{sock_.handle(), 0, ZMQ_POLLIN, 0}};
  if (zmq::poll(items, 1, timeout) == 0) return std::nullopt;
  zmq::message_t m;
  if (!sock_.recv(m, zmq::recv_flags::dontwait)) return std::nullopt;
  return m.to_string();
}

std::optional<json> client::next_reply(std::chrono::milliseconds timeout) {
  auto frame = next_frame(timeout);
  if (!frame) return std::nullopt;
  json j = json::parse(*frame, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw client_error("the server sent a frame that is not a JSON object");
  return j;
}

protocol::reply client::wait_for(const std::string& id) {
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) throw client_error(fmt::format("no reply from the server within {} ms", timeout_.count()));
    auto frame = next_frame(left);
    if (!frame) continue;
    auto decoded = protocol::decode_reply(*frame);
    if (auto* bad = std::get_if<protocol::protocol_error>(&decoded)) throw client_error(fmt::format("the server sent a reply this client cannot read: {}", bad->message));
    auto& r = std::get<protocol::reply>(decoded);
    if (const auto* e = std::get_if<protocol::error_reply>(&r); e && (e->error.id == id || e->error.id.empty()))
      throw client_error(fmt::format("{}: {}", protocol::error_code_name(e->error.code), e->error.message));
    if (protocol::reply_id(r) == id) return r;
  }
}

protocol::request client::request_of(const std::string& type, json fields) {
  fields["v"] = protocol::protocol_version;
  fields["type"] = type;
  fields["id"] = "-";  // replaced by a new id when it is sent
  auto decoded = protocol::decode_request(fields.dump(-1, ' ', false, json::error_handler_t::replace));
  if (auto* bad = std::get_if<protocol::protocol_error>(&decoded))
    throw client_error(fmt::format("not a {} request: {}: {}", type, protocol::error_code_name(bad->code), bad->message));
  return std::get<protocol::request>(decoded);
}

protocol::reply client::call(protocol::request r) {
  const std::string id = new_id();
  std::visit([&](auto& x) { x.id = id; }, r);
  send_request(protocol::encode_request(r));
  return wait_for(id);
}

json client::call(const std::string& type, json fields) { return json::parse(protocol::encode_reply(call(request_of(type, std::move(fields))))); }

client::generation client::generate(const json& fields, const token_callback& on_token, std::optional<int64_t> cancel_after) {
  return generate(std::get<protocol::generate_request>(request_of("generate", fields)), on_token, cancel_after);
}

client::generation client::generate(protocol::generate_request request, const token_callback& on_token, std::optional<int64_t> cancel_after) {
  const std::string id = new_id();
  request.id = id;
  send_request(protocol::encode_request(request));
  generation g;
  int64_t tokens = 0;
  bool cancelled = false;
  for (;;) {
    protocol::reply r = wait_for(id);
    if (const auto* a = std::get_if<protocol::accepted_reply>(&r)) g.seed = a->seed;
    if (const auto* t = std::get_if<protocol::token_reply>(&r)) {
      g.text += t->bytes;
      if (on_token) on_token(*t);
      if (cancel_after && ++tokens >= *cancel_after && !cancelled) {
        send_raw(protocol::encode_request(protocol::cancel_request{id}));
        cancelled = true;
      }
    }
    if (auto* d = std::get_if<protocol::done_reply>(&r)) {
      if (d->text) g.text = *d->text;
      g.done = std::move(*d);
      return g;
    }
  }
}

}  // namespace hotcold::clients
