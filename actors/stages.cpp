// The worker's side of the stages (actors/stages.hpp): the stage host that computes, the front the
// network sees; the messages' types, the version both ends check, and --split's counts.
// CAF 0.17 instantiates the loading of a vector of each announced enum (configure_network), where
// GCC 12 sees a value it cannot prove set (a false alarm inside CAF's deserializer).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "actors/stages.hpp"

#include <unistd.h>

#include <bit>
#include <cstring>
#include <mutex>
#include <stdexcept>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>
#include <fmt/format.h>

#include "actors/basp_guard.hpp"
#include "actors/stage_data.hpp"
#include "actors/stage_keys.hpp"
#include "engine/forward.hpp"
#include "engine/ram_tier.hpp"

#ifndef HOTCOLD_VERSION
#define HOTCOLD_VERSION "unknown"
#endif

namespace hotcold::actors {

namespace {
constexpr int stage_protocol = 7;  // bumped on any change to the stage messages (6: cache ops with each step, the prefix store's size; 7: keys' and values' cache types)

// Asks `to` on `self`'s behalf and answers the current request with its reply (of types Rs) or
// error: the worker's front keeps the actor that computes off the network (see remote_stage).
template <class... Rs, class Self, class To, class... Ts>
caf::typed_response_promise<Rs...> relay(Self* self, const To& to, Ts&&... args) {
  auto rp = self->template make_response_promise<Rs...>();
  self->request(to, caf::infinite, std::forward<Ts>(args)...)
      .then([rp](Rs&... reply) mutable { rp.deliver(std::move(reply)...); }, [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
  return rp;
}

// What the worker's data thread computes with, and its actor assigns (under the mutex).
struct stage_work {
  std::mutex mutex;
  std::shared_ptr<inference_context> ctx;
  inference_context::step_state s;
  int64_t first = 0, last = 0;
  std::string token;  // the assignment's: a data request must carry it
};

// Why a request carrying `token` is not this worker's to compute now ("" when it is); under w.mutex.
std::string refusal(const stage_work& w, const std::string& token) {
  if (!w.ctx) return "no layers assigned to this worker";
  if (token != w.token) return std::string(reassigned_refusal) + " (this worker's layers were assigned again since)";
  return {};
}

// A step through the assigned layers (the data thread's; stage_data.hpp).
std::string compute_step(stage_work& w, const stage_step& step, std::vector<float>& out) {
  std::lock_guard lock(w.mutex);
  if (std::string why = refusal(w, step.token); !why.empty()) return why;
  try {
    std::vector<cache_op> ops;
    for (size_t i = 0; i + 5 <= step.cache_ops.size(); i += 5) {
      const auto* o = step.cache_ops.data() + i;
      if (o[0] < 0 || o[0] > static_cast<int64_t>(cache_op::kind::shift)) return fmt::format("a cache move of kind {}", o[0]);
      ops.push_back({static_cast<cache_op::kind>(o[0]), o[1], o[2], o[3], o[4]});
    }
    w.ctx->apply(ops);
    w.ctx->step_begin_hidden(w.s, step.x, step.seqs, step.positions);
    w.ctx->step_layers(w.s, w.first, w.last);
    out.assign(w.s.x.begin(), w.s.x.begin() + static_cast<std::ptrdiff_t>(step.x.size()));
    return {};
  } catch (const std::exception& e) {
    return fmt::format("layers {}-{}: {}", w.first, w.last - 1, e.what());
  }
}

struct stage_host_state {
  stage_host_options o;
  std::shared_ptr<stage_work> work = std::make_shared<stage_work>();
  std::unique_ptr<stage_data_server> data;  // bound by start_stage_host (data_atom)
  bool private_copy = false;  // o.m holds work->first..last - 1 read into memory (else it is the mapping)
  std::string path;           // the file's
  int64_t n_layer = 0;
  static inline const char* name = "hotcold-stage";
};

void say(const stage_host_options& o, const std::string& line) {
  if (o.log) o.log(line);
}

// The detached actor behind a worker's front: the hello and the assignment (which reads layers), and
// binding the data port.
using stage_host_inner =
    caf::typed_actor<stage_hello, stage_assign, caf::replies_to<data_atom, std::string, uint16_t, bool>::with<std::string>>;

stage_host_inner::behavior_type stage_host_actor(stage_host_inner::stateful_pointer<stage_host_state> self, stage_host_options o) {
  self->state.o = std::move(o);
  self->state.path = self->state.o.m->path();
  self->state.n_layer = self->state.o.m->hp().n_layer;
  return {
      [self](data_atom, const std::string& host, uint16_t port, bool curve) -> std::string {
        auto work = self->state.work;
        try {
          self->state.data = std::make_unique<stage_data_server>(
              host, port, curve, [work](const stage_step& s, std::vector<float>& out) { return compute_step(*work, s, out); },
              [work](const std::string& token) {
                std::lock_guard lock(work->mutex);
                return refusal(*work, token);
              });
        } catch (const std::exception& e) {
          return e.what();
        }
        return {};
      },
      [self](hello_atom, const std::string& version, const std::string& file_id, const std::string& client_key) -> caf::result<std::string, std::string> {
        const auto& st = self->state;
        const auto& o = st.o;
        std::string why;
        if (version != stage_version()) why = fmt::format("this worker runs {}, the coordinator {}", stage_version(), version);
        else if (file_id != o.file_id)
          why = fmt::format("this worker's file {} is {} (size-hash), the coordinator's {}: not the same file", st.path, o.file_id, file_id);
        else if (!st.data) why = "this worker is still starting";
        say(o, why.empty() ? "hotcold worker: a coordinator said hello" : "hotcold worker: refused a coordinator: " + why);
        if (!why.empty()) return {why, std::string()};
        if (!st.data->public_key().empty()) st.data->allow(client_key);
        return {why, st.data->public_key()};
      },
      [self](assign_atom, int64_t first, int64_t last, const std::vector<int64_t>& shape, tensor_type kt, tensor_type vt, ffn_mode fm,
             const std::string& token) -> std::string {
        auto& st = self->state;
        const int64_t n_layer = st.n_layer;
        if (shape.size() != 4 || shape[0] < 1 || shape[1] < 1 || shape[2] < 0 || shape[3] < 1)
          return fmt::format("caches of {} numbers (n_ctx, n_seq, store blocks, block tokens)", shape.size());
        const int64_t n_ctx = shape[0], n_seq = shape[1];
        if (first < 0 || last > n_layer || first >= last) return fmt::format("layers {}..{} of a model of {}", first, last - 1, n_layer);
        if (fm != ffn_mode::dense && fm != ffn_mode::sparse) return fmt::format("a mode of dense or sparse, not {}", static_cast<int>(fm));
        if (!is_kv_cache_type(kt) || !is_kv_cache_type(vt))
          return fmt::format("a KV cache of f32, f16, q8_0 or q4_0, not types {} and {}", static_cast<uint32_t>(kt), static_cast<uint32_t>(vt));
        const kv_types kv{kt, vt};
        if (st.o.kv && *st.o.kv != kv)
          return fmt::format("this worker holds {} KV caches (its --cache-type-k and --cache-type-v), the coordinator asks for {}", kv_types_name(*st.o.kv),
                             kv_types_name(kv));
        auto& w = *st.work;
        std::lock_guard lock(w.mutex);  // (a step in progress ends first)
        try {
          w.ctx.reset();  // (the previous assignment's caches first)
          w.token.clear();
          if (!st.o.mmap && !(st.private_copy && w.first == first && w.last == last)) {  // the layers' weights, read now
            const auto t0 = std::chrono::steady_clock::now();
            st.o.m.reset(), w.first = w.last = 0, st.private_copy = false;
            load_options lo;
            lo.first_layer = first, lo.last_layer = last, lo.globals = false;
            lo.ffn_rows_from_disk = st.o.ram_budget > 0;
            st.o.m = model::load(st.path, lo);
            st.private_copy = true;
            say(st.o, fmt::format("hotcold worker: read layers {}-{} in {:.2f} s", first, last - 1,
                                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()));
          }
          if (st.o.open) {
            w.ctx = st.o.open(st.o.m, first, last, n_ctx, n_seq, kv, fm);
          } else {
            w.ctx = std::make_shared<inference_context>(st.o.m, n_ctx, st.o.threads, n_seq, kv);
            w.ctx->set_mode(fm);
          }
          if (st.o.ram_budget > 0 && !st.o.open) {  // (its layers' rows: the budget's plan for them; open's own, with a device)
            const ram_tier_plan plan = plan_ram_tier(*st.o.m, st.o.ram_budget);
            w.ctx->set_disk_tier(std::make_shared<ram_tier>(st.o.m, plan));
            say(st.o, "hotcold worker: " + describe(plan, st.o.ram_budget, st.path));
          }
          w.ctx->reserve_prefix_store(shape[2], shape[3]);  // (its layers' rows of each block: backed only where written)
        } catch (const std::exception& e) {
          w.ctx.reset();
          return e.what();
        }
        w.first = first, w.last = last, w.token = token;
        say(st.o, fmt::format("hotcold worker: runs layers {}-{} of {} ({} mode, {} positions x {} sequences, {} KV cache)", first, last - 1, n_layer, ffn_mode_name(fm),
                              n_ctx, n_seq, kv_types_name(kv)));
        return {};
      },
  };
}
}  // namespace

std::string stage_version() {
  return fmt::format("hotcold {} (stage protocol {}, CAF {}.{}.{}, {}-endian floats)", HOTCOLD_VERSION, stage_protocol, CAF_MAJOR_VERSION, CAF_MINOR_VERSION,
                     CAF_PATCH_VERSION, std::endian::native == std::endian::little ? "little" : "big");
}

float_bytes pack_floats(const float* x, size_t n) { return float_bytes(reinterpret_cast<const char*>(x), n * sizeof(float)); }

void unpack_floats(const float_bytes& b, float* out) { std::memcpy(out, b.data(), b.size() / sizeof(float) * sizeof(float)); }

void configure_network(caf::actor_system_config& cfg, const std::string& tls_dir) {
  cfg.load<caf::io::middleman>();
  cfg.add_message_type<std::vector<int64_t>>("hotcold_i64s");
  cfg.add_message_type<tensor_type>("hotcold_tensor_type");  // (an enum crosses as its number)
  cfg.add_message_type<ffn_mode>("hotcold_ffn_mode");
  if (tls_dir.empty()) return;
  // Checked here, where a bad folder is a clear error: CAF's module reads the files again for each
  // connection and throws on its network thread.
  const tls_files f = check_tls_dir(tls_dir);
  cfg.openssl_certificate = f.cert;
  cfg.openssl_key = f.key;
  cfg.openssl_cafile = f.ca;
  cfg.load<caf::openssl::manager>();
}

caf::io::middleman_actor network_actor(caf::actor_system& sys) {
  return sys.has_openssl_manager() ? sys.openssl_manager().actor_handle() : sys.middleman().actor_handle();
}

namespace {
// What the network sees of a stage host: a scheduled actor that hands each request to the detached
// one (which reads layers at an assignment) and delivers its reply, so that no detached actor is
// known across the network (CAF 0.17's actor system waits at shutdown for the threads of such actors
// while its network layer still holds them: a worker would not end on SIGTERM). It answers
// heartbeats itself, so that a long assignment or step does not read as a hung worker. The data
// port is bound by start_stage_host alone: the front does not relay data_atom.
//
// One coordinator at a time: the process (CAF node) whose hello was taken owns the worker while its
// links are there and it is heard from (a heartbeat within owner_silence); another process's hello
// meanwhile is refused, naming why. A coordinator whose links end, or that stops answering, leaves
// the worker to the next. (One process may hold several links to a worker: bench's interleaved
// pipelines.)
struct front_state {
  caf::node_id owner;
  int links = 0;  // the owner's link actors that said a taken hello and are there (monitored)
  std::chrono::steady_clock::time_point heard;
  bool owned(const caf::strong_actor_ptr& who) const { return links > 0 && who && who->node() == owner; }
  static inline const char* name = "hotcold-stage-front";
};
constexpr std::chrono::seconds owner_silence{5};

stage_worker_actor::behavior_type stage_front(stage_worker_actor::stateful_pointer<front_state> self, stage_host_inner inner, worker_probe probe,
                                              std::function<uint64_t()> available) {
  self->link_to(inner);
  self->set_down_handler([self](caf::down_msg& m) {
    if (self->state.links > 0 && m.source.node() == self->state.owner) --self->state.links;
  });
  return {
      [self, inner](hello_atom a, std::string& version, std::string& file_id, std::string& client_key) -> caf::result<std::string, std::string> {
        auto& st = self->state;
        const caf::strong_actor_ptr from = self->current_sender();
        const auto now = std::chrono::steady_clock::now();
        if (st.links > 0 && from && from->node() != st.owner && now - st.heard < owner_silence)
          return {fmt::format("this worker serves another coordinator (heard from {:.1f} s ago): stop that one, or give this one other workers",
                              std::chrono::duration<double>(now - st.heard).count()),
                  std::string()};
        auto rp = self->make_response_promise<std::string, std::string>();
        self->request(inner, caf::infinite, a, std::move(version), std::move(file_id), std::move(client_key))
            .then(
                [self, rp, from](std::string& why, std::string& key) mutable {
                  auto& st = self->state;
                  if (why.empty() && from) {  // (taken: this coordinator owns the worker now)
                    if (from->node() != st.owner) st.owner = from->node(), st.links = 0;
                    ++st.links;
                    self->monitor(from);
                    st.heard = std::chrono::steady_clock::now();
                  }
                  rp.deliver(std::move(why), std::move(key));
                },
                [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
        return rp;
      },
      [self, inner](assign_atom a, int64_t first, int64_t last, std::vector<int64_t>& shape, tensor_type kt, tensor_type vt, ffn_mode mode,
                    std::string& token) -> caf::result<std::string> {
        if (self->state.links > 0 && !self->state.owned(self->current_sender()))
          return std::string("this worker serves another coordinator: say hello first");
        return relay<std::string>(self, inner, a, first, last, std::move(shape), kt, vt, mode, std::move(token));
      },
      [self](ping_atom a) {
        if (self->state.owned(self->current_sender())) self->state.heard = std::chrono::steady_clock::now();
        return a;
      },
      [probe, available](probe_atom) -> caf::result<double, uint64_t, int64_t> {
        return {probe.read_bytes_per_second, available ? available() : uint64_t{0}, probe.threads};
      },
  };
}
}  // namespace

namespace {
// Why a TCP port cannot be listened on, as the system says it (CAF's error names no cause): the port
// listened on once more to ask.
std::string port_problem(const std::string& host, uint16_t port) {
  try {
    ::close(listen_tcp(host, port));
    return "it cannot be opened";
  } catch (const std::runtime_error& e) {
    return e.what();
  }
}
}  // namespace

stage_host start_stage_host(caf::actor_system& sys, stage_host_options o, const std::string& host, uint16_t port) {
  const worker_probe probe{o.read_bytes_per_second, 0, o.threads};
  auto available = o.available_memory;
  auto inner = sys.spawn<caf::detached>(stage_host_actor, std::move(o));
  auto front = sys.spawn(stage_front, inner, probe, std::move(available));
  const bool tls = sys.has_openssl_manager();
  auto give_up = [&](const std::string& why) {
    caf::anon_send_exit(front, caf::exit_reason::user_shutdown);
    throw std::runtime_error(why);
  };
  // Plain links: CAF on a loopback port of its own, behind the guard (what a peer that has said nothing
  // yet can make the worker hold, bounded: 8 connections of messages up to 4 MiB).
  uint16_t caf_port = 0;
  if (!tls) {
    auto bound = sys.middleman().publish(front, 0, "127.0.0.1", true);
    if (!bound) give_up(fmt::format("cannot publish the stage on loopback: {}", sys.render(bound.error())));
    caf_port = *bound;
  }
  // The stage port, then the data port after it (with port 0, other pairs until one has both free).
  for (int attempt = 0;; ++attempt) {
    std::shared_ptr<basp_guard> guard;
    uint16_t stage_port = 0;
    if (tls) {
      auto bound = caf::openssl::publish(front, port, host.c_str(), true);
      if (!bound) give_up(fmt::format("the stage port {}: {}", port, port != 0 ? port_problem(host, port) : sys.render(bound.error())));
      stage_port = *bound;
    } else {
      try {
        guard = std::make_shared<basp_guard>(host, port, caf_port, uint32_t{4} << 20, 8);
      } catch (const std::runtime_error& e) {
        give_up(fmt::format("the stage port {}: {}", port, e.what()));
      }
      stage_port = guard->port();
    }
    if (stage_port == 65535) give_up(fmt::format("port {} has no port after it for the data", stage_port));
    std::string why;
    caf::scoped_actor self{sys};
    self->request(inner, std::chrono::seconds(30), data_atom::value, host, static_cast<uint16_t>(stage_port + 1), tls)
        .receive([&](std::string& w) { why = std::move(w); }, [&](caf::error& e) { why = sys.render(e); });
    if (why.empty()) return {front, stage_port, std::move(guard)};
    if (port != 0 || attempt == 15) give_up(why);
    // (through the network's own actor: CAF 0.17's caf::openssl::unpublish does not compile)
    if (tls)
      self->request(network_actor(sys), std::chrono::seconds(5), caf::unpublish_atom::value, front.address(), stage_port).receive([] {}, [](caf::error&) {});
  }
}

std::string stage_address::where() const { return fmt::format("tcp://{}:{} (layers {}-{})", host, port, first, last - 1); }

std::vector<stage_address> split_layers(std::vector<stage_address> workers, const std::vector<std::string>& split, int64_t n_layer) {
  auto& out = workers;
  const auto n = static_cast<int64_t>(out.size());
  if (n > n_layer) throw std::invalid_argument(fmt::format("--workers: {} workers for {} layers", n, n_layer));
  const std::string given = fmt::format("{}", fmt::join(split, ","));
  std::vector<int64_t> counts;
  if (given == "auto") {
    for (int64_t k = 0; k < n; ++k) counts.push_back(n_layer / n + (k < n_layer % n ? 1 : 0));
  } else {
    for (const auto& c : split) {
      size_t used = 0;
      long long v = -1;
      try {
        v = std::stoll(c, &used);
      } catch (...) {
      }
      if (used != c.size() || v < 1) throw std::invalid_argument(fmt::format("--split {}: '{}' is not a count of layers (1 or more)", given, c));
      counts.push_back(v);
    }
    int64_t sum = 0;
    for (int64_t c : counts) sum += c;
    if (static_cast<int64_t>(counts.size()) != n || sum != n_layer)
      throw std::invalid_argument(fmt::format("--split {}: {} counts summing to {}, for {} workers and {} layers", given, counts.size(), sum, n, n_layer));
  }
  int64_t first = 0;
  for (int64_t k = 0; k < n; ++k) {
    out[static_cast<size_t>(k)].first = first;
    out[static_cast<size_t>(k)].last = first += counts[static_cast<size_t>(k)];
  }
  return out;
}

}  // namespace hotcold::actors
