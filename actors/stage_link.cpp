// The coordinator's side of the stages (actors/stages.hpp): a link actor per stage that forwards
// steps, watches its worker (down messages, heartbeats) and admits it again; connect_stages and the
// plan of --split auto.
#include <map>
#include <random>
#include <set>
#include <stdexcept>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>
#include <fmt/format.h>

#include "actors/pipeline.hpp"
#include "actors/stage_data.hpp"
#include "actors/stages.hpp"

namespace hotcold::actors {

namespace {
using tick_atom = caf::atom_constant<caf::atom("tick")>;
using retry_atom = caf::atom_constant<caf::atom("retry")>;
using start_atom = caf::atom_constant<caf::atom("start")>;
using late_atom = caf::atom_constant<caf::atom("late")>;

// A step in flight on the data connection.
struct pending_step {
  caf::response_promise rp;
  std::chrono::steady_clock::time_point sent;
};

// A fresh assignment's token: 16 random bytes, as hex.
std::string new_token() {
  std::random_device rd;
  std::string t;
  for (int i = 0; i < 4; ++i) t += fmt::format("{:08x}", rd());
  return t;
}

struct link_state {
  stage_address addr;
  stage_context ctx;
  stage_timing timing;
  stage_worker_actor remote;   // the worker's front while admitted; null while lost
  std::string lost = "not connected yet";
  caf::actor watcher;          // hears (stage_atom, number, up, why)
  uint64_t epoch = 0;          // counts admissions and losses: answers of an earlier one are ignored
  std::map<uint64_t, pending_step> pending;  // layers requests in flight, by number
  uint64_t next = 0;
  data_keys keys;          // this link's CurveZMQ pair (TLS-configured networks; else empty)
  std::string server_key;  // the worker's data key, from its hello ("" on plain links)
  std::string token;       // the current assignment's (data requests carry it)
  std::unique_ptr<stage_data_client> data;  // the data connection of the current admission (or the one being checked)
  uint64_t data_epoch = 0;                  // counts data connections: a reply of an earlier one is ignored
  uint64_t data_ping = 0;                   // the id of the admission's ping on the data connection
  stage_worker_actor checking;              // the worker whose data port the ping checks (admission's last step)
  caf::response_promise starting;   // the first connection's requester (connect_stages): answered after the probe
  caf::response_promise assigning;  // then its assignment's
  stage_worker_actor candidate;     // the worker reached at the first connection, until assigned
  std::shared_ptr<live_stats> stats;  // heartbeats' round trips, as stage `number`
  size_t number = 0;                  // the stage's place in the pipeline's list (from 0)
  static inline const char* name = "hotcold-stage-link";
};
using link_ptr = caf::stateful_actor<link_state>*;

void tell_watcher(link_ptr self, bool up) {
  auto& st = self->state;
  fmt::print(stderr, "hotcold: stage {}: {}\n", st.addr.where(), up ? "back (assigned again; new requests are admitted)" : st.lost);
  if (st.watcher) self->send(st.watcher, stage_atom::value, static_cast<int64_t>(st.number), up, st.lost);
}

// Why a worker's connection failed or ended, for people.
std::string why_gone(const caf::error& e) {
  if (e == caf::exit_reason::remote_link_unreachable) return "its connection closed";
  if (e == caf::sec::disconnect_during_handshake)
    return "the worker closed the connection during the handshake: one side speaks TLS and the other not, or their certificates are of "
           "different authorities (hotcold worker --tls, --workers-tls)";
  return describe(e);
}

void ping(link_ptr self);

// Connects to the worker's address again (a lost stage), or for the first time.
void connect(link_ptr self);

// Admission failed: the first connection (its start or its assignment) reports why and the link
// ends; a lost stage tries again.
void not_admitted(link_ptr self, const std::string& why) {
  auto& st = self->state;
  st.data.reset(), st.checking = nullptr;
  if (st.starting.pending()) st.starting.deliver(why, 0.0, uint64_t{0}, int64_t{0});
  else if (st.assigning.pending()) st.assigning.deliver(why);
  else return self->delayed_send(self, st.timing.retry, retry_atom::value);
  self->quit();
}

void admitted(link_ptr self, stage_worker_actor remote) {
  auto& st = self->state;
  st.remote = std::move(remote);
  self->monitor(st.remote);
  st.lost.clear();
  ++st.epoch;
  if (st.assigning.pending()) st.assigning.deliver(std::string());
  else tell_watcher(self, true);
  ping(self);
}

// The worker is gone or silent: every request in flight fails with why, and so does each later one
// until it is admitted again.
void lose(link_ptr self, const std::string& why) {
  auto& st = self->state;
  if (!st.remote) return;
  self->demonitor(st.remote.address());
  st.remote = nullptr;
  st.data.reset();
  st.lost = why;
  ++st.epoch;
  auto pending = std::move(st.pending);
  st.pending.clear();
  for (auto& [id, p] : pending) p.rp.deliver(caf::make_error(caf::sec::runtime_error, why));
  tell_watcher(self, false);
  self->delayed_send(self, st.timing.retry, retry_atom::value);
}

void ping(link_ptr self) {
  auto& st = self->state;
  const uint64_t epoch = st.epoch;
  const auto t0 = std::chrono::steady_clock::now();
  self->request(st.remote, st.timing.heartbeat_timeout, ping_atom::value)
      .then(
          [self, epoch, t0](ping_atom) {
            auto& st = self->state;
            if (st.stats) st.stats->add_stage_heartbeat(st.number, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
            if (epoch == st.epoch) self->delayed_send(self, st.timing.heartbeat, tick_atom::value, epoch);
          },
          [self, epoch](caf::error& e) {
            auto& st = self->state;
            if (epoch != st.epoch) return;
            lose(self, e == caf::sec::request_timeout
                           ? fmt::format("no answer to a heartbeat within {} ms: the worker hangs or the link is cut", st.timing.heartbeat_timeout.count())
                           : fmt::format("its worker is gone ({})", why_gone(e)));
          });
}

// The admission's last step: a data connection to the port after the worker's CAF one, and a ping
// on it answered within timing.answer (a port closed between the hosts is an error, not a wait).
void open_data(link_ptr self, stage_worker_actor remote) {
  auto& st = self->state;
  if (st.addr.port == 65535) return not_admitted(self, "port 65535 has no data port after it");
  const caf::actor_addr me = self->address();
  const uint64_t epoch = ++st.data_epoch;
  try {
    st.data = std::make_unique<stage_data_client>(
        st.addr.host, static_cast<uint16_t>(st.addr.port + 1), st.server_key, st.keys, [me, epoch](stage_data_reply r) {
          if (auto link = caf::actor_cast<caf::actor>(me))
            caf::anon_send(link, data_atom::value, epoch, r.id, r.ok, r.lost, std::move(r.bytes), r.compute_ns);
        });
  } catch (const std::exception& e) {
    return not_admitted(self, fmt::format("no data connection: {}", e.what()));
  }
  st.checking = std::move(remote);
  st.data_ping = st.next++;
  st.data->send(st.data_ping, st.token, {}, {}, {});
  self->delayed_send(self, st.timing.answer, late_atom::value, epoch);
}

// The stage's layers (addr.first .. last - 1) assigned to a worker past the handshake.
void assign(link_ptr self, stage_worker_actor remote) {
  auto& st = self->state;
  st.token = new_token();
  const std::vector<int64_t> shape{st.ctx.n_ctx, st.ctx.n_seq, st.ctx.store_blocks, st.ctx.block_tokens};
  self->request(remote, st.timing.assign, assign_atom::value, st.addr.first, st.addr.last, shape, st.ctx.kv.k, st.ctx.kv.v, st.ctx.mode, st.token)
      .then(
          [self, remote](std::string& why) {
            if (!why.empty()) return not_admitted(self, "refused its layers: " + why);
            open_data(self, remote);
          },
          [self](caf::error& e) { not_admitted(self, fmt::format("no answer to its layers: {}", describe(e))); });
}

// What the data connection brought: a step's answer, the admission's ping's, or its loss.
void on_data(link_ptr self, uint64_t epoch, uint64_t id, bool ok, bool lost, std::string& bytes, int64_t compute_ns) {
  auto& st = self->state;
  if (epoch != st.data_epoch || !st.data) return;  // (an earlier connection's)
  const std::string port = fmt::format("port {}", st.addr.port + 1);
  if (st.checking) {  // admitting: the ping's answer decides
    if (lost) return not_admitted(self, fmt::format("no data connection on {}: {}", port, bytes));
    if (id != st.data_ping) return;
    if (!ok) return not_admitted(self, fmt::format("its data port ({}) refused: {}", port, bytes));
    return admitted(self, std::exchange(st.checking, nullptr));
  }
  if (lost) return lose(self, fmt::format("its worker is gone ({})", bytes));
  auto it = st.pending.find(id);
  if (it == st.pending.end()) return;
  auto p = std::move(it->second);
  st.pending.erase(it);
  if (!ok && bytes.starts_with(reassigned_refusal)) {  // (the worker runs another's layers now: lost, and taken back when it can be)
    p.rp.deliver(caf::make_error(caf::sec::runtime_error, bytes));
    return lose(self, "its worker was taken by another coordinator: " + bytes);
  }
  if (!ok) return p.rp.deliver(caf::make_error(caf::sec::runtime_error, bytes));
  const int64_t round_trip = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - p.sent).count();
  p.rp.deliver(std::move(bytes), compute_ns, round_trip);
}

// The handshake on a worker just reached; then, at the first connection, its probe goes to the
// starter (which plans the split and sends the layers), or a lost stage's layers are assigned again.
void admit(link_ptr self, stage_worker_actor remote) {
  auto& st = self->state;
  self->request(remote, st.timing.answer, hello_atom::value, stage_version(), st.ctx.file_id, st.keys.public_key)
      .then(
          [self, remote](std::string& why, std::string& server_key) {
            auto& st = self->state;
            if (!why.empty()) return not_admitted(self, "refused: " + why);
            if (server_key.empty() != st.keys.public_key.empty())
              return not_admitted(self, "the worker's data connection is not as protected as its link (CurveZMQ on one side only)");
            st.server_key = std::move(server_key);
            if (!st.starting.pending()) return assign(self, remote);
            self->request(remote, st.timing.answer, probe_atom::value)
                .then(
                    [self, remote](double bytes_per_second, uint64_t available, int64_t threads) {
                      self->state.candidate = remote;
                      self->state.starting.deliver(std::string(), bytes_per_second, available, threads);
                    },
                    [self](caf::error& e) { not_admitted(self, fmt::format("no answer to the probe: {}", describe(e))); });
          },
          [self](caf::error& e) { not_admitted(self, fmt::format("no answer to the handshake: {}", describe(e))); });
}

void connect(link_ptr self) {
  auto& st = self->state;
  auto& sys = self->home_system();
  const auto wait = st.starting.pending() ? st.timing.answer : st.timing.heartbeat_timeout + st.timing.retry;
  self->request(network_actor(sys), wait, caf::connect_atom::value, st.addr.host, st.addr.port)
      .then(
          [self](const caf::node_id&, caf::strong_actor_ptr& p, const std::set<std::string>&) {
            if (!p) return not_admitted(self, "nothing published at the address");
            admit(self, caf::actor_cast<stage_worker_actor>(std::move(p)));  // (the hello checks the version)
          },
          [self](caf::error& e) {
            auto& sys = self->home_system();
            const bool tls = sys.has_openssl_manager();
            std::string why = e == caf::sec::disconnect_during_handshake ? why_gone(e) : sys.render(e);
            if (e == caf::sec::request_timeout)
              why = "no answer: is a hotcold worker listening there?";
            else if (e == caf::sec::malformed_basp_message)
              why = "what answers there is not a hotcold worker (it does not speak the stage protocol)";
            else if (tls && e == caf::sec::cannot_connect_to_node)
              why += " (is a hotcold worker listening there, with --tls and a folder of the same authority as --workers-tls?)";
            not_admitted(self, "cannot connect: " + why);
          });
}

caf::behavior stage_link(link_ptr self, stage_address addr, stage_context ctx, stage_timing timing, std::shared_ptr<live_stats> stats, size_t number) {
  auto& st = self->state;
  st.stats = std::move(stats), st.number = number;
  st.addr = std::move(addr), st.ctx = std::move(ctx), st.timing = timing;
  if (self->home_system().has_openssl_manager()) st.keys = make_data_keys();
  self->set_down_handler([self](caf::down_msg& m) {
    if (self->state.remote && m.source == self->state.remote.address())
      lose(self, fmt::format("its worker is gone ({})", m.reason ? why_gone(m.reason) : std::string("it ended")));
  });
  return {
      [self](start_atom) {
        self->state.starting = self->make_response_promise();
        connect(self);
        return self->state.starting;
      },
      [self](assign_atom, int64_t first, int64_t last) {
        auto& st = self->state;
        st.addr.first = first, st.addr.last = last;
        st.assigning = self->make_response_promise();
        if (!st.candidate) not_admitted(self, "not connected");
        else assign(self, std::exchange(st.candidate, nullptr));
        return st.assigning;
      },
      [self](watch_atom, caf::actor& watcher) {
        auto& st = self->state;
        st.watcher = std::move(watcher);
        if (!st.remote) tell_watcher(self, false);
      },
      [self](tick_atom, uint64_t epoch) {
        if (epoch == self->state.epoch && self->state.remote) ping(self);
      },
      [self](retry_atom) {
        if (!self->state.remote) connect(self);
      },
      [self](late_atom, uint64_t epoch) {
        auto& st = self->state;
        if (epoch == st.data_epoch && st.checking)
          not_admitted(self, fmt::format("no answer on its data port ({}) within {} s: is that port open between the hosts?", st.addr.port + 1,
                                         st.timing.answer.count() / 1000.0));
      },
      [self](data_atom, uint64_t epoch, uint64_t id, bool ok, bool lost, std::string& bytes, int64_t compute_ns) {
        on_data(self, epoch, id, ok, lost, bytes, compute_ns);
      },
      [self](layers_atom, const std::vector<int64_t>& seqs, const std::vector<int64_t>& positions, const float_bytes& x,
             const std::vector<int64_t>& cache_ops) -> caf::result<float_bytes, int64_t, int64_t> {
        auto& st = self->state;
        if (!st.remote || !st.data) return caf::make_error(caf::sec::runtime_error, st.lost);
        const uint64_t id = st.next++;
        auto rp = self->make_response_promise();
        st.pending.emplace(id, pending_step{rp, std::chrono::steady_clock::now()});
        st.data->send(id, st.token, seqs, positions, x, cache_ops);
        return rp;
      },
  };
}
}  // namespace

std::vector<int64_t> plan_split(const std::vector<worker_probe>& workers, const std::vector<uint64_t>& layer_bytes, uint64_t kv_layer_bytes,
                                double memory_share) {
  const auto n_layer = static_cast<int64_t>(layer_bytes.size());
  const auto n = workers.size();
  if (static_cast<int64_t>(n) > n_layer) throw std::invalid_argument(fmt::format("{} workers for {} layers", n, n_layer));
  uint64_t biggest = kv_layer_bytes;
  for (uint64_t b : layer_bytes) biggest = std::max(biggest, b + kv_layer_bytes);
  std::vector<int64_t> counts(n, 0);
  std::vector<uint64_t> room(n);
  for (size_t k = 0; k < n; ++k) room[k] = static_cast<uint64_t>(memory_share * static_cast<double>(workers[k].available_bytes));
  // Layer by layer (in the largest layer's bytes, so that any contiguous range fits): to the worker
  // whose time a token would be least with it, counts / speed, among those with room for one more.
  for (int64_t l = 0; l < n_layer; ++l) {
    size_t best = n;
    double best_time = 0;
    for (size_t k = 0; k < n; ++k) {
      if (static_cast<uint64_t>(counts[k] + 1) * biggest > room[k]) continue;
      const double speed = std::max(workers[k].read_bytes_per_second, 1.0);
      // Every worker takes one layer first (a stage of none is no stage), then by time.
      const double time = counts[k] == 0 ? -1.0 / speed : static_cast<double>(counts[k] + 1) / speed;
      if (best == n || time < best_time) best = k, best_time = time;
    }
    if (best == n) {
      uint64_t total = 0;
      for (uint64_t r : room) total += r / biggest;
      throw std::runtime_error(fmt::format("--split auto: the workers' available memory holds {} of {} layers ({:.0f}% of each one's, {:.2f} GiB a layer with its KV cache)",
                                           total, n_layer, memory_share * 100, static_cast<double>(biggest) / double(1ull << 30)));
    }
    ++counts[best];
  }
  for (size_t k = 0; k < n; ++k)
    if (counts[k] == 0)
      throw std::runtime_error(fmt::format("--split auto: worker {} has room for no layer ({:.2f} GiB available)", k + 1,
                                           static_cast<double>(workers[k].available_bytes) / double(1ull << 30)));
  return counts;
}

std::vector<remote_stage> connect_stages(caf::actor_system& sys, const stage_plan& plan, const std::vector<uint64_t>& layer_bytes, const stage_context& c,
                                         std::shared_ptr<live_stats> stats, const stage_timing& timing) {
  std::vector<caf::actor> links;
  std::vector<worker_probe> probes;
  caf::scoped_actor self{sys};
  auto fail = [&](const stage_address& s, const std::string& why) {
    for (auto& l : links) self->send_exit(l, caf::exit_reason::user_shutdown);
    throw std::runtime_error(fmt::format("worker {}: {}", s.where(), why));
  };
  for (const auto& s : plan.stages) {  // reached, checked and probed
    links.push_back(sys.spawn(stage_link, s, c, timing, stats, links.size()));
    std::string why;
    worker_probe p;
    self->request(links.back(), timing.answer * 4, start_atom::value)
        .receive(
            [&](std::string& w, double bps, uint64_t available, int64_t threads) {
              why = w;
              p = {bps, available, threads};
            },
            [&](caf::error& e) { why = fmt::format("no answer: {}", describe(e)); });
    if (!why.empty()) fail(s, why);
    probes.push_back(p);
  }
  std::vector<stage_address> stages = plan.stages;
  const uint64_t kv_layer = static_cast<uint64_t>(c.n_ctx * c.n_seq) * plan.kv_layer_row_bytes;
  // Workers on one host share its memory bus: each one's speed measured alone says nothing of their
  // shares (and concurrent probes at their starts read unevenly), so they count as equally fast.
  const bool one_host = plan.one_host();
  if (plan.auto_split) {
    auto planned = probes;
    if (one_host)
      for (auto& p : planned) p.read_bytes_per_second = 1;
    const auto counts = plan_split(planned, layer_bytes, kv_layer);
    int64_t first = 0;
    for (size_t k = 0; k < stages.size(); ++k) stages[k].first = first, stages[k].last = first += counts[k];
  }
  fmt::print(stderr, "| stage | worker | layers | reads | available | weights + KV | a token's layers |\n| --- | --- | --- | --- | --- | --- | --- |\n");
  for (size_t k = 0; k < stages.size(); ++k) {
    const auto& s = stages[k];
    uint64_t weights = 0;
    for (int64_t l = s.first; l < s.last && l < static_cast<int64_t>(layer_bytes.size()); ++l) weights += layer_bytes[static_cast<size_t>(l)];
    const uint64_t kv = kv_layer * static_cast<uint64_t>(s.last - s.first);
    fmt::print(stderr, "| {} | tcp://{}:{} | {}-{} ({}) | {:.1f} GB/s on {} threads | {:.2f} GiB | {:.2f} GiB | {:.2f} ms at that speed |\n", k + 1, s.host, s.port, s.first,
               s.last - 1, s.last - s.first, probes[k].read_bytes_per_second / 1e9, probes[k].threads, static_cast<double>(probes[k].available_bytes) / double(1ull << 30),
               static_cast<double>(weights + kv) / double(1ull << 30), 1e3 * static_cast<double>(weights) / std::max(probes[k].read_bytes_per_second, 1.0));
  }
  if (plan.auto_split)
    fmt::print(stderr, "hotcold: --split auto: layers in proportion to {}, within 90% of each one's available memory\n",
               one_host && stages.size() > 1 ? "the workers (one host: they share its memory bus, so each counts as equally fast)"
                                             : "each worker's measured read speed");
  std::vector<remote_stage> out;
  for (size_t k = 0; k < stages.size(); ++k) {  // assigned (each reads its layers now)
    std::string why;
    self->request(links[k], timing.assign + timing.answer, assign_atom::value, stages[k].first, stages[k].last)
        .receive([&](std::string& w) { why = w; }, [&](caf::error& e) { why = fmt::format("no answer: {}", describe(e)); });
    if (!why.empty()) fail(stages[k], why);
    out.push_back({links[k], stages[k].first, stages[k].last, stages[k].where()});
  }
  return out;
}

}  // namespace hotcold::actors
