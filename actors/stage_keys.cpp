#include "actors/stage_keys.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>

#include <fmt/format.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

namespace hotcold::actors {

namespace {
namespace fs = std::filesystem;

struct free_pkey {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct free_x509 {
  void operator()(X509* x) const { X509_free(x); }
};
struct free_store {
  void operator()(X509_STORE* s) const { X509_STORE_free(s); }
};
struct free_store_ctx {
  void operator()(X509_STORE_CTX* c) const { X509_STORE_CTX_free(c); }
};
struct close_file {
  void operator()(FILE* f) const { std::fclose(f); }
};
using pkey_ptr = std::unique_ptr<EVP_PKEY, free_pkey>;
using x509_ptr = std::unique_ptr<X509, free_x509>;
using file_ptr = std::unique_ptr<FILE, close_file>;

// OpenSSL's queued errors as one line (and the queue emptied).
std::string ssl_errors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    out += out.empty() ? buf : std::string("; ") + buf;
  }
  return out.empty() ? "no detail from OpenSSL" : out;
}

file_ptr open_file(const fs::path& p, const char* mode) {
  file_ptr f(std::fopen(p.c_str(), mode));
  if (!f) throw std::invalid_argument(fmt::format("{}: cannot open ({})", p.string(), std::strerror(errno)));
  return f;
}

x509_ptr read_cert(const fs::path& p) {
  auto f = open_file(p, "rb");
  x509_ptr x(PEM_read_X509(f.get(), nullptr, nullptr, nullptr));
  if (!x) throw std::invalid_argument(fmt::format("{}: not a PEM certificate ({})", p.string(), ssl_errors()));
  return x;
}

pkey_ptr read_key(const fs::path& p) {
  auto f = open_file(p, "rb");
  pkey_ptr k(PEM_read_PrivateKey(f.get(), nullptr, nullptr, nullptr));
  if (!k) throw std::invalid_argument(fmt::format("{}: not an unencrypted PEM private key ({})", p.string(), ssl_errors()));
  return k;
}

void write_cert(const fs::path& p, X509* x) {
  auto f = open_file(p, "wb");
  if (PEM_write_X509(f.get(), x) != 1) throw std::runtime_error(fmt::format("{}: cannot write ({})", p.string(), ssl_errors()));
}

// A private key file, readable by its owner alone from the moment it exists.
void write_key(const fs::path& p, EVP_PKEY* k) {
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0) throw std::runtime_error(fmt::format("{}: cannot create ({})", p.string(), std::strerror(errno)));
  file_ptr f(::fdopen(fd, "wb"));
  if (!f) {
    ::close(fd);
    throw std::runtime_error(fmt::format("{}: cannot write", p.string()));
  }
  if (PEM_write_PrivateKey(f.get(), k, nullptr, nullptr, 0, nullptr, nullptr) != 1)
    throw std::runtime_error(fmt::format("{}: cannot write ({})", p.string(), ssl_errors()));
}

void add_ext(X509* x, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, issuer, x, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (!ext || X509_add_ext(x, ext, -1) != 1) {
    X509_EXTENSION_free(ext);
    throw std::runtime_error(fmt::format("certificate extension {}: {}", value, ssl_errors()));
  }
  X509_EXTENSION_free(ext);
}

// A certificate for `key` named `cn`, signed by issuer_key (issuer: nullptr for the authority itself).
x509_ptr make_cert(EVP_PKEY* key, const std::string& cn, X509* issuer, EVP_PKEY* issuer_key, bool is_ca) {
  x509_ptr x(X509_new());
  if (!x) throw std::runtime_error(ssl_errors());
  X509_set_version(x.get(), 2);  // v3
  std::unique_ptr<BIGNUM, decltype(&BN_free)> serial(BN_new(), BN_free);
  BN_rand(serial.get(), 120, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY);
  BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(x.get()));
  X509_gmtime_adj(X509_getm_notBefore(x.get()), -3600);  // an hour's slack for clocks a little apart
  X509_gmtime_adj(X509_getm_notAfter(x.get()), 10L * 365 * 24 * 3600);
  X509_set_pubkey(x.get(), key);
  X509_NAME* name = X509_get_subject_name(x.get());
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>("hotcold stages"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509* signer = issuer ? issuer : x.get();
  X509_set_issuer_name(x.get(), X509_get_subject_name(signer));
  add_ext(x.get(), signer, NID_subject_key_identifier, "hash");
  if (is_ca) {
    add_ext(x.get(), signer, NID_basic_constraints, "critical,CA:TRUE,pathlen:0");
    add_ext(x.get(), signer, NID_key_usage, "critical,keyCertSign,cRLSign");
  } else {
    add_ext(x.get(), signer, NID_authority_key_identifier, "keyid");
    add_ext(x.get(), signer, NID_basic_constraints, "critical,CA:FALSE");
    add_ext(x.get(), signer, NID_key_usage, "critical,digitalSignature,keyAgreement");
    add_ext(x.get(), signer, NID_ext_key_usage, "serverAuth,clientAuth");
  }
  if (X509_sign(x.get(), issuer_key, EVP_sha256()) <= 0) throw std::runtime_error(fmt::format("signing {}: {}", cn, ssl_errors()));
  return x;
}

pkey_ptr make_key() {
  pkey_ptr k(EVP_EC_gen("P-256"));
  if (!k) throw std::runtime_error(fmt::format("making an EC key: {}", ssl_errors()));
  return k;
}

std::string fingerprint(X509* x) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  X509_digest(x, EVP_sha256(), md, &n);
  std::string out;
  for (unsigned int i = 0; i < n; ++i) out += fmt::format("{}{:02x}", i ? ":" : "", md[i]);
  return out;
}

// That `ca` signed `cert` and that both are valid now (a chain of the two).
void verify(X509* ca, X509* cert, const fs::path& ca_path, const fs::path& cert_path) {
  std::unique_ptr<X509_STORE, free_store> store(X509_STORE_new());
  std::unique_ptr<X509_STORE_CTX, free_store_ctx> ctx(X509_STORE_CTX_new());
  if (!store || !ctx || X509_STORE_add_cert(store.get(), ca) != 1 || X509_STORE_CTX_init(ctx.get(), store.get(), cert, nullptr) != 1)
    throw std::runtime_error(ssl_errors());
  if (X509_verify_cert(ctx.get()) != 1)
    throw std::invalid_argument(fmt::format("{} is not a certificate that {} vouches for: {}", cert_path.string(), ca_path.string(),
                                            X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx.get()))));
}
}  // namespace

tls_files check_tls_dir(const std::string& dir) {
  const fs::path d(dir);
  if (!fs::is_directory(d)) throw std::invalid_argument(fmt::format("{}: not a folder (make one with hotcold keygen --tls {})", dir, dir));
  tls_files f{(d / "ca.pem").string(), (d / "member.pem").string(), (d / "member.key").string()};
  for (const auto& p : {f.ca, f.cert, f.key})
    if (!fs::exists(p)) throw std::invalid_argument(fmt::format("{}: missing (a folder of hotcold keygen --tls holds ca.pem, member.pem and member.key)", p));
  auto ca = read_cert(f.ca);
  auto cert = read_cert(f.cert);
  auto key = read_key(f.key);
  if (X509_check_private_key(cert.get(), key.get()) != 1) throw std::invalid_argument(fmt::format("{} is not the key of {}", f.key, f.cert));
  verify(ca.get(), cert.get(), f.ca, f.cert);
  struct stat st {};
  if (::stat(f.key.c_str(), &st) == 0 && (st.st_mode & 077) != 0)
    throw std::invalid_argument(fmt::format("{}: others may read this private key (mode {:o}); chmod 600 it", f.key, st.st_mode & 0777));
  return f;
}

std::string make_tls_dir(const std::string& dir, const std::string& ca_dir, const std::string& name) {
  const fs::path d(dir);
  fs::create_directories(d);
  for (const char* file : {"member.pem", "member.key"})
    if (fs::exists(d / file)) throw std::invalid_argument(fmt::format("{}: already there; a new member goes into a folder of its own", (d / file).string()));
  x509_ptr ca;
  pkey_ptr ca_key;
  if (ca_dir.empty()) {
    if (fs::exists(d / "ca.pem") || fs::exists(d / "ca.key"))
      throw std::invalid_argument(fmt::format("{}: holds an authority already (give --ca {} to sign a member with it)", dir, dir));
    ca_key = make_key();
    ca = make_cert(ca_key.get(), "hotcold stage authority", nullptr, ca_key.get(), true);
    write_key(d / "ca.key", ca_key.get());
    write_cert(d / "ca.pem", ca.get());
  } else {
    const fs::path c(ca_dir);
    ca = read_cert(c / "ca.pem");
    ca_key = read_key(c / "ca.key");
    if (X509_check_private_key(ca.get(), ca_key.get()) != 1)
      throw std::invalid_argument(fmt::format("{} is not the key of {}", (c / "ca.key").string(), (c / "ca.pem").string()));
    if (fs::absolute(c) != fs::absolute(d)) {
      if (fs::exists(d / "ca.pem")) throw std::invalid_argument(fmt::format("{}: already there", (d / "ca.pem").string()));
      write_cert(d / "ca.pem", ca.get());
    }
  }
  auto key = make_key();
  auto cert = make_cert(key.get(), name, ca.get(), ca_key.get(), false);
  write_key(d / "member.key", key.get());
  write_cert(d / "member.pem", cert.get());
  return fingerprint(cert.get());
}

}  // namespace hotcold::actors
