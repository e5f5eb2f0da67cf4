// Stage links beyond loopback (docs/distributed.md): TLS with certificates on both sides, and
// workers in network namespaces of their own with a delay between them.
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "tests/launcher/workers_fixture.hpp"

namespace hotcold::test {
namespace {

// A TCP relay on loopback that keeps every byte passing through it, both ways: from port `at` (0:
// one the system picks) to port `to`; with a rate, each way of each connection passes at most that
// many bytes a second (a slow link, where flows are paced apart as fq_codel does).
class recording_relay {
 public:
  explicit recording_relay(uint16_t to, uint16_t at = 0, double bytes_per_second = 0) : to_(to), rate_(bytes_per_second) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET, a.sin_addr.s_addr = htonl(INADDR_LOOPBACK), a.sin_port = htons(at);
    if (bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd_, 8) != 0) return;
    socklen_t n = sizeof a;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &n);
    port_ = ntohs(a.sin_port);
    accepting_ = std::thread([this] { accept_all(); });
  }
  ~recording_relay() {
    shutdown(fd_, SHUT_RDWR);
    if (accepting_.joinable()) accepting_.join();
    close(fd_);
    {
      std::lock_guard lock(mutex_);
      for (int s : sockets_) shutdown(s, SHUT_RDWR);
    }
    for (auto& t : pumps_) t.join();
    for (int s : sockets_) close(s);
  }
  bool listening() const { return port_ != 0; }
  uint16_t port() const { return port_; }
  std::string address() const { return "tcp://127.0.0.1:" + std::to_string(port_); }
  std::string bytes() const {
    std::lock_guard lock(mutex_);
    return seen_;
  }

 private:
  void accept_all() {
    for (;;) {
      const int in = accept(fd_, nullptr, nullptr);
      if (in < 0) return;
      const int out = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET, a.sin_addr.s_addr = htonl(INADDR_LOOPBACK), a.sin_port = htons(to_);
      if (connect(out, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        close(in), close(out);
        continue;
      }
      std::lock_guard lock(mutex_);
      sockets_.push_back(in), sockets_.push_back(out);
      pumps_.emplace_back([this, in, out] { pump(in, out); });
      pumps_.emplace_back([this, in, out] { pump(out, in); });
    }
  }
  void pump(int from, int to) {
    char buf[65536];
    for (ssize_t n; (n = read(from, buf, sizeof buf)) > 0;) {
      {
        std::lock_guard lock(mutex_);
        seen_.append(buf, static_cast<size_t>(n));
      }
      for (ssize_t sent = 0; sent < n;) {
        const ssize_t piece = rate_ > 0 ? std::min<ssize_t>(n - sent, 512) : n - sent;
        if (rate_ > 0) std::this_thread::sleep_for(std::chrono::duration<double>(static_cast<double>(piece) / rate_));
        const ssize_t w = send(to, buf + sent, static_cast<size_t>(piece), MSG_NOSIGNAL);  // (a closed end: an error, not SIGPIPE)
        if (w <= 0) return;
        sent += w;
      }
    }
    shutdown(to, SHUT_WR);
  }
  uint16_t to_, port_ = 0;
  double rate_ = 0;
  int fd_ = -1;
  std::thread accepting_;
  mutable std::mutex mutex_;
  std::vector<std::thread> pumps_;
  std::vector<int> sockets_;
  std::string seen_;
};

// Relays to a worker's CAF port and to its data port after it, on two ports one after the other
// (a coordinator reaches the data at the port after the one it was given).
struct relay_pair {
  std::unique_ptr<recording_relay> link, data;
  explicit relay_pair(uint16_t to, double bytes_per_second = 0) {
    for (int i = 0; i < 64 && !data; ++i) {
      auto l = std::make_unique<recording_relay>(to, 0, bytes_per_second);
      if (!l->listening() || l->port() == 65535) continue;
      auto d = std::make_unique<recording_relay>(static_cast<uint16_t>(to + 1), static_cast<uint16_t>(l->port() + 1), bytes_per_second);
      if (d->listening()) link = std::move(l), data = std::move(d);
    }
    EXPECT_TRUE(data) << "no two free ports one after the other";
  }
};

// Links beyond loopback: a worker listening for other hosts needs --allow-remote and --tls, a
// coordinator linking to another host --workers-tls. Over TLS (certificates of hotcold keygen --tls
// on both sides) the text is one process's and nothing of the protocol passes in clear, where a
// plain link shows it; a coordinator with another authority's certificate, or none, is refused.
// A process's resident memory in bytes (VmRSS).
uint64_t resident_bytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  return 0;
}

// Connects to port, reads what the worker sends first where it does (BASP's server handshake; TLS
// waits for the peer), sends a BASP header announcing a 1 GiB payload; returns the socket.
int announce_a_gib(uint16_t port, bool read_first) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET, a.sin_addr.s_addr = htonl(INADDR_LOOPBACK), a.sin_port = htons(port);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  timeval t{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &t, sizeof t);
  char first[4096];
  if (read_first) EXPECT_GT(recv(fd, first, sizeof first, 0), 0);
  const uint8_t header[32] = {1, 0, 0, 0, 0x40, 0, 0, 0};  // operation 1 (server handshake), payload_len 2^30 big-endian, the rest 0
  EXPECT_EQ(send(fd, header, sizeof header, MSG_NOSIGNAL), 32);
  return fd;
}

// What a peer that has not said who it is can make a worker hold is bounded: twenty connections, each
// announcing a 1 GiB message after CAF's handshake, raised a plain worker from ~40 MB to ~1.1 GB a
// connection before; now each is closed at that header and the worker stays within 64 MiB of where it
// was, then serves a coordinator as before. Over TLS the header never reaches CAF (the peer has no
// certificate), and the memory stays where it was too.
TEST(Workers, APeerThatSaysNothingCannotMakeAWorkerHoldMuch) {
  const auto& f = files();
  const auto dir = fs::temp_directory_path() / ("hotcold-guard-tls-" + std::to_string(getpid()));
  fs::remove_all(dir);
  ASSERT_NE(run_capture(std::string(HOTCOLD_BIN) + " keygen --tls " + (dir / "ca").string() + " 2>&1; echo rc=$?").find("rc=0"), std::string::npos);
  for (const bool tls : {false, true}) {
    SCOPED_TRACE(tls ? "TLS" : "plain");
    std::vector<std::string> args{"--listen", "tcp://127.0.0.1:0", "-m", f.dense, "-t", "1"};
    if (tls) args.insert(args.end(), {"--tls", (dir / "ca").string()});
    server_process w(args, "worker");
    const std::string addr = worker_address(w);
    ASSERT_FALSE(addr.empty());
    const uint64_t before = resident_bytes(w.pid());
    std::vector<int> fds;
    for (int i = 0; i < 20; ++i) fds.push_back(announce_a_gib(port_of(addr), !tls));
    std::this_thread::sleep_for(1s);
    const uint64_t after = resident_bytes(w.pid());
    EXPECT_LT(after, before + (uint64_t{64} << 20)) << before << " -> " << after;
    int closed = 0;
    for (int fd : fds) {
      char c;
      closed += !tls && recv(fd, &c, 1, 0) == 0;  // (over TLS the bytes are a handshake that never completes)
      close(fd);
    }
    if (!tls) EXPECT_EQ(closed, 20) << "connections the worker closed";
    // A coordinator is served as before.
    std::vector<std::string> gen{"run", "-m", f.dense, "-p", "Once upon a time", "-n", "6", "--temp", "0", "-c", "64", "-t", "1"};
    const std::string alone = run_stdout(gen);
    gen.insert(gen.end(), {"--workers", addr});
    if (tls) gen.insert(gen.end(), {"--workers-tls", (dir / "ca").string()});
    EXPECT_EQ(run_stdout(gen), alone) << w.log();
  }
  fs::remove_all(dir);
}

TEST(Workers, TlsLinksAdmitOnlyTheirAuthorityAndCarryNothingInClear) {
  const auto& f = files();
  const auto dir = fs::temp_directory_path() / ("hotcold-tls-" + std::to_string(getpid()));
  fs::remove_all(dir);
  const std::string c1 = (dir / "c1").string(), c2 = (dir / "c2").string(), other = (dir / "other").string();
  const auto keygen = [](const std::string& args) { return run_capture(std::string(HOTCOLD_BIN) + " keygen " + args + " 2>&1; echo rc=$?"); };
  EXPECT_NE(keygen("--tls " + c1).find("rc=0"), std::string::npos);
  EXPECT_NE(keygen("--tls " + c2 + " --ca " + c1).find("rc=0"), std::string::npos);
  EXPECT_NE(keygen("--tls " + other).find("rc=0"), std::string::npos);
  EXPECT_NE(keygen("--tls " + c2 + " --ca " + c1).find("already there"), std::string::npos);
  EXPECT_TRUE(fs::exists(dir / "c1" / "ca.key"));
  EXPECT_FALSE(fs::exists(dir / "c2" / "ca.key"));  // (the authority's key stays where it was made)
  EXPECT_EQ(fs::status(dir / "c2" / "member.key").permissions() & (fs::perms::group_all | fs::perms::others_all), fs::perms::none);

  server_process w({"--listen", "tcp://0.0.0.0:0", "--allow-remote", "--tls", c1, "-m", f.dense, "-t", "1"}, "worker");
  const std::string addr = worker_address(w);
  ASSERT_FALSE(addr.empty());
  const std::vector<std::string> gen{"run", "-m", f.dense, "-p", "Once upon a time there was", "-n", "12", "--temp", "0", "-c", "64", "-t", "1"};
  const std::string alone = run_stdout(gen);
  ASSERT_FALSE(alone.empty());
  // ZeroMQ's greeting names the mechanism in clear; a plain (NULL) connection's READY then shows its
  // socket type, a CurveZMQ one's is encrypted.
  {
    relay_pair relay(port_of(addr));
    ASSERT_TRUE(relay.data);
    auto args = gen;
    args.insert(args.end(), {"--workers", relay.link->address(), "--workers-tls", c2});
    EXPECT_EQ(run_stdout(args), alone) << w.log();
    const std::string seen = relay.link->bytes(), data = relay.data->bytes();
    EXPECT_EQ(seen.find("stage protocol"), std::string::npos);
    EXPECT_GT(data.size(), 12u * 128 * 4);  // (the residual streams passed there)
    EXPECT_NE(data.find("CURVE"), std::string::npos);
    EXPECT_EQ(data.find("Socket-Type"), std::string::npos);
  }
  {  // The same through a plain link shows the handshake's versions and the sockets' types: the checks above can fail.
    server_process plain({"--listen", "tcp://127.0.0.1:0", "-m", f.dense, "-t", "1"}, "worker");
    const std::string paddr = worker_address(plain);
    ASSERT_FALSE(paddr.empty());
    relay_pair relay(port_of(paddr));
    ASSERT_TRUE(relay.data);
    auto args = gen;
    args.insert(args.end(), {"--workers", relay.link->address()});
    EXPECT_EQ(run_stdout(args), alone);
    EXPECT_NE(relay.link->bytes().find("stage protocol"), std::string::npos);
    EXPECT_GT(relay.data->bytes().size(), 12u * 128 * 4);
    EXPECT_NE(relay.data->bytes().find("Socket-Type"), std::string::npos);
    // A stranger on the plain data port (any local user can reach it) without the assignment's
    // token gets why, not a step, and the worker serves its next coordinator.
    zmq::context_t ctx;
    zmq::socket_t d(ctx, zmq::socket_type::dealer);
    d.set(zmq::sockopt::rcvtimeo, 5000);
    d.connect("tcp://127.0.0.1:" + std::to_string(port_of(paddr) + 1));
    const uint64_t head[2] = {1, 1};
    const int64_t zero = 0;
    const std::vector<float> x(128, 1.0f);
    std::vector<zmq::message_t> f;
    f.emplace_back(head, sizeof head), f.emplace_back(std::string("0123456789abcdef0123456789abcdef"));
    f.emplace_back(&zero, sizeof zero), f.emplace_back(&zero, sizeof zero), f.emplace_back(x.data(), x.size() * sizeof(float));
    f.emplace_back();  // (no cache ops)
    zmq::send_multipart(d, f);
    std::vector<zmq::message_t> back;
    ASSERT_TRUE(zmq::recv_multipart(d, std::back_inserter(back)));
    ASSERT_EQ(back.size(), 2u);
    EXPECT_EQ(back[1].to_string(), "a step of another assignment (this worker's layers were assigned again since)");
    EXPECT_EQ(run_stdout(args), alone);
  }
  const std::string local = "tcp://127.0.0.1:" + std::to_string(port_of(addr));
  const std::string run = std::string(HOTCOLD_BIN) + " run -m '" + f.dense + "' -p Hello -n 2 -c 64 -t 1 --workers " + local;
  const std::string stranger = run_capture(run + " --workers-tls '" + other + "' 2>&1 >/dev/null");
  EXPECT_NE(stranger.find("cannot connect"), std::string::npos) << stranger;
  const std::string clear = run_capture(run + " 2>&1 >/dev/null");
  EXPECT_NE(clear.find("one side speaks TLS and the other not"), std::string::npos) << clear;
  EXPECT_EQ(w.log().find("said hello"), w.log().rfind("said hello")) << w.log();  // (one coordinator got in)

  const std::string remote = run_capture(std::string(HOTCOLD_BIN) + " run -m '" + f.dense + "' -p Hello -n 2 --workers tcp://192.0.2.1:7001 2>&1");
  EXPECT_NE(remote.find("give --workers-tls DIR"), std::string::npos) << remote;
  server_process bare({"--listen", "tcp://0.0.0.0:0", "--allow-remote", "-m", f.dense}, "worker");
  EXPECT_EQ(bare.wait_exit(30s), 2);
  EXPECT_NE(bare.log().find("give --tls DIR"), std::string::npos) << bare.log();
  fs::permissions(dir / "c2" / "member.key", fs::perms::others_read, fs::perm_options::add);
  const std::string loose = run_capture(run + " --workers-tls '" + c2 + "' 2>&1");
  EXPECT_NE(loose.find("others may read this private key"), std::string::npos) << loose;
  EXPECT_EQ(w.stop(), 0) << w.log();
  fs::remove_all(dir);
}

// A step whose frames take longer to cross a slow link than the heartbeat's timeout is not a hung
// worker: the activations have a connection of their own, so the link's pings and their answers do
// not wait behind them (with the activations on the CAF connection they did, and the run ended with
// "no answer to a heartbeat"). Here 4 KB/s each way: the prompt's step is ~11 KB, ~2.8 s a way.
TEST(Workers, ALongStepOnASlowLinkIsNotAHang) {
  const auto& f = files();
  server_process w({"--listen", "tcp://127.0.0.1:0", "-m", f.dense, "-t", "1"}, "worker");
  const std::string addr = worker_address(w);
  ASSERT_FALSE(addr.empty());
  const std::string prompt = "the quick brown fox jumps over the lazy dog, the quick brown fox jumps over the lazy dog";
  const std::vector<std::string> gen{"run", "-m", f.dense, "-p", prompt, "-n", "3", "--temp", "0", "-c", "64", "-t", "1"};
  const std::string alone = run_stdout(gen);
  relay_pair relay(port_of(addr), 4000);
  ASSERT_TRUE(relay.data);
  auto args = gen;
  args.insert(args.end(), {"--workers", relay.link->address()});
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(run_stdout(args), alone) << w.log();
  EXPECT_GT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);  // (the link was that slow)
  EXPECT_GT(relay.data->bytes().size(), 2u * 16 * 128 * 4);
}

// Network namespaces with a delay between them (ip netns, veth pairs, tc netem), torn down after.
class netns_lab {
 public:
  // n namespaces, each with a veth pair to this one: 10.77.K.1 here, 10.77.K.2 there (K from 1), and
  // `delay` of netem on both ends (each way). ok() is false where the machine does not allow the
  // namespaces; delayed() where its kernel has no netem (the links then have no added delay).
  netns_lab(int n, const std::string& delay) {
    const std::string tag = std::to_string(getpid() % 100000);
    for (int k = 1; k <= n; ++k) {
      const std::string ns = "hc" + tag + "n" + std::to_string(k), here = "hc" + tag + "h" + std::to_string(k), there = "hc" + tag + "t" + std::to_string(k);
      const std::string net = "10.77." + std::to_string(k) + ".";
      names_.push_back(ns), links_.push_back(here);
      const std::string script = "ip netns add " + ns + " && ip link add " + here + " type veth peer name " + there + " && ip link set " + there + " netns " + ns +
                                 " && ip addr add " + net + "1/24 dev " + here + " && ip link set " + here + " up && ip netns exec " + ns + " ip addr add " + net +
                                 "2/24 dev " + there + " && ip netns exec " + ns + " ip link set " + there + " up && ip netns exec " + ns +
                                 " ip link set lo up";
      if (std::system(("(" + script + ") >/dev/null 2>&1").c_str()) != 0) {
        why_ = "cannot make network namespaces here (needs root and ip): " + script;
        return;
      }
      const std::string netem = "tc qdisc add dev " + here + " root netem delay " + delay + " && ip netns exec " + ns + " tc qdisc add dev " + there +
                                " root netem delay " + delay;
      delayed_ = (k == 1 || delayed_) && std::system(("(" + netem + ") >/dev/null 2>&1").c_str()) == 0;
    }
    ok_ = true;
  }
  ~netns_lab() {
    for (size_t k = 0; k < names_.size(); ++k)
      std::system(("ip link del " + links_[k] + " >/dev/null 2>&1; ip netns del " + names_[k] + " >/dev/null 2>&1").c_str());
  }
  bool ok() const { return ok_; }
  bool delayed() const { return delayed_; }
  const std::string& why() const { return why_; }
  const std::string& ns(int k) const { return names_[static_cast<size_t>(k - 1)]; }

 private:
  std::vector<std::string> names_, links_;
  bool ok_ = false, delayed_ = false;
  std::string why_;
};

// A command run in a namespace in the background, its stderr in a file; SIGTERM at the end.
class netns_process {
 public:
  netns_process(const std::string& ns, const std::string& args) {
    log_ = (fs::temp_directory_path() / ("hotcold-netns-" + std::to_string(getpid()) + "-" + ns + ".err")).string();
    pid_ = std::stoi(run_capture("ip netns exec " + ns + " " + HOTCOLD_BIN + " " + args + " >/dev/null 2>'" + log_ + "' & echo $!"));
  }
  ~netns_process() {
    kill(pid_, SIGTERM);
    for (int i = 0; i < 100 && running(); ++i) std::this_thread::sleep_for(50ms);
    kill(pid_, SIGKILL);
    fs::remove(log_);
  }
  std::string log() const {
    std::ifstream in(log_);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  int pid() const { return pid_; }
  // Not ended (nor ended and waiting to be reaped: it is not this process's child).
  bool running() const {
    std::ifstream stat("/proc/" + std::to_string(pid_) + "/stat");
    std::string pid, name, state;
    return stat >> pid >> name >> state && state != "Z";
  }

 private:
  std::string log_;
  int pid_ = -1;
};

// Two workers in network namespaces of their own, 1 ms of netem delay each way on their links, over
// TLS (addresses beyond loopback): the text is one process's, every trip to a stage takes at least
// the 2 ms the delay adds (the hop the trace records: the round trip less the worker's compute), and
// a worker killed there ends the run naming its stage. Skips where namespaces cannot be made; where
// the kernel has no netem the links have no delay and its check is left out (said on stdout).
TEST(Workers, StagesInNetworkNamespacesWithADelay) {
  netns_lab lab(2, "1ms");
  if (!lab.ok()) GTEST_SKIP() << lab.why();
  const auto& f = files();
  const auto dir = fs::temp_directory_path() / ("hotcold-netns-tls-" + std::to_string(getpid()));
  fs::remove_all(dir);
  const std::string ca = (dir / "ca").string(), one = (dir / "one").string(), two = (dir / "two").string();
  for (const std::string& args : {"--tls " + ca, "--tls " + one + " --ca " + ca, "--tls " + two + " --ca " + ca})
    ASSERT_EQ(std::system((std::string(HOTCOLD_BIN) + " keygen " + args + " >/dev/null 2>&1").c_str()), 0);
  netns_process a(lab.ns(1), "worker --listen tcp://10.77.1.2:7001 --allow-remote --tls '" + one + "' -m '" + f.dense + "' -t 1");
  netns_process b(lab.ns(2), "worker --listen tcp://10.77.2.2:7001 --allow-remote --tls '" + two + "' -m '" + f.dense + "' -t 1");
  for (auto* w : {&a, &b})
    for (int i = 0; i < 600 && w->log().find("listening on") == std::string::npos; ++i) std::this_thread::sleep_for(50ms);
  ASSERT_NE(b.log().find("listening on tcp://10.77.2.2:7001"), std::string::npos) << a.log() << b.log();
  const std::string workers = "tcp://10.77.1.2:7001,tcp://10.77.2.2:7001";
  const std::string trace = (dir / "trace.json").string();
  const std::vector<std::string> gen{"run", "-m", f.dense, "-p", "Once upon a time there was", "-n", "8", "--temp", "0", "-c", "64", "-t", "1"};
  auto args = gen;
  args.insert(args.end(), {"--workers", workers, "--workers-tls", ca, "--trace-out", trace});
  EXPECT_EQ(run_stdout(args), run_stdout(gen)) << a.log() << b.log();
  std::ifstream in(trace);
  ASSERT_TRUE(in.good());
  int trips = 0;
  double shortest = 1e9;
  std::map<std::pair<int64_t, int64_t>, double> hop_us;  // (step, first layer): both halves
  const auto events = nlohmann::json::parse(in)["traceEvents"];
  for (const auto& e : events)
    if (e["name"] == "stage_hop") hop_us[{e["args"]["step"].get<int64_t>(), e["args"]["layer"].get<int64_t>()}] += e["dur"].get<double>();
  for (const auto& [key, us] : hop_us) ++trips, shortest = std::min(shortest, us);
  EXPECT_EQ(trips, 2 * 8);  // (8 steps: the prompt and seven tokens, through two stages)
  if (lab.delayed()) EXPECT_GE(shortest, 2000.0);  // 1 ms each way
  else std::cout << "(no netem in this kernel: the namespaces' links have no delay; shortest hop " << shortest << " us)\n";
  // A worker gone there: the run ends naming the stage (killed once this run's layers are assigned:
  // the first run's assignment is in the log already).
  auto assignments = [&] {
    const std::string log = b.log();
    int n = 0;
    for (size_t at = log.find("runs layers"); at != std::string::npos; at = log.find("runs layers", at + 1)) ++n;
    return n;
  };
  const int before = assignments();
  server_process run({"-m", f.dense, "-p", "Hello", "-n", "100000", "--temp", "0", "-c", "4096", "-t", "1", "--workers", workers, "--workers-tls", ca, "--split", "2,2"},
                     "run");
  for (int i = 0; i < 600 && assignments() == before; ++i) std::this_thread::sleep_for(50ms);
  std::this_thread::sleep_for(300ms);
  kill(b.pid(), SIGKILL);
  EXPECT_EQ(run.wait_exit(10s), 1) << run.log();
  EXPECT_NE(run.log().find("stage tcp://10.77.2.2:7001 (layers 2-3)"), std::string::npos) << run.log();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace hotcold::test
