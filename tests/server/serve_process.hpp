#pragma once
// What the `hotcold serve` tests share: the server as a child process, waiting for it, endpoints,
// `hotcold run`'s output as the reference, and a plain HTTP GET.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <functional>
#include <optional>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "clients/client.hpp"

extern char** environ;

namespace hotcold::test {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// What a shell command prints on stdout.
inline std::string run_capture(const std::string& cmd) {
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  for (size_t n; p && (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  if (p) pclose(p);
  return out;
}

// `hotcold run` as the reference: its stdout.
inline std::string run_stdout(const std::vector<std::string>& args) {
  std::string cmd = HOTCOLD_BIN;
  for (const auto& a : args) cmd += " '" + a + "'";
  return run_capture(cmd + " 2>/dev/null");
}

// A server process (`hotcold serve`, or another command that runs until a signal: `worker`) for the
// test's lifetime, its stderr in a file of its own.
class server_process {
 public:
  explicit server_process(std::vector<std::string> args, const std::string& command = "serve") {
    std::vector<std::string> all{HOTCOLD_BIN, command};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    static std::atomic<int> made{0};
    err_ = (fs::temp_directory_path() / ("hotcold-" + command + "-" + std::to_string(getpid()) + "-" + std::to_string(made++) + ".err")).string();
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (command != "serve") posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);  // (a run's text)
    EXPECT_EQ(posix_spawn(&pid_, HOTCOLD_BIN, &fa, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&fa);
  }
  // SIGTERM, then the exit status (-1 if it had to be killed).
  int stop() {
    if (pid_ <= 0) return -1;
    kill(pid_, SIGTERM);
    for (int i = 0; i < 300; ++i) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = 0;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(50ms);
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = 0;
    return -1;
  }
  // Whether it has ended by itself (then log() says why).
  bool ended() {
    int status = 0;
    if (pid_ <= 0) return true;
    if (waitpid(pid_, &status, WNOHANG) != pid_) return false;
    pid_ = 0;
    return true;
  }
  // The exit status once it ends by itself (-1 if not within `limit`).
  int wait_exit(std::chrono::milliseconds limit) {
    for (auto t = 0ms; t < limit; t += 50ms) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = 0;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(50ms);
    }
    return -1;
  }
  ~server_process() { stop(); }
  pid_t pid() const { return pid_; }
  // Resident memory now, in bytes (0 when it cannot be read).
  int64_t rss_bytes() const {
    FILE* f = std::fopen(("/proc/" + std::to_string(pid_) + "/status").c_str(), "r");
    if (!f) return 0;
    char line[256];
    int64_t kb = 0;
    while (std::fgets(line, sizeof line, f))
      if (std::sscanf(line, "VmRSS: %ld kB", &kb) == 1) break;
    std::fclose(f);
    return kb * 1024;
  }
  std::string log() const {
    FILE* f = std::fopen(err_.c_str(), "r");
    std::string s;
    char buf[4096];
    for (size_t n; f && (n = fread(buf, 1, sizeof buf, f)) > 0;) s.append(buf, n);
    if (f) std::fclose(f);
    return s;
  }

 private:
  pid_t pid_ = 0;
  std::string err_;
};

// Waits until the server answers health (it loads the model first). With `server`, a server that
// ended (a port taken, a bad flag) fails at once, with its log.
inline void wait_ready(const std::string& endpoint, server_process* server = nullptr) {
  for (int i = 0; i < 120; ++i) {
    if (server && server->ended()) FAIL() << "the server ended before answering health:\n" << server->log();
    try {
      hotcold::clients::client c(endpoint, 500ms);
      if (c.call("health").value("status", "") == "ok") return;
    } catch (const hotcold::clients::client_error&) {
    }
  }
  FAIL() << "the server did not answer health within a minute" << (server ? ":\n" + server->log() : std::string());
}

// A TCP port on 127.0.0.1 that nothing holds now, below the kernel's ephemeral range (32768 and up),
// so that no outgoing connection of another test can be holding it when the server binds it.
inline int free_port() {
  static std::mt19937 rng(std::random_device{}() ^ static_cast<unsigned>(getpid()));
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int port = 10000 + static_cast<int>(rng() % 22000);
    bool ok = true;
    for (int next : {port, port + 1}) {  // callers may take the one after too
      const int fd = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<uint16_t>(next));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      ok = ok && fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
      if (fd >= 0) close(fd);
    }
    if (ok) return port;
  }
  ADD_FAILURE() << "no free TCP port on 127.0.0.1";
  return 0;
}
inline std::string tcp_endpoint() { return "tcp://127.0.0.1:" + std::to_string(free_port()); }

inline std::string endpoint_for(const char* kind) {
  if (std::string(kind) == "ipc") return "ipc://" + (fs::temp_directory_path() / ("hotcold-" + std::to_string(getpid()) + ".sock")).string();
  return tcp_endpoint();
}

// A TCP socket to 127.0.0.1:port whose reads (and, with send_timeout, writes) give up after
// `seconds`; rcvbuf > 0 shrinks its receive buffer first. connected: whether connect succeeded.
inline int loopback_socket(int port, int seconds, bool& connected, int rcvbuf = 0, bool send_timeout = false) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (rcvbuf > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  const timeval tv{seconds, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (send_timeout) setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  connected = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  return fd;
}
// Reads until the peer closes (or a read times out); what came.
inline std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  return out;
}

// A request over plain HTTP/1.0: the whole response, headers and body ("" when nothing came within
// 5 s). `headers`: more request header lines, each ending in \r\n; a body goes with its length.
inline std::string http_request(int port, const std::string& method, const std::string& target, const std::string& headers = "",
                                const std::string& body = "") {
  bool connected = false;
  const int fd = loopback_socket(port, 5, connected, 0, true);
  std::string out;
  if (connected) {
    std::string req = method + " " + target + " HTTP/1.0\r\nHost: localhost\r\n" + headers;
    if (!body.empty()) req += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    req += "\r\n" + body;
    if (write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) out = read_all(fd);
  }
  close(fd);
  return out;
}
// An HTTP exchange split up: the status, the header block and the body.
struct http_answer {
  int status = 0;
  std::string head, body;
  nlohmann::json body_json() const { return nlohmann::json::parse(body, nullptr, false); }
  // A header field's value ("" when absent; the name as written in any case).
  std::string header(const std::string& name) const {
    std::string lower_head = head, lower_name = name;
    for (auto* s : {&lower_head, &lower_name})
      for (auto& c : *s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const auto at = lower_head.find("\r\n" + lower_name + ":");
    if (at == std::string::npos) return {};
    const auto from = at + 3 + name.size(), end = head.find("\r\n", from);
    std::string v = head.substr(from, end == std::string::npos ? std::string::npos : end - from);
    v.erase(0, v.find_first_not_of(' '));
    return v;
  }
};
inline http_answer split(const std::string& raw) {
  http_answer a;
  const auto end = raw.find("\r\n\r\n");
  a.head = raw.substr(0, end);
  if (end != std::string::npos) a.body = raw.substr(end + 4);
  if (raw.size() > 12) a.status = std::atoi(raw.c_str() + 9);
  return a;
}

// GET, the same way.
inline std::string http_get(int port, const std::string& target, const std::string& headers = "") { return http_request(port, "GET", target, headers); }

// The value of a Prometheus sample line `name` (labels included, as written) in /metrics text, or -1
// when absent.
inline double metric(const std::string& text, const std::string& name) {
  const auto at = text.find("\n" + name + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + name.size() + 2));
}

// One generate, asked again every 20 ms while the server answers `busy` (counted in `busy`) for up to
// two minutes (how often a full queue answers busy depends on how busy the machine is, so no count of
// them is a failure); nullopt when it failed otherwise or stayed busy that long.
inline std::optional<hotcold::clients::client::generation> generate_through_busy(
    hotcold::clients::client& c, const nlohmann::json& request, std::atomic<int>& busy,
    const hotcold::clients::client::token_callback& on_token = {}) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  for (;;) {
    try {
      return c.generate(request, on_token);
    } catch (const hotcold::clients::client_error& e) {
      if (std::string(e.what()).find("busy") == std::string::npos || std::chrono::steady_clock::now() > give_up) return std::nullopt;
      ++busy;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
}

}  // namespace hotcold::test
