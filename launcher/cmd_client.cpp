// hotcold client --endpoint EP (-p TEXT | -f FILE) [-n N] [--temp …] [--seed S] [--health] [--cancel-after N]:
// a generate through `hotcold serve`, printing the generated text exactly as `hotcold run` prints it.
#include <cstdio>

#include <fmt/format.h>

#include "launcher/commands.hpp"
#include "launcher/option_checks.hpp"
#include "model/sampler.hpp"
#include "protocol/curve.hpp"
#include "server/sampling_map.hpp"
#include "tools/client.hpp"

namespace hotcold::launcher {

void add_client_command(CLI::App& app, int& exit_code) {
  struct args {
    std::string endpoint = "tcp://127.0.0.1:5555", prompt, file;
    int n_predict = 128;
    int64_t cancel_after = 0;
    double timeout_s = 120;
    std::string curve_server_key, curve_key;
    sampling_params p;
    bool parse_special = false, health = false;
  };
  auto a = std::make_shared<args>();
  auto* cmd = app.add_subcommand("client", "Send a prompt to `hotcold serve` and print the generated text as `hotcold run` does");
  cmd->add_option("--endpoint", a->endpoint, "The server's endpoint")->capture_default_str();
  auto* p = cmd->add_option("-p,--prompt", a->prompt, "Prompt text");
  auto* f = cmd->add_option("-f,--file", a->file, "File whose text is the prompt");
  p->excludes(f);
  cmd->add_option("-n,--n-predict", a->n_predict, "Tokens to generate")->capture_default_str();
  cmd->add_option("--temp", a->p.temperature, "Temperature (<= 0: greedy)")->capture_default_str();
  cmd->add_option("--top-k", a->p.top_k, "Top-k (<= 0: off)")->capture_default_str();
  cmd->add_option("--top-p", a->p.top_p, "Top-p (>= 1: off)")->capture_default_str();
  cmd->add_option("--min-p", a->p.min_p, "Min-p (0: off)")->capture_default_str();
  cmd->add_option("--repeat-penalty", a->p.repeat_penalty, "Repetition penalty (1: off)")->capture_default_str();
  cmd->add_option("--repeat-last-n", a->p.penalty_last_n, "Tokens the penalties look back on")->capture_default_str();
  cmd->add_option("--frequency-penalty", a->p.frequency_penalty, "Frequency penalty (0: off)")->capture_default_str();
  cmd->add_option("--presence-penalty", a->p.presence_penalty, "Presence penalty (0: off)")->capture_default_str();
  auto* seed = cmd->add_option("--seed", a->p.seed, "Random seed (default: the server picks one, printed on stderr)");
  cmd->add_flag("--parse-special", a->parse_special, "Text of control tokens in the prompt becomes those tokens");
  cmd->add_flag("--health", a->health, "Only ask the server how it is (prints the health reply)");
  cmd->add_option("--cancel-after", a->cancel_after, "Cancel the request after this many tokens")->check(whole_in(1, 1ll << 40));
  cmd->add_option("--curve-server-key", a->curve_server_key, "The server's public key (40 Z85 characters, or its .pub file): CURVE on");
  cmd->add_option("--curve-key", a->curve_key, "This client's key pair (hotcold keygen), on the server's allow list");
  cmd->add_option("--timeout", a->timeout_s, "Seconds to wait for each reply")->check(finite_in(0.001, 86400))->capture_default_str();
  cmd->callback([a, p, f, seed, &exit_code] {
    exit_code = run_guarded("client", [&] {
      check_sampling_flags(a->p);
      std::optional<tools::client::curve> keys;
      if (a->curve_server_key.empty() != a->curve_key.empty())
        throw std::invalid_argument("--curve-server-key and --curve-key go together");
      if (!a->curve_key.empty()) {
        const auto mine = protocol::read_keypair(a->curve_key);
        keys = tools::client::curve{protocol::read_public_key(a->curve_server_key), mine.public_key, mine.secret_key};
      }
      tools::client c(a->endpoint, std::chrono::milliseconds(static_cast<int64_t>(a->timeout_s * 1000)), keys);
      if (a->health) {
        fmt::print("{}\n", c.call("health").dump());
        return;
      }
      if (p->count() + f->count() != 1) throw std::invalid_argument("give the text with exactly one of -p TEXT or -f FILE");
      protocol::generate_request req;
      req.prompt = f->count() ? read_text_file(a->file) : a->prompt;
      req.n_predict = a->n_predict;
      req.params = server::wire_sampling_of(a->p, seed->count() ? std::optional<uint64_t>(a->p.seed) : std::nullopt);
      req.parse_special = a->parse_special;
      auto g = c.generate(
          req,
          [](const protocol::token_reply& t) {
            std::fwrite(t.bytes.data(), 1, t.bytes.size(), stdout);
            std::fflush(stdout);
          },
          a->cancel_after > 0 ? std::optional<int64_t>(a->cancel_after) : std::nullopt);
      fmt::print("\n");
      if (!seed->count()) fmt::print(stderr, "hotcold: seed {}\n", g.seed);
      const auto& d = g.done;
      fmt::print(stderr, "hotcold: {} after {} tokens; first token after {:.0f} ms, {:.0f} ms in all\n", d.finish, d.generated_tokens,
                 d.t.time_to_first_token_ms, d.t.total_ms);
      if (d.finish == "error") throw std::runtime_error("the server ended the request with an error");
    });
  });
}

}  // namespace hotcold::launcher
