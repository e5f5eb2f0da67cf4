#pragma once
// hotcold serve (the server room, server/server.hpp, in front of an opened model) and hotcold keygen.
#include <cstdint>
#include <string>

#include "launcher/cmd_generate.hpp"
#include "launcher/model_options.hpp"
#include "server/server_options.hpp"

namespace hotcold::launcher {

struct serve_args {
  model_args m;
  server::server_options s;
  grammar_args grammar;  // the grammar of requests that name none (s.grammar, read and checked)
  int64_t parallel = 4;  // sequences generated at once (KV slots)
  std::string host;      // llama-server's --host and --port: the HTTP side (s.http)
  int port = 0;
};

// Serves until SIGINT or SIGTERM.
void run_serve(const serve_args& a);
// NAME.key (secret, mode 0600) and NAME.pub, the public key printed.
void run_keygen(const std::string& stem);
// hotcold keygen --tls DIR [--ca CA_DIR] [--name NAME] (actors/stage_keys.hpp).
void run_keygen_tls(const std::string& dir, const std::string& ca_dir, const std::string& name);

}  // namespace hotcold::launcher
