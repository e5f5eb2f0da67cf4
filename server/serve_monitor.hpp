#pragma once
// serve's HTTP side for people and scrapers: the dashboard (/), /metrics, /api/stats, /api/events and
// /health. All but /health answer only this machine's clients unless told otherwise. It runs on the HTTP server's thread and reads only what the serving loop publishes in a
// serve_status (atomics) and the metrics (locked inside).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "server/metrics.hpp"
#include "server/http_server.hpp"

namespace hotcold::server {

// What the serving loop publishes for the HTTP thread.
struct serve_status {
  std::chrono::steady_clock::time_point started;
  std::atomic<int64_t> active{0}, queued{0};  // sequences running, and waiting for a slot
  std::atomic<bool> stopping{false};
  std::atomic<double> tokens_per_second{0};   // over the last few seconds
  std::atomic<int64_t> stages_down{0};        // stages on other hosts whose worker is lost (--workers)
  // What health says: stopping, degraded (a stage lost: requests fail until it is back), or ok.
  const char* health() const { return stopping.load() ? "stopping" : stages_down.load() > 0 ? "degraded" : "ok"; }
};

class stats_history;

class serve_monitor {
 public:
  // remote_pages: the pages answer other machines too (else only /health does). about: the model, its
  // placement and the server's settings ({"model", "placement", "settings"}: in /api/stats); history:
  // the last minutes' samples (GET /api/history; none: []).
  serve_monitor(const metrics& metrics, const serve_status& status, bool remote_pages, nlohmann::json about = nlohmann::json::object(),
                const stats_history* history = nullptr)
      : metrics_(metrics), status_(status), remote_pages_(remote_pages), about_(std::move(about)), history_(history) {}
  // Answers one request (GET only).
  http_reply operator()(const http_request& req) const;
  // What /api/stats answers and each event of /api/events carries (docs/telemetry.md).
  nlohmann::json stats_json() const;

 private:
  // Server-Sent Events: a `stats` event now and every period_ms, each with the device utilization
  // since the one before; after `frames` of them (0: no end) an `end` event, and the stream closes.
  http_reply event_stream(int64_t frames, int64_t period_ms) const;
  const metrics& metrics_;
  const serve_status& status_;
  bool remote_pages_ = false;
  nlohmann::json about_;
  const stats_history* history_ = nullptr;
};

}  // namespace hotcold::server
