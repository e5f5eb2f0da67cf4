#include "server/browser_guard.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include <fmt/format.h>

#include "protocol/text_file.hpp"

namespace hotcold::server {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// The port of an authority ("" when it has none).
std::string port_of(std::string_view authority) {
  if (!authority.empty() && authority.front() == '[') {
    const auto close = authority.find(']');
    if (close != std::string_view::npos && close + 1 < authority.size() && authority[close + 1] == ':') return std::string(authority.substr(close + 2));
    return {};
  }
  const auto colon = authority.rfind(':');
  if (colon == std::string_view::npos || authority.find(':') != colon) return {};
  return std::string(authority.substr(colon + 1));
}

bool all_digits(std::string_view s) { return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); }); }

// scheme://host[:port] in lower case, a default port (80 for http, 443 for https) left out; nullopt
// for anything else (a path, another scheme, no host).
struct origin_parts {
  std::string scheme, host, port;
  std::string text() const { return scheme + "://" + (host.find(':') != std::string::npos ? "[" + host + "]" : host) + (port.empty() ? "" : ":" + port); }
};
std::optional<origin_parts> parse_origin(std::string_view origin) {
  std::string o = lower(origin);
  if (!o.empty() && o.back() == '/') o.pop_back();
  const auto sep = o.find("://");
  if (sep == std::string::npos) return std::nullopt;
  origin_parts p;
  p.scheme = o.substr(0, sep);
  if (p.scheme != "http" && p.scheme != "https") return std::nullopt;
  const std::string authority = o.substr(sep + 3);
  if (authority.empty() || authority.find_first_of("/?#@ ") != std::string::npos) return std::nullopt;
  p.host = host_of(authority);
  p.port = port_of(authority);
  if (p.host.empty() || (!p.port.empty() && !all_digits(p.port))) return std::nullopt;
  if ((p.scheme == "http" && p.port == "80") || (p.scheme == "https" && p.port == "443")) p.port.clear();
  return p;
}

}  // namespace

std::string host_of(std::string_view authority) {
  if (!authority.empty() && authority.front() == '[') {
    const auto close = authority.find(']');
    return close == std::string_view::npos ? std::string() : lower(authority.substr(1, close - 1));
  }
  const auto colon = authority.rfind(':');
  if (colon != std::string_view::npos && authority.find(':') == colon) authority = authority.substr(0, colon);
  return lower(authority);
}

bool loopback_host(std::string_view host) {
  const std::string h = lower(host);
  if (h == "localhost") return true;
  in_addr v4{};
  if (::inet_pton(AF_INET, h.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, h.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

bool browser_guard::any_origin() const { return std::find(origins.begin(), origins.end(), "*") != origins.end(); }

std::optional<std::string> browser_guard::refuse_host(std::string_view host) const {
  if (host.empty()) return std::nullopt;
  const std::string name = host_of(host), whole = lower(host);
  if (loopback_host(name)) return std::nullopt;
  in_addr v4{};
  in6_addr v6{};
  if (any_ip_host && (::inet_pton(AF_INET, name.c_str(), &v4) == 1 || ::inet_pton(AF_INET6, name.c_str(), &v6) == 1)) return std::nullopt;
  for (const auto& a : allowed_hosts)
    if (a == "*" || a == whole || a == name) return std::nullopt;
  return fmt::format("Host '{}' is not this machine: what no key or token guards answers only requests addressed to localhost or a "
                     "loopback address (a web page can rebind its own name to 127.0.0.1); serve --allowed-hosts adds names",
                     host);
}

std::optional<std::string> browser_guard::refuse_origin(std::string_view origin, std::string_view host) const {
  if (origin.empty() || any_origin()) return std::nullopt;
  const auto refused = [&] {
    return fmt::format("the web page at '{}' may not use this server: its origin is not allowed (serve --cors-origins lists the origins "
                       "allowed; by default only pages served from this machine)",
                       origin);
  };
  const auto o = parse_origin(origin);
  if (!o) return refused();  // "null" (a file, a sandboxed frame) among them
  // The server's own pages: the same host and port as the request is addressed to.
  if (!host.empty()) {
    std::string own_port = port_of(host);
    if ((o->scheme == "http" && own_port == "80") || (o->scheme == "https" && own_port == "443")) own_port.clear();
    if (o->host == host_of(host) && o->port == own_port) return std::nullopt;
  }
  if (origins.empty()) return loopback_host(o->host) ? std::nullopt : std::optional<std::string>(refused());
  const std::string text = o->text();
  return std::find(origins.begin(), origins.end(), text) != origins.end() ? std::nullopt : std::optional<std::string>(refused());
}

namespace {

// Each given value split at commas, blanks trimmed, empty pieces dropped.
std::vector<std::string> comma_list(const std::vector<std::string>& given) {
  std::vector<std::string> out;
  for (const auto& g : given)
    for (size_t at = 0; at <= g.size();) {
      size_t end = g.find(',', at);
      if (end == std::string::npos) end = g.size();
      std::string piece = protocol::trim_blanks(g.substr(at, end - at));
      if (!piece.empty()) out.push_back(piece);
      at = end + 1;
    }
  return out;
}

}  // namespace

std::vector<std::string> parse_cors_origins(const std::vector<std::string>& given) {
  std::vector<std::string> out;
  for (const auto& e : comma_list(given)) {
    if (e == "*") {
      out.push_back(e);
      continue;
    }
    const auto o = parse_origin(e);
    if (!o) throw std::invalid_argument(fmt::format("--cors-origins: '{}' is not an origin (scheme://host[:port], the scheme http or https, no path; or *)", e));
    out.push_back(o->text());
  }
  return out;
}

std::vector<std::string> parse_allowed_hosts(const std::vector<std::string>& given) {
  std::vector<std::string> out;
  for (const auto& e : comma_list(given)) {
    if (e != "*" && (e.find_first_of("/?#@ ") != std::string::npos || host_of(e).empty() || (!port_of(e).empty() && !all_digits(port_of(e)))))
      throw std::invalid_argument(fmt::format("--allowed-hosts: '{}' is not a host name or address (with or without :PORT; or *)", e));
    out.push_back(lower(e));
  }
  return out;
}

}  // namespace hotcold::server
