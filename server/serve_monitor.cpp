#include "server/serve_monitor.hpp"

#include <algorithm>
#include <charconv>
#include <map>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "server/dashboard.hpp"
#include "server/stats_history.hpp"

namespace hotcold::server {

http_reply serve_monitor::operator()(const http_request& req) const {
  if (req.method != "GET") return {405, "text/plain", "GET only\n"};
  const std::string& target = req.target;
  if (!req.loopback_peer && !remote_pages_ && req.path() != "/health")
    return {403, "text/plain", "the dashboard, /metrics and /api/* answer this machine only (serve --allow-remote, or --http-token-file, opens them)\n"};
  const auto q = target.find('?');
  const std::string path = target.substr(0, q);
  std::map<std::string, std::string> query;
  if (q != std::string::npos) {
    std::string rest = target.substr(q + 1);
    for (size_t at = 0; at <= rest.size();) {
      const size_t amp = std::min(rest.find('&', at), rest.size());
      const std::string kv = rest.substr(at, amp - at);
      const size_t eq = kv.find('=');
      if (!kv.empty()) query[kv.substr(0, eq)] = eq == std::string::npos ? "" : kv.substr(eq + 1);
      at = amp + 1;
    }
  }
  // A whole number in [lo, hi] from the query, or `fallback` when absent.
  auto number = [&](const std::string& key, int64_t fallback, int64_t lo, int64_t hi) -> std::optional<int64_t> {
    auto it = query.find(key);
    if (it == query.end()) return fallback;
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), v);
    if (ec != std::errc() || end != it->second.data() + it->second.size() || v < lo || v > hi) return std::nullopt;
    return v;
  };
  if (path == "/metrics") return {200, "text/plain; version=0.0.4; charset=utf-8", metrics_.text()};
  if (path == "/api/stats") return {200, "application/json", stats_json().dump() + "\n"};
  if (path == "/api/history") return {200, "application/json", (history_ ? history_->json() : nlohmann::json::array()).dump() + "\n"};
  if (path == "/chat") return {200, "text/html; charset=utf-8", std::string(chat_html())};
  if (path == "/health")  // (503 while a stage is lost: what balancers read as "send elsewhere")
    return {status_.stages_down.load() > 0 ? 503 : 200, "application/json",
            fmt::format("{{\"status\":\"{}\",\"active\":{},\"queued\":{},\"stages_down\":{}}}\n", status_.health(), status_.active.load(), status_.queued.load(),
                        status_.stages_down.load())};
  if (path == "/" || path == "/index.html") {
    if (!number("frames", 0, 0, 1000000)) return {400, "text/plain", "frames must be a whole number 0..1000000\n"};
    return {200, "text/html; charset=utf-8", std::string(dashboard_html())};
  }
  if (path == "/api/events") {
    const auto frames = number("frames", 0, 0, 1000000), period = number("period_ms", 1000, 50, 60000);
    if (!frames) return {400, "text/plain", "frames must be a whole number 0..1000000 (0: no end)\n"};
    if (!period) return {400, "text/plain", "period_ms must be a whole number 50..60000\n"};
    return event_stream(*frames, *period);
  }
  return {404, "text/plain", "not found: / (the dashboard), /chat, /metrics, /api/stats, /api/history, /api/events and /health are here\n"};
}

nlohmann::json serve_monitor::stats_json() const {
  auto j = metrics_.snapshot();
  j["status"] = status_.health();
  for (const auto& [k, v] : about_.items()) j[k] = v;  // model, placement, settings
  j["uptime_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - status_.started).count();
  j["tokens_per_second"] = status_.tokens_per_second.load();
  j["active_sequences"] = status_.active.load();
  j["queue_depth"] = status_.queued.load();
  auto pct = [](const metrics::percentiles& p) { return nlohmann::json{{"p50", p.p50}, {"p95", p.p95}, {"p99", p.p99}, {"count", p.count}}; };
  j["ttft_recent_s"] = pct(metrics_.recent_ttft());
  j["itl_recent_s"] = pct(metrics_.recent_itl());
  return j;
}

http_reply serve_monitor::event_stream(int64_t frames, int64_t period_ms) const {
  struct stream_state {
    int64_t sent = 0;
    std::map<std::string, double> busy;
    std::chrono::steady_clock::time_point at;
  };
  auto state = std::make_shared<stream_state>();
  state->at = status_.started;
  auto frame = [this, state, frames]() -> std::optional<std::string> {
    if (frames > 0 && state->sent == frames) {
      ++state->sent;
      return std::string("event: end\ndata: {}\n\n");
    }
    if (frames > 0 && state->sent > frames) return std::nullopt;
    auto j = stats_json();
    const auto now = std::chrono::steady_clock::now();
    const double dt = std::chrono::duration<double>(now - state->at).count();
    nlohmann::json util = nlohmann::json::object();
    if (j.contains("pipeline"))
      for (const auto& [device, sec] : j["pipeline"]["device_busy_s"].items()) {
        const double before = state->busy.count(device) ? state->busy[device] : 0.0;
        util[device] = dt > 0 ? std::clamp((sec.get<double>() - before) / dt, 0.0, 1.0) : 0.0;
        state->busy[device] = sec.get<double>();
      }
    state->at = now;
    j["device_utilization"] = util;
    j["frame"] = ++state->sent;
    j["frames"] = frames;
    return "event: stats\ndata: " + j.dump() + "\n\n";
  };
  http_reply head{200, "text/event-stream", "retry: 2000\n\n" + *frame()};
  head.work = [head, frame = std::move(frame), period_ms](http_exchange& ex) mutable {
    if (!ex.begin_stream(head)) return;
    while (ex.pause(std::chrono::milliseconds(period_ms)) && !ex.client_gone()) {
      auto piece = frame();
      if (!piece || !ex.send(*piece)) return;
    }
  };
  return head;
}

}  // namespace hotcold::server
