#include "protocol/curve.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <stdexcept>
#include <system_error>

#include <zmq.h>

#include "protocol/text_file.hpp"

namespace hotcold::protocol {
namespace {

bool is_z85_key(const std::string& s) {
  if (s.size() != 40) return false;
  uint8_t raw[32];
  return zmq_z85_decode(raw, s.c_str()) != nullptr;
}

// Key files are a few lines; allow lists a few thousand keys.
constexpr size_t max_key_file_bytes = 64 << 10, max_allow_list_bytes = 4 << 20;

}  // namespace

curve_keypair make_curve_keypair() {
  char pub[41], sec[41];
  if (zmq_curve_keypair(pub, sec) != 0) throw std::runtime_error("this libzmq cannot make CURVE keys (built without CURVE)");
  return {pub, sec};
}

void write_keypair(const std::string& stem, const curve_keypair& k) {
  const std::string key = stem + ".key", pub = stem + ".pub";
  {
    // Created 0600, and made 0600 if it was there before: the secret is never readable by others.
    const int fd = ::open(key.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) throw std::system_error(errno, std::generic_category(), "cannot write " + key);
    if (::fchmod(fd, 0600) != 0) {
      const int e = errno;
      ::close(fd);
      throw std::system_error(e, std::generic_category(), "cannot write " + key);
    }
    const std::string text = "public: " + k.public_key + "\nsecret: " + k.secret_key + "\n";
    const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    const int e = errno;
    if (::close(fd) != 0 || !ok) throw std::system_error(ok ? errno : e, std::generic_category(), "cannot write " + key);
  }
  std::ofstream out(pub, std::ios::trunc);
  out << k.public_key << "\n";
  out.flush();
  if (!out) throw std::system_error(errno, std::generic_category(), "cannot write " + pub);
}

curve_keypair read_keypair(const std::string& path) {
  curve_keypair k;
  for (std::string line : read_text_lines(path, "CURVE key file", max_key_file_bytes)) {
    line = trim_blanks(line);
    if (line.rfind("public:", 0) == 0) k.public_key = trim_blanks(line.substr(7));
    else if (line.rfind("secret:", 0) == 0) k.secret_key = trim_blanks(line.substr(7));
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
  std::vector<std::string> lines;
  try {
    lines = read_text_lines(key_or_path, "public key file", max_key_file_bytes);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("'" + key_or_path + "' is neither a 40-character Z85 key nor a readable key file (" + e.what() + ")");
  }
  for (std::string line : lines) {
    line = trim_blanks(line);
    if (line.rfind("public:", 0) == 0) line = trim_blanks(line.substr(7));
    if (is_z85_key(line)) return line;
  }
  throw std::invalid_argument(key_or_path + ": holds no 40-character Z85 public key");
}

std::set<std::string> read_allowed_keys(const std::string& path) {
  std::set<std::string> keys;
  int n = 0;
  for (std::string line : read_text_lines(path, "--curve-clients", max_allow_list_bytes)) {
    ++n;
    line = trim_blanks(line);
    if (line.empty() || line[0] == '#') continue;
    if (!is_z85_key(line)) throw std::invalid_argument(path + ":" + std::to_string(n) + ": not a 40-character Z85 public key");
    keys.insert(line);
  }
  if (keys.empty()) throw std::invalid_argument(path + ": no client public key in it: nobody could connect");
  return keys;
}

std::string z85_of_binary_key(const void* key32) {
  char out[41];
  zmq_z85_encode(out, static_cast<const uint8_t*>(key32), 32);
  return out;
}

}  // namespace hotcold::protocol
