#pragma once
// The keys of stage links between hosts (docs/distributed.md): mutual TLS through CAF's OpenSSL
// module. Every host of a cluster holds a folder made by `hotcold keygen --tls DIR`:
//   ca.pem       the cluster's certificate authority (the one each side trusts; nothing else)
//   member.pem   this host's certificate, signed by that authority
//   member.key   its private key (mode 0600)
//   ca.key       the authority's private key: only in the folder that made the authority; whoever
//                holds it can make members, so it stays on the machine that issues them
// A coordinator and a worker talk only when each shows a certificate signed by the authority the
// other trusts: a connection without one, or with another cluster's, fails its TLS handshake.
#include <string>

namespace hotcold::actors {

struct tls_files {
  std::string ca, cert, key;  // paths of ca.pem, member.pem, member.key
};

// The folder's files, after checking that they are there and readable as PEM, that member.key is
// the key of member.pem and that ca.pem signed member.pem (and that it has not expired).
// std::invalid_argument naming the file and what is wrong with it.
tls_files check_tls_dir(const std::string& dir);

// Makes the folder `dir` (created if missing; refuses to overwrite a member already there). With
// ca_dir empty: a new authority (ca.pem, ca.key) and a member signed by it. Else a member signed by
// ca_dir's authority (its ca.pem and ca.key), with a copy of ca.pem but not of ca.key. Keys: EC
// P-256; certificates valid for ten years; `name` is the member's common name (for people reading
// the certificate; links check the signature, not names). Returns the SHA-256 fingerprint of the
// member's certificate. std::runtime_error or std::invalid_argument naming what failed.
std::string make_tls_dir(const std::string& dir, const std::string& ca_dir, const std::string& name);

}  // namespace hotcold::actors
