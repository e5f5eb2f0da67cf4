#pragma once
// hotcold client: one generate through `hotcold serve`, printing what `hotcold run` prints.
#include <cstdint>
#include <string>

#include "launcher/cmd_generate.hpp"
#include "model/sampler.hpp"

namespace hotcold::launcher {

struct client_args {
  std::string endpoint = "tcp://127.0.0.1:5555", prompt, file;
  int texts_given = 0;     // of -p and -f (exactly one, unless --health)
  bool from_file = false;  // the text is -f's
  int n_predict = 128;
  int64_t cancel_after = 0;
  double timeout_s = 120;
  double connect_timeout_s = 5;  // for a server to accept the connection
  std::string curve_server_key, curve_key;
  sampling_params p;
  bool seed_given = false;
  bool parse_special = false, health = false;
  grammar_args grammar;  // sent as the generate's grammar or json_schema (files read here)
  bool chat = false;                // the text as a user's message, written by the server's chat template
  std::string system;               // ... after this system message
  std::string tools_file, tool_choice;  // functions offered (a JSON array, as the HTTP API's tools; implies chat)
};

void run_client(const client_args& a);

}  // namespace hotcold::launcher
