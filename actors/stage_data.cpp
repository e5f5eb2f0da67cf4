// The stages' activations on ZeroMQ frames (actors/stage_data.hpp): the worker's ROUTER that
// computes, the coordinator's DEALER that hands replies to its link.
#include "actors/stage_data.hpp"

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>
#include <zmq.hpp>
#include <zmq_addon.hpp>

namespace hotcold::actors {

namespace {
// A data connection that goes silent is let go by the kernel: keepalive probes after 2 s idle (3, a
// second apart), and data unacknowledged for 10 s. Not ZeroMQ's heartbeats: they time out when no
// whole message arrives, which a long frame on a slow link takes longer than (a hung worker is the
// CAF link's heartbeat's to name: it has a connection of its own, which no frame fills).
void watch_tcp(zmq::socket_t& s) {
  s.set(zmq::sockopt::tcp_keepalive, 1);
  s.set(zmq::sockopt::tcp_keepalive_idle, 2);
  s.set(zmq::sockopt::tcp_keepalive_intvl, 1);
  s.set(zmq::sockopt::tcp_keepalive_cnt, 3);
  s.set(zmq::sockopt::tcp_maxrt, 10000);
}
// A step's activations are at most a batch of rows (the engine refuses more): 512 MiB bounds what a
// frame may bring before anything reads it.
constexpr int64_t max_frame = int64_t{512} << 20;

template <class T>
T read_at(const zmq::message_t& m, size_t k) {
  T v;
  std::memcpy(&v, static_cast<const char*>(m.data()) + k * sizeof(T), sizeof(T));
  return v;
}

template <class T>
std::vector<T> copy_out(const zmq::message_t& m) {
  std::vector<T> v(m.size() / sizeof(T));
  std::memcpy(v.data(), m.data(), v.size() * sizeof(T));
  return v;
}

zmq::message_t words(std::initializer_list<uint64_t> w) {
  zmq::message_t m(w.size() * sizeof(uint64_t));
  std::memcpy(m.data(), std::data(w), m.size());
  return m;
}

std::string unique_inproc(const char* what, const void* who) { return fmt::format("inproc://hotcold-{}-{}", what, who); }

// A thread's inproc pair: rx (the thread's) bound, tx (its owner's) connected. A message of one
// empty frame on tx stops the thread (stop_thread).
void pair_up(zmq::socket_t& rx, zmq::socket_t& tx, const char* what, const void* who) {
  const std::string address = unique_inproc(what, who);
  rx.bind(address);
  tx.connect(address);
}
void stop_thread(zmq::socket_t& tx, std::thread& thread) {
  tx.send(zmq::message_t(), zmq::send_flags::none);
  thread.join();
}
}  // namespace

std::string stage_data_address(const std::string& host, uint16_t port) {
  return host.find(':') != std::string::npos ? fmt::format("tcp://[{}]:{}", host, port) : fmt::format("tcp://{}:{}", host, port);
}

data_keys make_data_keys() {
  char pub[41] = {}, sec[41] = {};
  if (zmq_curve_keypair(pub, sec) != 0) throw std::runtime_error(fmt::format("no CurveZMQ key pair: {}", zmq_strerror(zmq_errno())));
  return {pub, sec};
}

struct stage_data_server::impl {
  zmq::context_t ctx{1};
  zmq::socket_t router{ctx, zmq::socket_type::router};
  zmq::socket_t stop_rx{ctx, zmq::socket_type::pair}, stop_tx{ctx, zmq::socket_type::pair};
  std::optional<zmq::socket_t> zap;
  std::string public_key;
  std::mutex keys_mutex;
  std::set<std::string> allowed;
  stage_compute compute;
  stage_token_check check;
  std::vector<float> out;
  std::thread thread;

  void reply(zmq::message_t& to, uint64_t id, int64_t ns, bool ok, zmq::message_t payload) {
    std::array<zmq::message_t, 3> f{zmq::message_t(to.data(), to.size()), words({id, static_cast<uint64_t>(ns), ok ? 0u : 1u}), std::move(payload)};
    zmq::send_multipart(router, f, zmq::send_flags::dontwait);
  }
  void fail(zmq::message_t& to, uint64_t id, const std::string& why) { reply(to, id, 0, false, zmq::message_t(why.data(), why.size())); }

  void handle(std::vector<zmq::message_t>& f) {
    if (f.size() != 7 || f[1].size() != 2 * sizeof(uint64_t)) {
      if (!f.empty())
        fail(f[0], 0, fmt::format("a data request of {} frames (6 expected: head, token, seqs, positions, x, cache ops)", f.empty() ? 0 : f.size() - 1));
      return;
    }
    const auto id = read_at<uint64_t>(f[1], 0), rows = read_at<uint64_t>(f[1], 1);
    const std::string token = f[2].to_string();
    if (rows == 0) {  // a ping on the data path
      const std::string why = check(token);
      return why.empty() ? reply(f[0], id, 0, true, zmq::message_t()) : fail(f[0], id, why);
    }
    if (f[3].size() != rows * sizeof(int64_t) || f[4].size() != rows * sizeof(int64_t) || f[5].size() % (rows * sizeof(float)) != 0 ||
        f[6].size() % (5 * sizeof(int64_t)) != 0)
      return fail(f[0], id, fmt::format("a data request of {} rows with {} bytes of sequences, {} of positions and {} of activations", rows, f[3].size(),
                                        f[4].size(), f[5].size()));
    const auto t0 = std::chrono::steady_clock::now();
    const auto seqs = copy_out<int64_t>(f[3]), positions = copy_out<int64_t>(f[4]);
    const auto x = copy_out<float>(f[5]);
    const auto ops = copy_out<int64_t>(f[6]);
    std::string why;
    try {
      why = compute(stage_step{token, seqs, positions, x, ops}, out);
    } catch (const std::exception& e) {
      why = e.what();
    }
    if (!why.empty()) return fail(f[0], id, why);
    const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
    reply(f[0], id, ns, true, zmq::message_t(out.data(), out.size() * sizeof(float)));
  }

  // One ZAP request (RFC 27): a CURVE client gets in when a hello allowed its key.
  void answer_zap() {
    std::vector<zmq::message_t> f;
    if (!zmq::recv_multipart(*zap, std::back_inserter(f), zmq::recv_flags::dontwait)) return;
    std::string key;
    if (f.size() >= 7 && f[5].to_string() == "CURVE" && f[6].size() == 32) {
      char z85[41] = {};
      zmq_z85_encode(z85, static_cast<const uint8_t*>(f[6].data()), 32);
      key = z85;
    }
    bool ok = false;
    {
      std::lock_guard lock(keys_mutex);
      ok = !key.empty() && allowed.count(key);
    }
    const std::string request_id = f.size() >= 2 ? f[1].to_string() : "";
    std::array<zmq::message_t, 6> r{zmq::message_t(std::string("1.0")), zmq::message_t(request_id), zmq::message_t(std::string(ok ? "200" : "400")),
                                    zmq::message_t(std::string(ok ? "OK" : "not a coordinator this worker said hello to")),
                                    zmq::message_t(ok ? key : std::string()), zmq::message_t()};
    zmq::send_multipart(*zap, r);
  }

  void run() {
    zmq::pollitem_t items[] = {{router.handle(), 0, ZMQ_POLLIN, 0}, {stop_rx.handle(), 0, ZMQ_POLLIN, 0}, {zap ? zap->handle() : nullptr, 0, ZMQ_POLLIN, 0}};
    for (;;) {
      zmq::poll(items, zap ? 3 : 2, std::chrono::milliseconds(-1));
      if (items[1].revents & ZMQ_POLLIN) return;
      if (zap && (items[2].revents & ZMQ_POLLIN)) answer_zap();
      if (items[0].revents & ZMQ_POLLIN) {
        std::vector<zmq::message_t> f;
        if (zmq::recv_multipart(router, std::back_inserter(f), zmq::recv_flags::dontwait)) handle(f);
      }
    }
  }
};

stage_data_server::stage_data_server(const std::string& host, uint16_t port, bool curve, stage_compute compute, stage_token_check check)
    : impl_(std::make_unique<impl>()) {
  auto& i = *impl_;
  i.compute = std::move(compute), i.check = std::move(check);
  if (curve) {  // the authentication handler first: it must be there before a client connects
    const data_keys k = make_data_keys();
    i.public_key = k.public_key;
    i.zap.emplace(i.ctx, zmq::socket_type::rep);
    i.zap->bind("inproc://zeromq.zap.01");
    i.router.set(zmq::sockopt::curve_server, 1);
    i.router.set(zmq::sockopt::curve_secretkey, k.secret_key);
    i.router.set(zmq::sockopt::zap_domain, "hotcold-stage");
  }
  i.router.set(zmq::sockopt::linger, 0);
  i.router.set(zmq::sockopt::maxmsgsize, max_frame);
  watch_tcp(i.router);
  if (host.find(':') != std::string::npos) i.router.set(zmq::sockopt::ipv6, 1);
  const std::string address = stage_data_address(host, port);
  try {
    i.router.bind(address);
  } catch (const zmq::error_t& e) {
    throw std::runtime_error(fmt::format("cannot bind the data port {}: {}", address, e.what()));
  }
  pair_up(i.stop_rx, i.stop_tx, "stage-data-stop", this);
  i.thread = std::thread([&i] { i.run(); });
}

stage_data_server::~stage_data_server() { stop_thread(impl_->stop_tx, impl_->thread); }

const std::string& stage_data_server::public_key() const { return impl_->public_key; }

void stage_data_server::allow(const std::string& client_key) {
  std::lock_guard lock(impl_->keys_mutex);
  impl_->allowed.insert(client_key);
}

struct stage_data_client::impl {
  zmq::context_t ctx{1};
  zmq::socket_t dealer{ctx, zmq::socket_type::dealer};
  zmq::socket_t in_rx{ctx, zmq::socket_type::pair}, in_tx{ctx, zmq::socket_type::pair};
  zmq::socket_t monitor{ctx, zmq::socket_type::pair};
  std::function<void(stage_data_reply)> on_reply;
  std::string address;
  bool lost = false;
  std::thread thread;

  void lose(const std::string& why) {
    if (lost) return;
    lost = true;
    stage_data_reply r;
    r.lost = true, r.bytes = why;
    on_reply(std::move(r));
  }

  void run() {
    zmq::pollitem_t items[] = {{dealer.handle(), 0, ZMQ_POLLIN, 0}, {in_rx.handle(), 0, ZMQ_POLLIN, 0}, {monitor.handle(), 0, ZMQ_POLLIN, 0}};
    for (;;) {
      zmq::poll(items, 3, std::chrono::milliseconds(-1));
      if (items[1].revents & ZMQ_POLLIN) {
        std::vector<zmq::message_t> f;
        if (zmq::recv_multipart(in_rx, std::back_inserter(f), zmq::recv_flags::dontwait)) {
          if (f.size() == 1) return;  // the owner stops
          // Never blocking (the owner's stop must get through): a DEALER whose connection ended has
          // no pipe to queue on.
          if (!lost && !zmq::send_multipart(dealer, f, zmq::send_flags::dontwait))
            lose(fmt::format("its data connection ({}) takes no more requests", address));
        }
      }
      if (items[0].revents & ZMQ_POLLIN) {
        std::vector<zmq::message_t> f;
        if (zmq::recv_multipart(dealer, std::back_inserter(f), zmq::recv_flags::dontwait)) {
          stage_data_reply r;
          if (f.size() != 2 || f[0].size() != 3 * sizeof(uint64_t)) {
            lose(fmt::format("the worker's data port {} answered {} frames (2 expected)", address, f.size()));
            continue;
          }
          r.id = read_at<uint64_t>(f[0], 0);
          r.compute_ns = static_cast<int64_t>(read_at<uint64_t>(f[0], 1));
          r.ok = read_at<uint64_t>(f[0], 2) == 0;
          r.bytes = f[1].to_string();
          on_reply(std::move(r));
        }
      }
      if (items[2].revents & ZMQ_POLLIN) {
        std::vector<zmq::message_t> f;
        if (zmq::recv_multipart(monitor, std::back_inserter(f), zmq::recv_flags::dontwait) && !f.empty() && f[0].size() >= 2) {
          const auto event = read_at<uint16_t>(f[0], 0);
          if (event == ZMQ_EVENT_DISCONNECTED)
            lose(fmt::format("its data connection ({}) closed", address));
          else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH || event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL || event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL)
            lose(fmt::format("the CurveZMQ handshake on its data connection ({}) failed", address));
        }
      }
    }
  }
};

stage_data_client::stage_data_client(const std::string& host, uint16_t port, const std::string& server_key, const data_keys& mine,
                                     std::function<void(stage_data_reply)> on_reply)
    : impl_(std::make_unique<impl>()) {
  auto& i = *impl_;
  i.on_reply = std::move(on_reply);
  i.address = stage_data_address(host, port);
  auto& d = i.dealer;
  d.set(zmq::sockopt::linger, 0);
  d.set(zmq::sockopt::maxmsgsize, max_frame);
  watch_tcp(d);
  d.set(zmq::sockopt::reconnect_ivl, -1);  // a link makes a new connection at each admission
  if (host.find(':') != std::string::npos) d.set(zmq::sockopt::ipv6, 1);
  if (!server_key.empty()) {
    d.set(zmq::sockopt::curve_serverkey, server_key);
    d.set(zmq::sockopt::curve_publickey, mine.public_key);
    d.set(zmq::sockopt::curve_secretkey, mine.secret_key);
  }
  const std::string mon = unique_inproc("stage-data-monitor", this);
  if (zmq_socket_monitor(d.handle(), mon.c_str(),
                         ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) != 0)
    throw std::runtime_error(fmt::format("cannot watch the data connection: {}", zmq_strerror(zmq_errno())));
  i.monitor.connect(mon);
  d.connect(i.address);
  pair_up(i.in_rx, i.in_tx, "stage-data-in", this);
  i.thread = std::thread([&i] { i.run(); });
}

stage_data_client::~stage_data_client() {
  stop_thread(impl_->in_tx, impl_->thread);
  zmq_socket_monitor(impl_->dealer.handle(), nullptr, 0);
}

void stage_data_client::send(uint64_t id, const std::string& token, const std::vector<int64_t>& seqs, const std::vector<int64_t>& positions, const std::string& x,
                             const std::vector<int64_t>& cache_ops) {
  std::array<zmq::message_t, 6> f{words({id, seqs.size()}),
                                  zmq::message_t(token),
                                  zmq::message_t(seqs.data(), seqs.size() * sizeof(int64_t)),
                                  zmq::message_t(positions.data(), positions.size() * sizeof(int64_t)),
                                  zmq::message_t(x.data(), x.size()),
                                  zmq::message_t(cache_ops.data(), cache_ops.size() * sizeof(int64_t))};
  zmq::send_multipart(impl_->in_tx, f);
}

}  // namespace hotcold::actors
