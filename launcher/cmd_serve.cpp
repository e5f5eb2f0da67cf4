// hotcold serve [-m M] --zmq tcp://127.0.0.1:5555 [--max-queue N] [--max-prompt-tokens N]
//               [--max-tokens N] [--parallel N]: the ZeroMQ server (protocol/README.md).
#include <unistd.h>

#include <csignal>

#include <fmt/format.h>

#include "launcher/commands.hpp"
#include "launcher/option_checks.hpp"
#include "launcher/model_options.hpp"
#include "server/server.hpp"
#include "model/chat_template.hpp"
#include "protocol/curve.hpp"

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

void add_serve_command(CLI::App& app, int& exit_code) {
  struct args {
    model_args m;
    server::server_options s;
    int64_t parallel = 4;
  };
  auto a = std::make_shared<args>();
  auto* cmd = app.add_subcommand("serve", "Serve generate/tokenize/... requests over ZeroMQ (protocol/README.md) until SIGINT or SIGTERM");
  add_model_options(cmd, a->m, false);
  cmd->add_option("--zmq", a->s.endpoint, "Endpoint to bind: tcp://HOST:PORT or ipc://PATH (loopback only unless --allow-remote)")->capture_default_str();
  cmd->add_option("--max-queue", a->s.max_queue, "Requests that may wait for a free sequence slot before new ones get `busy`")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--max-prompt-tokens", a->s.max_prompt_tokens, "Longest prompt accepted, in tokens (default: the context)")->check(whole_in(0, 1ll << 40));
  cmd->add_option("--max-tokens", a->s.max_tokens, "Largest n_predict accepted")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  cmd->add_option("--parallel", a->parallel, "Sequences generated at once (KV slots)")->check(CLI::Range(1, 256))->capture_default_str();
  cmd->add_flag("--allow-remote", a->s.allow_remote, "Allow binding an address other machines can reach (needs --curve-key and --curve-clients)");
  cmd->add_option("--http", a->s.http,
                  "HOST:PORT for the OpenAI-style API (/v1/*, docs/openai-api.md), the dashboard (GET /), /metrics (Prometheus), "
                  "/api/stats, /api/events (Server-Sent Events) and /health (loopback unless --allow-remote-http; docs/telemetry.md)");
  cmd->add_flag("--allow-remote-http", a->s.allow_remote_http,
                "Allow --http on an address other machines can reach (needs --http-token-file or --api-key; the traffic is plain HTTP, not "
                "encrypted; the dashboard and /metrics answer other machines only with --allow-remote or --http-token-file)");
  cmd->add_option("--http-token-file", a->s.http_token_file,
                  "File of bearer tokens (one per line, 16+ characters): every HTTP request must carry one (Authorization: Bearer, or "
                  "/?token= once in a browser)");
  cmd->add_option("--api-key", a->s.api_keys,
                  "A key the OpenAI-style API (/v1/*) requires as `Authorization: Bearer KEY` (16+ characters; may be repeated)");
  cmd->add_option("--api-key-file", a->s.api_key_file, "File of more such keys, one per line");
  cmd->add_option("--chat-template", a->s.chat_template, "Chat template family for /v1/chat/completions instead of the model's own (" + chat_template::names() + ")");
  cmd->add_option("--alias", a->s.alias, "The model's id in /v1/models and requests (default: its file's name)");
  cmd->add_option("--recall-every", a->s.recall_every,
                  "Check the predictors' recall every N steps (each sparse layer computes its first token densely; 0: never)")
      ->check(whole_in(0, 1ll << 40))
      ->capture_default_str();
  cmd->add_option("--max-client-buffer", a->s.max_client_buffer,
                  "Bytes of replies a client may leave unread before it is cut off (its requests cancelled; one larger reply still goes when "
                  "nothing else of its waits)")
      ->check(CLI::Range(int64_t{4096}, int64_t{1} << 32))
      ->capture_default_str();
  cmd->add_option("--record", a->s.record, "Append one JSON line per finished generate: arrival, request, TTFT, inter-token gaps, end-to-end (for hotcold replay)");
  cmd->add_option("--curve-key", a->s.curve_key, "The server's CURVE key pair (hotcold keygen -o NAME writes NAME.key): encrypt and authenticate");
  cmd->add_option("--curve-clients", a->s.curve_clients, "File of the client public keys allowed in, one per line");
  cmd->callback([a, &exit_code] {
    exit_code = run_guarded("serve", [&] {
      server::check_bind(a->s);
      std::signal(SIGINT, on_stop_signal);
      std::signal(SIGTERM, on_stop_signal);
      auto l = load(a->m, 0, a->parallel);
      serving.store(true);
      const auto c = server::serve(l, a->s, stop_requested);
      fmt::print(stderr, "hotcold serve: stopped: {} frames, {} bad, {} requests ({} completed, {} cancelled, {} failed), {} busy, {} unreachable, {} keys refused, {} clients cut off\n",
                 c.frames, c.bad_frames, c.requests, c.completed, c.cancelled, c.errors, c.busy, c.unreachable, c.refused_keys, c.cut_off);
      l.finish();
    });
  });
}

}  // namespace hotcold::launcher

namespace hotcold::launcher {

void add_keygen_command(CLI::App& app, int& exit_code) {
  auto stem = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("keygen", "Make a CURVE key pair for serve/client: NAME.key (secret, mode 0600) and NAME.pub (public)");
  cmd->add_option("-o,--output", *stem, "NAME: writes NAME.key and NAME.pub")->required();
  cmd->callback([stem, &exit_code] {
    exit_code = run_guarded("keygen", [&] {
      const auto k = protocol::make_curve_keypair();
      protocol::write_keypair(*stem, k);
      fmt::print("{}\n", k.public_key);
      fmt::print(stderr, "hotcold keygen: {}.key and {}.pub written\n", *stem, *stem);
    });
  });
}

}  // namespace hotcold::launcher
