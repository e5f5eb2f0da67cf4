#include "protocol/curve.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <fstream>
#include <stdexcept>
#include <system_error>

#include <zmq.h>

namespace hotcold::protocol {
namespace {

bool is_z85_key(const std::string& s) {
  if (s.size() != 40) return false;
  uint8_t raw[32];
  return zmq_z85_decode(raw, s.c_str()) != nullptr;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  size_t b = 0;
  while (b < s.size() && (s[b] == ' ' || s[b] == '\t')) ++b;
  return s.substr(b);
}

}  // namespace

curve_keypair make_curve_keypair() {
  char pub[41], sec[41];
  if (zmq_curve_keypair(pub, sec) != 0) throw std::runtime_error("this libzmq cannot make CURVE keys (built without CURVE)");
  return {pub, sec};
}

void write_keypair(const std::string& stem, const curve_keypair& k) {
  const std::string key = stem + ".key", pub = stem + ".pub";
  {
    std::ofstream out(key, std::ios::trunc);
    if (!out) throw std::system_error(errno, std::generic_category(), key);
    out << "public: " << k.public_key << "\nsecret: " << k.secret_key << "\n";
    if (!out) throw std::system_error(errno, std::generic_category(), key);
  }
  if (::chmod(key.c_str(), 0600) != 0) throw std::system_error(errno, std::generic_category(), key);
  std::ofstream out(pub, std::ios::trunc);
  out << k.public_key << "\n";
  if (!out) throw std::system_error(errno, std::generic_category(), pub);
}

curve_keypair read_keypair(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::system_error(errno, std::generic_category(), path);
  curve_keypair k;
  for (std::string line; std::getline(in, line);) {
    line = trim(line);
    if (line.rfind("public:", 0) == 0) k.public_key = trim(line.substr(7));
    else if (line.rfind("secret:", 0) == 0) k.secret_key = trim(line.substr(7));
  }
  if (!is_z85_key(k.secret_key)) throw std::invalid_argument(path + ": no \"secret: KEY\" line with a 40-character Z85 key (make one with hotcold keygen)");
  char derived[41];
  if (zmq_curve_public(derived, k.secret_key.c_str()) != 0) throw std::invalid_argument(path + ": the secret key is not a CURVE key");
  if (!k.public_key.empty() && k.public_key != derived) throw std::invalid_argument(path + ": the public key does not belong to the secret key");
  k.public_key = derived;
  return k;
}

std::string read_public_key(const std::string& key_or_path) {
  if (is_z85_key(key_or_path)) return key_or_path;
  std::ifstream in(key_or_path);
  if (!in) throw std::invalid_argument("'" + key_or_path + "' is neither a 40-character Z85 key nor a readable key file");
  for (std::string line; std::getline(in, line);) {
    line = trim(line);
    if (line.rfind("public:", 0) == 0) line = trim(line.substr(7));
    if (is_z85_key(line)) return line;
  }
  throw std::invalid_argument(key_or_path + ": holds no 40-character Z85 public key");
}

std::set<std::string> read_allowed_keys(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::system_error(errno, std::generic_category(), path);
  std::set<std::string> keys;
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    line = trim(line);
    if (line.empty() || line[0] == '#') continue;
    if (!is_z85_key(line)) throw std::invalid_argument(path + ":" + std::to_string(n) + ": not a 40-character Z85 public key");
    keys.insert(line);
  }
  return keys;
}

std::string z85_of_binary_key(const void* key32) {
  char out[41];
  zmq_z85_encode(out, static_cast<const uint8_t*>(key32), 32);
  return out;
}

}  // namespace hotcold::protocol
