// hotcold serve [-m M] --zmq tcp://127.0.0.1:5555 [--max-queue N] [--max-prompt-tokens N]
//               [--max-tokens N] [--parallel N]: the ZeroMQ server (protocol/README.md).
#include <unistd.h>

#include <csignal>

#include <fmt/format.h>

#include "launcher/cmd_serve.hpp"
#include "protocol/curve.hpp"
#include "server/server.hpp"

namespace hotcold::launcher {
namespace {

std::atomic<bool> stop_requested{false};
std::atomic<bool> serving{false};
// Before the server runs (the model loading) there is nothing to finish: a stop ends the process
// with 0 at once. Then the server's loop reads the flag, cancels what runs and returns.
extern "C" void on_stop_signal(int) {
  if (!serving.load()) _exit(0);
  stop_requested.store(true);
}

}  // namespace

void run_serve(const serve_args& a) {
  server::check_bind(a.s);
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
  // A file-size limit (ulimit -f) reached by --record: the write fails (EFBIG) and is counted, as
  // on a full disk, instead of the signal ending the server.
  std::signal(SIGXFSZ, SIG_IGN);
  auto l = load(a.m, 0, a.parallel);
  serving.store(true);
  auto s = a.s;
  s.stages = l.stages, s.file_id = l.file_id;
  const auto c = server::serve(l, s, stop_requested);
  fmt::print(stderr, "hotcold serve: stopped: {} frames, {} bad, {} requests ({} completed, {} cancelled, {} failed), {} busy, {} unreachable, {} keys refused, {} clients cut off\n",
             c.frames, c.bad_frames, c.requests, c.completed, c.cancelled, c.errors, c.busy, c.unreachable, c.refused_keys, c.cut_off);
  l.finish();
}

void run_keygen(const std::string& stem) {
  const auto k = protocol::make_curve_keypair();
  protocol::write_keypair(stem, k);
  fmt::print("{}\n", k.public_key);
  fmt::print(stderr, "hotcold keygen: {}.key and {}.pub written\n", stem, stem);
}

}  // namespace hotcold::launcher
