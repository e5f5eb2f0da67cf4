// hotcold client --endpoint EP (-p TEXT | -f FILE) [-n N] [--temp …] [--seed S] [--health] [--cancel-after N]:
// a generate through `hotcold serve`, printing the generated text exactly as `hotcold run` prints it.
#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "launcher/cmd_client.hpp"
#include "launcher/commands.hpp"
#include "launcher/option_checks.hpp"
#include "protocol/curve.hpp"
#include "server/sampling_map.hpp"
#include "clients/client.hpp"

namespace hotcold::launcher {

void run_client(const client_args& a) {
  check_sampling_flags(a.p);
  std::optional<clients::client::curve> keys;
  if (a.curve_server_key.empty() != a.curve_key.empty())
    throw std::invalid_argument("--curve-server-key and --curve-key go together");
  if (!a.curve_key.empty()) {
    const auto mine = protocol::read_keypair(a.curve_key);
    keys = clients::client::curve{protocol::read_public_key(a.curve_server_key), mine.public_key, mine.secret_key};
  }
  clients::client c(a.endpoint, std::chrono::milliseconds(static_cast<int64_t>(a.timeout_s * 1000)), keys);
  if (!c.wait_connected(std::chrono::milliseconds(static_cast<int64_t>(a.connect_timeout_s * 1000))))
    throw std::runtime_error(fmt::format("no server at {}: nothing accepted a connection within {:g} s (is `hotcold serve --zmq {}` running? --connect-timeout waits longer)",
                                         a.endpoint, a.connect_timeout_s, a.endpoint));
  if (a.health) {
    fmt::print("{}\n", c.call("health").dump());
    return;
  }
  if (a.texts_given != 1) throw std::invalid_argument("give the text with exactly one of -p TEXT or -f FILE");
  protocol::generate_request req;
  const std::string text = a.from_file ? read_text_file(a.file) : a.prompt;
  if (a.chat || !a.tools_file.empty() || !a.system.empty()) {  // a conversation of one turn, and the tools offered
    nlohmann::json messages = nlohmann::json::array();
    if (!a.system.empty()) messages.push_back({{"role", "system"}, {"content", a.system}});
    messages.push_back({{"role", "user"}, {"content", text}});
    req.messages = messages.dump();
    if (!a.tools_file.empty()) {
      const auto tools = nlohmann::json::parse(read_text_file(a.tools_file), nullptr, false);
      if (!tools.is_array()) throw std::invalid_argument(fmt::format("--tools {}: a JSON array of tools, as the HTTP API's", a.tools_file));
      req.tools = tools.dump();
    }
    req.tool_choice = a.tool_choice;
  } else {
    req.prompt = text;
  }
  req.n_predict = a.n_predict;
  req.params = server::wire_sampling_of(a.p, a.seed_given ? std::optional<uint64_t>(a.p.seed) : std::nullopt);
  req.parse_special = a.parse_special;
  auto read = [](const std::string& path, const char* flag) {
    try {
      return read_text_file(path);
    } catch (const std::exception& e) {
      throw std::invalid_argument(fmt::format("{} {}: {}", flag, path, e.what()));
    }
  };
  req.grammar = a.grammar.grammar_file.empty() ? a.grammar.grammar : read(a.grammar.grammar_file, "--grammar-file");
  req.json_schema = a.grammar.json_schema_file.empty() ? a.grammar.json_schema : read(a.grammar.json_schema_file, "--json-schema-file");
  if (!req.json_schema.empty() && !nlohmann::json::accept(req.json_schema))
    throw std::invalid_argument("--json-schema: the schema is not valid JSON");
  auto g = c.generate(
      req,
      [](const protocol::token_reply& t) {
        std::fwrite(t.bytes.data(), 1, t.bytes.size(), stdout);
        std::fflush(stdout);
      },
      a.cancel_after > 0 ? std::optional<int64_t>(a.cancel_after) : std::nullopt);
  fmt::print("\n");
  for (const auto& [name, arguments] : g.done.tool_calls) fmt::print("{}\n", nlohmann::ordered_json{{"name", name}, {"arguments", arguments}}.dump());  // (a line each)
  if (!a.seed_given) fmt::print(stderr, "hotcold: seed {}\n", g.seed);
  const auto& d = g.done;
  fmt::print(stderr, "hotcold: {} after {} tokens; first token after {:.0f} ms, {:.0f} ms in all\n", d.finish, d.generated_tokens,
             d.t.time_to_first_token_ms, d.t.total_ms);
  if (d.finish == "error") throw std::runtime_error("the server ended the request with an error" + (d.error ? ": " + *d.error : std::string()));
}

}  // namespace hotcold::launcher
