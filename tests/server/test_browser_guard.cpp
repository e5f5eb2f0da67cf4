// What web pages may make serve's HTTP side do: the Host and Origin rules on their own (the server
// applies them in tests/server/test_serve_browsers.cpp).
#include <gtest/gtest.h>

#include <stdexcept>

#include "server/browser_guard.hpp"

namespace {

using hotcold::server::browser_guard;
using hotcold::server::host_of;
using hotcold::server::loopback_host;
using hotcold::server::parse_allowed_hosts;
using hotcold::server::parse_cors_origins;

TEST(BrowserGuard, HostsOfHeadersAndOrigins) {
  EXPECT_EQ(host_of("LocalHost:8080"), "localhost");
  EXPECT_EQ(host_of("127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(host_of("[::1]:8080"), "::1");
  EXPECT_EQ(host_of("::1"), "::1");  // no brackets: all of it is the address
  EXPECT_TRUE(loopback_host("localhost"));
  EXPECT_TRUE(loopback_host("127.0.0.1"));
  EXPECT_TRUE(loopback_host("127.255.3.9"));
  EXPECT_TRUE(loopback_host("::1"));
  EXPECT_TRUE(loopback_host("::ffff:127.0.0.1"));
  EXPECT_FALSE(loopback_host("128.0.0.1"));
  EXPECT_FALSE(loopback_host("0.0.0.0"));  // browsers reach this machine by it, but it is no name of the loopback
  EXPECT_FALSE(loopback_host("localhost.evil.example"));
  EXPECT_FALSE(loopback_host("127.0.0.1.nip.io"));  // a rebinding service's name for 127.0.0.1
  EXPECT_FALSE(loopback_host("::2"));
}

// A rebinding page's requests carry its own name; programs and this machine's names are served.
TEST(BrowserGuard, HostsThatAreNotThisMachineAreRefused) {
  browser_guard g;
  EXPECT_FALSE(g.refuse_host("localhost:8080"));
  EXPECT_FALSE(g.refuse_host("127.0.0.1:8080"));
  EXPECT_FALSE(g.refuse_host("[::1]:8080"));
  EXPECT_FALSE(g.refuse_host(""));  // no Host at all: not a browser
  const auto why = g.refuse_host("attacker.example:8080");
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("attacker.example:8080"), std::string::npos) << *why;
  EXPECT_NE(why->find("--allowed-hosts"), std::string::npos) << *why;
  EXPECT_TRUE(g.refuse_host("192.168.1.5:8080"));  // an address other than loopback, on a loopback server
  g.any_ip_host = true;                              // ... served on an outward address
  EXPECT_FALSE(g.refuse_host("192.168.1.5:8080"));
  EXPECT_FALSE(g.refuse_host("[fe80::1]:8080"));
  EXPECT_TRUE(g.refuse_host("attacker.example:8080"));  // names still need the list

  g.allowed_hosts = parse_allowed_hosts({"Box.Lan, proxy.example:443"});
  EXPECT_FALSE(g.refuse_host("box.lan:8080"));  // a name without a port: any port
  EXPECT_FALSE(g.refuse_host("BOX.LAN"));
  EXPECT_FALSE(g.refuse_host("proxy.example:443"));
  EXPECT_TRUE(g.refuse_host("proxy.example:8443"));  // with a port: that one only
  EXPECT_TRUE(g.refuse_host("other.lan"));
  g.allowed_hosts = parse_allowed_hosts({"*"});
  EXPECT_FALSE(g.refuse_host("anything.example"));
  EXPECT_THROW(parse_allowed_hosts({"http://box.lan"}), std::invalid_argument);
  EXPECT_THROW(parse_allowed_hosts({"box.lan:80x"}), std::invalid_argument);
}

TEST(BrowserGuard, OriginsOfOtherSitesAreRefused) {
  browser_guard g;  // the default: pages of this machine
  EXPECT_FALSE(g.refuse_origin("", "localhost:8080"));  // curl, SDKs
  EXPECT_FALSE(g.refuse_origin("http://localhost:3000", "127.0.0.1:8080"));
  EXPECT_FALSE(g.refuse_origin("http://127.0.0.1:5173", "127.0.0.1:8080"));
  EXPECT_FALSE(g.refuse_origin("https://[::1]", "127.0.0.1:8080"));
  const auto why = g.refuse_origin("https://attacker.example", "127.0.0.1:8080");
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("https://attacker.example"), std::string::npos) << *why;
  EXPECT_NE(why->find("--cors-origins"), std::string::npos) << *why;
  EXPECT_TRUE(g.refuse_origin("null", "127.0.0.1:8080"));  // a file, a sandboxed frame
  EXPECT_TRUE(g.refuse_origin("file://", "127.0.0.1:8080"));
  EXPECT_TRUE(g.refuse_origin("http://localhost.attacker.example", "127.0.0.1:8080"));
  // The server's own pages (the dashboard) are always its own origin: the same host and port.
  EXPECT_FALSE(g.refuse_origin("http://box.lan:8080", "box.lan:8080"));
  EXPECT_FALSE(g.refuse_origin("http://box.lan", "box.lan:80"));  // a default port is left out of an origin
  EXPECT_TRUE(g.refuse_origin("http://box.lan:9090", "box.lan:8080"));

  // A list replaces the default: exactly those origins (a default port and a trailing / as written
  // either way), loopback ones no longer.
  g.origins = parse_cors_origins({"https://app.example:443/,http://tool.example:8000"});
  EXPECT_EQ(g.origins, (std::vector<std::string>{"https://app.example", "http://tool.example:8000"}));
  EXPECT_FALSE(g.refuse_origin("https://app.example", "127.0.0.1:8080"));
  EXPECT_FALSE(g.refuse_origin("HTTPS://APP.EXAMPLE", "127.0.0.1:8080"));
  EXPECT_FALSE(g.refuse_origin("http://tool.example:8000", "127.0.0.1:8080"));
  EXPECT_TRUE(g.refuse_origin("http://app.example", "127.0.0.1:8080"));  // another scheme
  EXPECT_TRUE(g.refuse_origin("http://tool.example:8001", "127.0.0.1:8080"));
  EXPECT_TRUE(g.refuse_origin("http://localhost:3000", "127.0.0.1:8080"));
  g.origins = parse_cors_origins({"*"});
  EXPECT_TRUE(g.any_origin());
  EXPECT_FALSE(g.refuse_origin("https://anyone.example", "127.0.0.1:8080"));
  EXPECT_THROW(parse_cors_origins({"app.example"}), std::invalid_argument);
  EXPECT_THROW(parse_cors_origins({"ftp://app.example"}), std::invalid_argument);
  EXPECT_THROW(parse_cors_origins({"https://app.example/path"}), std::invalid_argument);
}

}  // namespace
