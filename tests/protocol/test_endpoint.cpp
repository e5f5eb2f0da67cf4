#include <gtest/gtest.h>

#include "protocol/endpoint.hpp"

namespace hotcold::protocol {
namespace {

TEST(Endpoint, ParsesTransports) {
  auto t = parse_endpoint("tcp://127.0.0.1:5555");
  EXPECT_EQ(t.kind, transport::tcp);
  EXPECT_EQ(t.host, "127.0.0.1");
  EXPECT_EQ(t.port, 5555);
  auto v6 = parse_endpoint("tcp://[::1]:80");
  EXPECT_EQ(v6.host, "::1");
  EXPECT_EQ(v6.port, 80);
  auto i = parse_endpoint("ipc:///tmp/hotcold.sock");
  EXPECT_EQ(i.kind, transport::ipc);
  EXPECT_EQ(i.path, "/tmp/hotcold.sock");
  EXPECT_EQ(parse_endpoint("inproc://x").kind, transport::inproc);
}

TEST(Endpoint, LoopbackOnlyWhenOnlyThisMachineCanReachIt) {
  EXPECT_TRUE(parse_endpoint("tcp://127.0.0.1:1").is_loopback());
  EXPECT_TRUE(parse_endpoint("tcp://127.8.9.10:1").is_loopback());
  EXPECT_TRUE(parse_endpoint("tcp://localhost:1").is_loopback());
  EXPECT_TRUE(parse_endpoint("tcp://[::1]:1").is_loopback());
  EXPECT_TRUE(parse_endpoint("ipc:///tmp/s").is_loopback());
  EXPECT_FALSE(parse_endpoint("tcp://*:5555").is_loopback());
  EXPECT_FALSE(parse_endpoint("tcp://0.0.0.0:5555").is_loopback());
  EXPECT_FALSE(parse_endpoint("tcp://10.0.0.1:5555").is_loopback());
  EXPECT_FALSE(parse_endpoint("tcp://128.0.0.1:5555").is_loopback());
  EXPECT_FALSE(parse_endpoint("tcp://eth0:5555").is_loopback());
}

// ZeroMQ binds a host name as an interface ("No such device" for localhost) and an IPv6 address only
// with its ipv6 option: the addresses it is given instead.
TEST(Endpoint, WhatZeroMQIsGiven) {
  EXPECT_EQ(parse_endpoint("tcp://localhost:5555").zmq_address(), "tcp://127.0.0.1:5555");
  EXPECT_FALSE(parse_endpoint("tcp://localhost:5555").needs_ipv6());
  EXPECT_EQ(parse_endpoint("tcp://[::1]:5555").zmq_address(), "tcp://[::1]:5555");
  EXPECT_TRUE(parse_endpoint("tcp://[::1]:5555").needs_ipv6());
  EXPECT_EQ(parse_endpoint("tcp://127.0.0.1:7").zmq_address(), "tcp://127.0.0.1:7");
  EXPECT_EQ(parse_endpoint("ipc:///tmp/s").zmq_address(), "ipc:///tmp/s");
  EXPECT_FALSE(parse_endpoint("ipc:///tmp/s").needs_ipv6());
}

TEST(Endpoint, RefusesMalformedEndpoints) {
  for (const char* bad : {"127.0.0.1:5555", "udp://127.0.0.1:1", "tcp://127.0.0.1", "tcp://127.0.0.1:0",
                          "tcp://127.0.0.1:65536", "tcp://127.0.0.1:12ab", "tcp://:5555", "ipc://"}) {
    EXPECT_THROW(parse_endpoint(bad), std::invalid_argument) << bad;
  }
  try {
    parse_endpoint("tcp://127.0.0.1:99999");
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("port must be a number from 1 to 65535"), std::string::npos);
  }
}

}  // namespace
}  // namespace hotcold::protocol
