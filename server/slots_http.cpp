#include "server/slots_http.hpp"

#include <charconv>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "protocol/messages.hpp"

namespace hotcold::server {

namespace {
using json = nlohmann::json;

http_reply refused(int status, const std::string& message, const std::string& code) {
  return openai_api::error(status, message, status >= 500 ? "server_error" : "invalid_request_error", code);
}

// The query's action=... ("" when absent).
std::string action_of(const std::string& target) {
  const auto q = target.find('?');
  if (q == std::string::npos) return {};
  const std::string query = target.substr(q + 1);
  for (size_t at = 0; at <= query.size();) {
    const size_t end = std::min(query.find('&', at), query.size());
    const std::string pair = query.substr(at, end - at);
    if (pair.rfind("action=", 0) == 0) return pair.substr(7);
    at = end + 1;
  }
  return {};
}

// Sends the slot request to the serving loop and waits for its one reply.
http_reply ask(const openai_setup& s, const protocol::slot_request& r, http_exchange& ex) {
  zmq::socket_t sock(*s.zmq, zmq::socket_type::dealer);
  sock.set(zmq::sockopt::linger, 0);
  sock.connect(s.endpoint);
  sock.send(zmq::buffer(protocol::encode_request(r)), zmq::send_flags::none);
  while (!ex.stopping()) {
    zmq::pollitem_t items[] = {{sock.handle(), 0, ZMQ_POLLIN, 0}};
    if (zmq::poll(items, 1, std::chrono::milliseconds(100)) == 0) continue;
    zmq::message_t msg;
    if (!sock.recv(msg, zmq::recv_flags::dontwait)) continue;
    auto decoded = protocol::decode_reply(msg.to_string_view());
    if (auto* e = std::get_if<protocol::protocol_error>(&decoded)) return refused(500, e->message, "internal");
    const auto& reply = std::get<protocol::reply>(decoded);
    if (auto* e = std::get_if<protocol::error_reply>(&reply))
      return refused(e->error.code == protocol::error_code::not_found ? 404 : 400, e->error.message, std::string(protocol::error_code_name(e->error.code)));
    const auto* k = std::get_if<protocol::slot_reply>(&reply);
    if (!k) continue;
    json j{{"id_slot", k->slot}};
    if (k->action == "save") j.update({{"filename", r.filename}, {"n_saved", k->n_tokens}, {"n_written", k->n_bytes}, {"timings", {{"save_ms", k->ms}}}});
    if (k->action == "restore")
      j.update({{"filename", r.filename}, {"n_restored", k->n_tokens}, {"n_read", k->n_bytes}, {"timings", {{"restore_ms", k->ms}}}});
    if (k->action == "erase") j["n_erased"] = k->n_tokens;
    return {200, "application/json", j.dump() + "\n"};
  }
  return refused(503, "the server is stopping", "shutting_down");
}
}  // namespace

http_reply slots_request(const openai_setup& s, const http_request& req) {
  const std::string path = req.path();
  if (req.method != "POST") return refused(405, fmt::format("{} takes POST, not {}", path, req.method), "method_not_allowed");
  protocol::slot_request r;
  r.id = "slot";
  const std::string id = path.substr(std::string("/slots/").size());
  const auto [end, ec] = std::from_chars(id.data(), id.data() + id.size(), r.slot);
  if (id.empty() || ec != std::errc() || end != id.data() + id.size() || r.slot < 0)
    return refused(400, fmt::format("'{}': the slot is a number, POST /slots/ID?action=save|restore|erase", id.substr(0, 32)), "invalid_value");
  r.action = action_of(req.target);
  if (r.action != "save" && r.action != "restore" && r.action != "erase")
    return refused(400, fmt::format("action '{}': save, restore or erase (POST /slots/ID?action=...)", r.action.substr(0, 32)), "invalid_value");
  if (r.action != "erase") {
    const json body = json::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.is_object() || !body.contains("filename") || !body["filename"].is_string())
      return refused(400, fmt::format("{} needs a JSON body {{\"filename\": NAME}}", r.action), "invalid_value");
    r.filename = body["filename"].get<std::string>();
  }
  http_reply out;
  out.work = [setup = s, r](http_exchange& ex) { ex.reply(ask(setup, r, ex)); };
  return out;
}

}  // namespace hotcold::server
