#pragma once
// What a web page in the user's browser may make serve's HTTP side do (docs/openai-api.md,
// "Browsers"). A page on another site can send a "simple" POST to http://127.0.0.1:PORT without
// asking first, and by DNS rebinding (its own name, answered with 127.0.0.1) it can read the answers
// too. So, as Jupyter, VS Code and Ollama do:
// - Host: a target no key or token guards answers only requests whose Host names this machine (a
//   loopback address, `localhost`; on an outward address, any IP address) or one of --allowed-hosts;
//   a rebinding page's requests carry the page's own name and are refused.
// - Origin: a request that a page sent (it carries Origin) is served only when that origin is the
//   server's own (the same scheme, host and port as its Host), one of --cors-origins, or, without
//   that option, a loopback origin; `*` (any origin) only when keys guard the server. Programs (curl,
//   SDKs) send no Origin and are served as before.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hotcold::server {

// The host of a Host header value or of an origin's authority ("localhost:8080", "[::1]:80",
// "127.0.0.1"): without its port and brackets, in lower case.
std::string host_of(std::string_view authority);

// A name that only this machine answers to: `localhost` or an IP literal in 127.0.0.0/8 or ::1.
bool loopback_host(std::string_view host);

struct browser_guard {
  std::vector<std::string> allowed_hosts;  // more Host names (with or without :PORT) that are served
  // Served on an address other machines reach: a Host that is any IP address is served too (a page
  // that rebinds a name sends that name; an address names a machine, not a page's site).
  bool any_ip_host = false;
  std::vector<std::string> origins;        // --cors-origins: scheme://host[:port], or "*"; empty: loopback origins
  // Why a request with this Host is refused on a target that no key guards (nullopt: served). An
  // absent Host (no browser sends none) is served.
  std::optional<std::string> refuse_host(std::string_view host) const;
  // Why a request with this Origin is refused (nullopt: served; an absent Origin is served).
  std::optional<std::string> refuse_origin(std::string_view origin, std::string_view host) const;
  bool any_origin() const;
};

// The --cors-origins list (comma-separated): each `*`, or scheme://host[:port] with scheme http or
// https and no path. Throws std::invalid_argument naming the entry that is not one.
std::vector<std::string> parse_cors_origins(const std::vector<std::string>& given);

// The --allowed-hosts list (comma-separated): each a host name or address, with or without :PORT.
// Throws std::invalid_argument naming the entry that is not one.
std::vector<std::string> parse_allowed_hosts(const std::vector<std::string>& given);

}  // namespace hotcold::server
