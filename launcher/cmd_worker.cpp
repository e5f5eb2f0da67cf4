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
#include "actors/stage_keys.hpp"
#include "devices/device_info.hpp"
#include "engine/bandwidth.hpp"
#include "launcher/option_checks.hpp"
#include "actors/stages.hpp"
#include "launcher/model_options.hpp"
#include "loader/open.hpp"
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
  const std::string host = ep.host == "localhost" ? "127.0.0.1" : ep.host;  // (what ZeroMQ binds the data port to: an address, not a name)
  const uint16_t port = ep.port;
  // Plain links only where no other machine reaches them; beyond loopback, TLS with certificates.
  if (!ep.is_loopback() && !a.allow_remote)
    throw std::invalid_argument(fmt::format("--listen {}: not a loopback address (127.x.x.x, localhost, ::1); listening for other machines needs "
                                            "--allow-remote and --tls DIR",
                                            a.listen));
  if (!ep.is_loopback() && a.tls.empty())
    throw std::invalid_argument(fmt::format("--listen {} --allow-remote: links to other hosts are authenticated and encrypted: give --tls DIR (hotcold "
                                            "keygen --tls DIR; docs/distributed.md)",
                                            a.listen));
  if (!a.tls.empty()) actors::check_tls_dir(a.tls);
  if (a.model.empty()) throw std::invalid_argument("a worker needs -m FILE: its own copy of the coordinator's file");
  std::signal(SIGINT, on_worker_signal);
  std::signal(SIGTERM, on_worker_signal);
  // Mapped: nothing of the weights is read until a coordinator assigns layers (then those alone,
  // into memory, unless --mmap).
  load_options lo;
  lo.use_mmap = true;
  auto m = model::load(a.model, lo);
  actors::stage_host_options o;
  o.m = m;
  o.mmap = a.mmap;
  o.ram_budget = static_cast<uint64_t>(a.ram_budget_gib * double(1ull << 30));
  if (o.ram_budget > 0 && a.mmap) throw std::invalid_argument("--ram-budget reads a private copy's rows: not with --mmap");
  o.available_memory = [] { return devices::cpu_device().free_memory; };
  o.file_id = file_identity(a.model);
  o.threads = a.threads > 0 ? a.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  {  // Its read speed with its threads, for a coordinator's --split auto (over 256 MiB: ~0.2 s).
    thread_pool pool(o.threads, "hotcold-probe");
    o.read_bytes_per_second = measure_read_bandwidth(pool, uint64_t{256} << 20, 1);
  }
  o.log = [](const std::string& line) { fmt::print(stderr, "{}\n", line); };
  if (!a.cache_type_k.empty() || !a.cache_type_v.empty()) o.kv = parse_cache_types(a.cache_type_k, a.cache_type_v);
  devices::device_options dopt;
  dopt.kind = a.device;
  dopt.budget = static_cast<uint64_t>(a.vram_budget_gib * double(1ull << 30));
  dopt.sim_kernels = a.sim_kernels;
  auto dev = loader::choose_device(*m, dopt, o.log);
  if (dev && dev->kind() != devices::device_kind::cpu)  // each assignment's layers opened with the device's plan for them (and the disk tier's)
    o.open = [dev, threads = o.threads, log = o.log, ram_budget = o.ram_budget](std::shared_ptr<const model> held, int64_t first, int64_t last, int64_t n_ctx,
                                                                               int64_t n_seq, kv_types kv, ffn_mode mode) {
      loader::open_options lo;
      lo.ctx = n_ctx, lo.n_seq = n_seq, lo.threads = threads, lo.kv = kv, lo.mode = mode;
      lo.ram_budget = ram_budget;
      lo.first_layer = first, lo.last_layer = last;
      lo.placement = placement_sources(threads);
      lo.log = log;
      return loader::open_for_running(std::move(held), dev, lo).ctx;
    };
  caf::actor_system_config cfg;
  actors::configure(cfg, {});
  actors::configure_network(cfg, a.tls);
  caf::actor_system sys(cfg);
  actors::stage_host stage;
  try {
    stage = actors::start_stage_host(sys, o, host, port);
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("cannot listen on {} (--listen): {}", a.listen, e.what()));
  }
  const uint16_t bound = stage.port;
  fmt::print(stderr, "hotcold worker: listening on tcp://{}:{} (data on port {}; {}, {} layers, file {}, {}, {}; reads {:.1f} GB/s on {} threads; hot device {})\n", host, bound, bound + 1, a.model,
             m->hp().n_layer, o.file_id, actors::stage_version(), a.tls.empty() ? std::string("plain links") : "TLS with the certificates of " + a.tls + ", the data on CurveZMQ",
             o.read_bytes_per_second / 1e9, o.threads, o.open ? dev->name() : std::string("none"));
  m.reset();  // (the stage host holds it: it reads its layers' copy in its place)
  while (!stop_worker.load()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  fmt::print(stderr, "hotcold worker: stopping\n");
  caf::anon_send_exit(stage.actor, caf::exit_reason::user_shutdown);
}

}  // namespace hotcold::launcher
