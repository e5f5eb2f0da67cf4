#include "actors/stages.hpp"

#include <stdexcept>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <fmt/format.h>

#include "engine/forward.hpp"
#include "protocol/endpoint.hpp"

#ifndef HOTCOLD_VERSION
#define HOTCOLD_VERSION "unknown"
#endif

namespace hotcold::actors {

namespace {
constexpr int stage_protocol = 1;  // bumped on any change to the stage messages

// Asks `to` on `self`'s behalf and answers the current request with its reply (of type R) or error:
// the stage links' way of keeping the actors that compute off the network (see remote_stage).
template <class R, class... Ts>
caf::response_promise relay(caf::event_based_actor* self, const caf::actor& to, Ts&&... args) {
  auto rp = self->make_response_promise<R>();
  self->request(to, caf::infinite, std::forward<Ts>(args)...)
      .then([rp](R& reply) mutable { rp.deliver(std::move(reply)); }, [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
  return rp;
}

struct stage_host_state {
  stage_host_options o;
  std::shared_ptr<inference_context> ctx;
  inference_context::step_state s;
  int64_t first = 0, last = 0;
  static inline const char* name = "hotcold-stage";
};

void say(const stage_host_options& o, const std::string& line) {
  if (o.log) o.log(line);
}

caf::behavior stage_host(caf::stateful_actor<stage_host_state>* self, stage_host_options o) {
  self->state.o = std::move(o);
  return {
      [self](hello_atom, const std::string& version, const std::string& file_id) -> std::string {
        const auto& o = self->state.o;
        std::string why;
        if (version != stage_version()) why = fmt::format("this worker runs {}, the coordinator {}", stage_version(), version);
        else if (file_id != o.file_id)
          why = fmt::format("this worker's file {} is {} (size-hash), the coordinator's {}: not the same file", o.m->path(), o.file_id, file_id);
        say(o, why.empty() ? "hotcold worker: a coordinator said hello" : "hotcold worker: refused a coordinator: " + why);
        return why;
      },
      [self](assign_atom, int64_t first, int64_t last, int64_t n_ctx, int64_t n_seq, const std::string& kv_type, const std::string& mode) -> std::string {
        auto& st = self->state;
        const int64_t n_layer = st.o.m->hp().n_layer;
        if (first < 0 || last > n_layer || first >= last) return fmt::format("layers {}..{} of a model of {}", first, last - 1, n_layer);
        if (mode != "dense" && mode != "sparse") return fmt::format("a mode of dense or sparse, not '{}'", mode);
        if (kv_type != "f16" && kv_type != "f32") return fmt::format("a KV cache of f16 or f32, not '{}'", kv_type);
        try {
          st.ctx.reset();  // (the previous assignment's caches first)
          st.ctx = std::make_shared<inference_context>(st.o.m, n_ctx, st.o.threads, n_seq, kv_type == "f32" ? tensor_type::f32 : tensor_type::f16);
          st.ctx->set_mode(mode == "dense" ? ffn_mode::dense : ffn_mode::sparse);
        } catch (const std::exception& e) {
          st.ctx.reset();
          return e.what();
        }
        st.first = first, st.last = last;
        say(st.o, fmt::format("hotcold worker: runs layers {}-{} of {} ({} mode, {} positions x {} sequences, {} KV cache)", first, last - 1, n_layer, mode,
                              n_ctx, n_seq, kv_type));
        return {};
      },
      [self](layers_atom, const std::vector<int64_t>& seqs, const std::vector<int64_t>& positions,
             const std::vector<float>& x) -> caf::result<std::vector<float>> {
        auto& st = self->state;
        if (!st.ctx) return caf::make_error(caf::sec::runtime_error, std::string("no layers assigned to this worker"));
        try {
          st.ctx->step_begin_hidden(st.s, x, seqs, positions);
          st.ctx->step_layers(st.s, st.first, st.last);
          return std::vector<float>(st.s.x.begin(), st.s.x.begin() + static_cast<std::ptrdiff_t>(x.size()));
        } catch (const std::exception& e) {
          return caf::make_error(caf::sec::runtime_error, fmt::format("layers {}-{}: {}", st.first, st.last - 1, e.what()));
        }
      },
  };
}
}  // namespace

std::string stage_version() { return fmt::format("hotcold {} (stage protocol {}, CAF {}.{}.{})", HOTCOLD_VERSION, stage_protocol, CAF_MAJOR_VERSION, CAF_MINOR_VERSION, CAF_PATCH_VERSION); }

void configure_network(caf::actor_system_config& cfg) {
  cfg.load<caf::io::middleman>();
  cfg.add_message_type<std::vector<float>>("hotcold_floats");
  cfg.add_message_type<std::vector<int64_t>>("hotcold_i64s");
}

namespace {
// What the network sees of a stage host: a scheduled actor that hands each request to the detached
// one computing and delivers its reply, so that no detached actor is known across the network (CAF
// 0.17's actor system waits at shutdown for the threads of such actors while its network layer
// still holds them: a worker would not end on SIGTERM).
caf::behavior stage_front(caf::event_based_actor* self, caf::actor inner) {
  self->link_to(inner);
  return {
      [self, inner](hello_atom a, std::string& version, std::string& file_id) {
        return relay<std::string>(self, inner, a, std::move(version), std::move(file_id));
      },
      [self, inner](assign_atom a, int64_t first, int64_t last, int64_t n_ctx, int64_t n_seq, std::string& kv_type, std::string& mode) {
        return relay<std::string>(self, inner, a, first, last, n_ctx, n_seq, std::move(kv_type), std::move(mode));
      },
      [self, inner](layers_atom a, std::vector<int64_t>& seqs, std::vector<int64_t>& positions, std::vector<float>& x) {
        return relay<std::vector<float>>(self, inner, a, std::move(seqs), std::move(positions), std::move(x));
      },
  };
}
}  // namespace

caf::actor spawn_stage_host(caf::actor_system& sys, stage_host_options o) { return sys.spawn(stage_front, sys.spawn<caf::detached>(stage_host, std::move(o))); }

std::string stage_address::where() const { return fmt::format("tcp://{}:{} (layers {}-{})", host, port, first, last - 1); }

std::vector<stage_address> split_layers(const std::vector<std::string>& workers, const std::vector<std::string>& split, int64_t n_layer) {
  std::vector<stage_address> out;
  for (const auto& w : workers) {
    const auto ep = protocol::parse_endpoint(w);
    if (ep.kind != protocol::transport::tcp) throw std::invalid_argument(fmt::format("--workers {}: a worker's address is tcp://HOST:PORT", w));
    out.push_back({ep.host, ep.port, 0, 0});
  }
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

namespace {
// The coordinator's side of a stage: forwards `layers` requests to the worker, answers with its reply
// or error; ends with the worker's down reason.
caf::behavior stage_link(caf::event_based_actor* self, caf::actor remote) {
  self->monitor(remote);
  self->set_down_handler([self, remote](caf::down_msg& m) {
    if (m.source == remote.address()) self->quit(m.reason ? m.reason : caf::make_error(caf::sec::runtime_error, std::string("the worker ended")));
  });
  return {
      [self, remote](layers_atom a, std::vector<int64_t>& seqs, std::vector<int64_t>& positions, std::vector<float>& x) {
        return relay<std::vector<float>>(self, remote, a, std::move(seqs), std::move(positions), std::move(x));
      },
  };
}
}  // namespace

std::vector<remote_stage> connect_stages(caf::actor_system& sys, const std::vector<stage_address>& stages, const std::string& file_id, int64_t ctx,
                                         int64_t n_seq, const std::string& kv_type, const std::string& mode, std::chrono::milliseconds timeout) {
  std::vector<remote_stage> out;
  caf::scoped_actor self{sys};
  for (const auto& s : stages) {
    auto a = sys.middleman().remote_actor(s.host, s.port);
    if (!a) throw std::runtime_error(fmt::format("worker {}: cannot connect: {}", s.where(), sys.render(a.error())));
    auto ask = [&](const char* what, auto... args) {
      std::string why;
      self->request(*a, timeout, args...).receive([&](std::string& w) { why = w; },
                                                  [&](caf::error& e) { why = fmt::format("no answer to {}: {}", what, sys.render(e)); });
      if (!why.empty()) throw std::runtime_error(fmt::format("worker {}: refused: {}", s.where(), why));
    };
    ask("the handshake", hello_atom::value, stage_version(), file_id);
    ask("its layers", assign_atom::value, s.first, s.last, ctx, n_seq, kv_type, mode);
    out.push_back({sys.spawn(stage_link, *a), s.first, s.last, s.where()});
  }
  return out;
}

}  // namespace hotcold::actors
