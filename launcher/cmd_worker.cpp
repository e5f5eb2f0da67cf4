// hotcold worker: loads its own copy of the file, publishes a stage host on the address through
// CAF's network layer, prints where it listens, and runs the layers coordinators assign it until
// SIGINT or SIGTERM.
#include "launcher/cmd_worker.hpp"

#include <csignal>
#include <thread>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <fmt/format.h>

#include "actors/runtime.hpp"
#include "actors/stages.hpp"
#include "model/file_identity.hpp"
#include "model/model.hpp"
#include "protocol/endpoint.hpp"

namespace hotcold::launcher {
namespace {

std::atomic<bool> stop_worker{false};
extern "C" void on_worker_signal(int) { stop_worker.store(true); }

}  // namespace

void run_worker(const worker_args& a) {
  const auto ep = protocol::parse_endpoint(a.listen, /*any_port=*/true);
  if (ep.kind != protocol::transport::tcp) throw std::invalid_argument(fmt::format("--listen {}: a worker listens on tcp://HOST:PORT", a.listen));
  const std::string& host = ep.host;
  const uint16_t port = ep.port;
  // The stage link is neither authenticated nor encrypted yet: only this machine may reach it.
  if (!ep.is_loopback())
    throw std::invalid_argument(fmt::format("--listen {}: a worker binds a loopback address (127.x.x.x, localhost, ::1); links to other hosts need the "
                                            "authenticated, encrypted stage links that are not built yet (docs/distributed.md)",
                                            a.listen));
  if (a.model.empty()) throw std::invalid_argument("a worker needs -m FILE: its own copy of the coordinator's file");
  std::signal(SIGINT, on_worker_signal);
  std::signal(SIGTERM, on_worker_signal);
  auto m = model::load(a.model, {a.mmap});
  actors::stage_host_options o;
  o.m = m;
  o.file_id = file_identity(a.model);
  o.threads = a.threads > 0 ? a.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  o.log = [](const std::string& line) { fmt::print(stderr, "{}\n", line); };
  caf::actor_system_config cfg;
  actors::configure(cfg, {});
  actors::configure_network(cfg);
  caf::actor_system sys(cfg);
  auto stage = actors::spawn_stage_host(sys, o);
  auto bound = sys.middleman().publish(stage, port, host.c_str(), true);
  if (!bound) {
    caf::anon_send_exit(stage, caf::exit_reason::user_shutdown);
    throw std::runtime_error(fmt::format("worker: cannot listen on {}: {}", a.listen, sys.render(bound.error())));
  }
  fmt::print(stderr, "hotcold worker: listening on tcp://{}:{} ({}, {} layers, file {}, {})\n", host, *bound, a.model, m->hp().n_layer, o.file_id,
             actors::stage_version());
  while (!stop_worker.load()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  fmt::print(stderr, "hotcold worker: stopping\n");
  caf::anon_send_exit(stage, caf::exit_reason::user_shutdown);
}

}  // namespace hotcold::launcher
