#pragma once
// CURVE keys for serving other machines (ZeroMQ's CurveZMQ: encryption and, through the server's
// allow list, authentication of clients). Keys are Z85 text, 40 characters.
//
//   hotcold keygen -o server        # server.key (public and secret, mode 0600) and server.pub
//   hotcold keygen -o alice         # a client's pair; alice.pub goes into the server's allow list
#include <set>
#include <string>

namespace hotcold::protocol {

struct curve_keypair {
  std::string public_key, secret_key;  // Z85
};

curve_keypair make_curve_keypair();
// stem.key: "public: KEY\nsecret: KEY\n" (mode 0600); stem.pub: "KEY\n". Throws std::system_error.
void write_keypair(const std::string& stem, const curve_keypair& k);
// A .key file as written above. Throws std::invalid_argument naming what is wrong.
curve_keypair read_keypair(const std::string& path);
// A public key given as its 40 Z85 characters, or a file holding one (a .pub, or a .key's public line).
std::string read_public_key(const std::string& key_or_path);
// An allow list: one public key per line (blank lines and # comments skipped).
std::set<std::string> read_allowed_keys(const std::string& path);
// The Z85 text of a 32-byte binary key (as ZAP hands it over).
std::string z85_of_binary_key(const void* key32);

}  // namespace hotcold::protocol
