// hotcold serve [-m M] --zmq tcp://127.0.0.1:5555 [--max-queue N] [--max-prompt-tokens N]
//               [--max-tokens N] [--parallel N]: the ZeroMQ server (protocol/README.md).
#include <unistd.h>

#include <csignal>
#include <filesystem>

#include <fmt/format.h>

#include "actors/stage_keys.hpp"
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
  const std::string default_grammar = grammar_of(a.grammar);  // refused before the model loads
  if (a.s.embeddings && a.s.http.empty()) throw std::invalid_argument("--embeddings answers POST /v1/embeddings: give --http HOST:PORT");
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
  // A file-size limit (ulimit -f) reached by --record: the write fails (EFBIG) and is counted, as
  // on a full disk, instead of the signal ending the server.
  std::signal(SIGXFSZ, SIG_IGN);
  auto l = load(a.m, 0, a.parallel);
  serving.store(true);
  auto s = a.s;
  s.stages = l.stages;
  s.grammar = default_grammar;
  s.prefix_store_bytes = l.prefix_store_bytes;
  s.context_shift = l.context_shift, s.keep = l.keep;
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

void run_keygen_tls(const std::string& dir, const std::string& ca_dir, const std::string& name) {
  namespace fs = std::filesystem;
  const std::string cn = name.empty() ? fs::absolute(dir).lexically_normal().filename().string() : name;
  const std::string fp = actors::make_tls_dir(dir, ca_dir, cn.empty() ? std::string("hotcold member") : cn);
  fmt::print("{}\n", fp);
  if (ca_dir.empty())
    fmt::print(stderr,
               "hotcold keygen: {0}/ca.pem, ca.key (a new authority: keep ca.key here), member.pem and member.key ('{1}', SHA-256 above) written; "
               "another host's folder: hotcold keygen --tls DIR --ca {0}\n",
               dir, cn);
  else
    fmt::print(stderr, "hotcold keygen: {}/ca.pem (of {}), member.pem and member.key ('{}', SHA-256 above) written; copy the folder to its host\n", dir,
               ca_dir, cn);
}

}  // namespace hotcold::launcher
