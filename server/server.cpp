#include "server/server.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <system_error>
#include <variant>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "server/metrics.hpp"
#include "server/openai_request.hpp"
#include "actors/pipeline.hpp"
#include "server/admission.hpp"
#include "server/client_accounts.hpp"
#include "server/live_request.hpp"
#include "server/http_server.hpp"
#include "server/serve_http.hpp"
#include "server/record_file.hpp"
#include "server/sampling_map.hpp"
#include "server/serve_monitor.hpp"
#include "server/stop_text.hpp"
#include "server/text_worker.hpp"
#include "model/json_schema.hpp"
#include "engine/bandwidth.hpp"
#include "engine/read_costs.hpp"
#include "model/chat_template.hpp"
#include "model/vocab.hpp"
#include "protocol/curve.hpp"
#include "protocol/endpoint.hpp"
#include "server/serve_about.hpp"
#include "server/serve_sockets.hpp"
#include "server/stats_history.hpp"
#include "protocol/messages.hpp"

namespace hotcold::server {
namespace {

namespace proto = protocol;


class serving_loop {
 public:
  serving_loop(loader::opened_model& l, const server_options& o)
      : l_(l), o_(o), v_(l.m->vocabulary()),
        admission_(l.ctx->n_seq(), o.max_queue, o.max_queued_per_client >= 0 ? o.max_queued_per_client : o.max_queue > 0 ? std::max<int64_t>(1, o.max_queue / 4) : 0),
        accounts_(sock_, local_, o.max_client_buffer, [this](const std::string& identity, bool cut, const std::string& why) { lost(identity, cut, why); }) {}

  server_counters run(const std::atomic<bool>& stop) {
    check_bind(o_);
    // The HTTP API's requests come in over this process's own endpoint: the same protocol, queue,
    // limits and metrics as ZeroMQ clients, without CURVE (nothing outside the process reaches it).
    const std::string local_endpoint = fmt::format("inproc://hotcold-api-{}", static_cast<const void*>(this));
    std::optional<zmq::socket_t> zap = open_sockets(zctx_, sock_, local_, local_endpoint, o_, allowed_);
    pipe_ = std::make_unique<actors::pipeline>(l_.ctx, pipeline_options_of(l_, o_));
    chat_ = chat_setup(l_, o_, nullptr);  // (the protocol's generate with messages: the API's reading of them)
    if (!o_.record.empty()) record_ = record_file(o_.record);
    status_.started = clock_type::now();
    std::unique_ptr<http_server> http;
    if (!o_.http.empty()) {
      // Over as many bytes as a dense step of this model reads (read_probe).
      const double ceiling = measure_read_bandwidth(l_.ctx->pool(), read_costs(*l_.m).dense_step());
      fmt::print(stderr, "hotcold serve: memory read bandwidth {:.1f} GB/s ({} threads)\n", ceiling / 1e9, l_.ctx->pool().size());
      metrics_.attach(pipe_->stats(), ceiling);
      if (l_.disk) metrics_.attach_disk(l_.disk);
      metrics_.set_places(places_of(l_));
      http = start_serve_http({o_, l_, metrics_, status_, zctx_, local_endpoint, &history_});
    }
    fmt::print(stderr, "hotcold serve: listening on {} ({} sequences at once, queue {}, {} a client)\n", o_.endpoint.empty() ? "http://" + o_.http : o_.endpoint,
               l_.ctx->n_seq(), o_.max_queue, admission_.max_per_client());
    bool stopping = false;
    clock_type::time_point stop_seen;
    for (;;) {
      zmq::pollitem_t items[] = {{sock_.handle(), 0, ZMQ_POLLIN, 0}, {local_.handle(), 0, ZMQ_POLLIN, 0}, {zap ? zap->handle() : nullptr, 0, ZMQ_POLLIN, 0}};
      try {
        zmq::poll(items, zap ? 3 : 2, std::chrono::milliseconds(lives_.empty() && text_.pending() == 0 ? 20 : 1));
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) throw;  // a signal (SIGINT/SIGTERM): the stop flag is read next
      }
      // Read before every request: once the signal has come, health says `stopping` (a round can
      // read many large frames).
      auto notice_stop = [&] {
        if (!stop.load() || stopping) return;
        stopping = true;
        status_.stopping = true;
        stop_seen = clock_type::now();
        fmt::print(stderr, "hotcold serve: stopping: {} requests in flight are cancelled\n", lives_.size());
        for (const int64_t ticket : tickets_where([](const live&) { return true; })) cancel(ticket);
      };
      notice_stop();
      try {
        if (zap && (items[2].revents & ZMQ_POLLIN)) answer_zap(*zap);
        for (int k = 0; k < 256; ++k) {
          notice_stop();
          const bool remote = receive_one(sock_, address::remote_tag, stopping), local = receive_one(local_, address::local_tag, stopping);
          if (!remote && !local) break;
        }
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) throw;
      }
      text_.drain();
      while (auto ev = pipe_->next(std::chrono::milliseconds(0))) on_event(*ev);
      end_waiting();
      if (!stopping) start_waiting();
      metrics_.set_reply_bytes_queued(accounts_.tend());
      status_.active = admission_.in_pipeline(), status_.queued = admission_.waiting(), status_.stages_down = pipe_->stats()->stages_down();
      metrics_.set_load(status_.active, status_.queued);
      if (admission_.changed()) metrics_.set_client_queues(admission_.queue().depths());
      // Tokens per second over the last few seconds (for /api/stats and the dashboard).
      const auto now = clock_type::now();
      while (!recent_tokens_.empty() && now - recent_tokens_.front() > std::chrono::seconds(5)) recent_tokens_.pop_front();
      const double window = recent_tokens_.empty() ? 0.0 : std::chrono::duration<double>(now - recent_tokens_.front()).count();
      status_.tokens_per_second = recent_tokens_.size() < 2 || window <= 0 ? 0.0 : static_cast<double>(recent_tokens_.size() - 1) / window;
      if (now - last_sample_ >= std::chrono::seconds(1)) history_.sample(status_, metrics_), last_sample_ = now;
      // Stopping: the text work already queued gets a second to finish; what is left then is answered
      // `shutting_down`, so that a signal ends the process within a second or two.
      if (stopping && text_.pending() > 0 && clock_type::now() - stop_seen > std::chrono::seconds(1)) text_.drop_queued();
      if (stopping && lives_.empty() && text_.pending() == 0) break;
    }
    http.reset();
    pipe_.reset();
    return counters_;
  }

 private:
  bool receive_one(zmq::socket_t& s, char tag, bool stopping) {
    std::vector<zmq::message_t> frames;
    if (!zmq::recv_multipart(s, std::back_inserter(frames), zmq::recv_flags::dontwait)) return false;
    ++counters_.frames;
    if (frames.size() < 2) return true;  // no payload: nothing to answer
    address to{tag + frames[0].to_string(), frames.size() >= 3 && frames[1].size() == 0, {}};
    if (accounts_.cut_off(to.identity)) {
      ++counters_.dropped;  // cut off: nothing it asks for is done until it has read its replies
      return true;
    }
    to.client = client_name(tag, frames[0], frames.back());
    const auto& payload = frames.back();
    auto decoded = proto::decode_request(std::string_view(static_cast<const char*>(payload.data()), payload.size()), limits());
    if (auto* e = std::get_if<proto::protocol_error>(&decoded)) {
      ++counters_.bad_frames;
      metrics_.bad_frame();
      send(to, proto::encode_error(*e));
      return true;
    }
    auto& req = std::get<proto::request>(decoded);
    if (stopping && std::holds_alternative<proto::generate_request>(req)) {
      send(to, proto::encode_error({proto::error_code::shutting_down, "the server is stopping", proto::request_id(req)}));
      return true;
    }
    std::visit([&](auto& r) { handle(to, r); }, req);
    return true;
  }

  // One ZAP request (RFC 27): version, request id, domain, address, identity, mechanism, credentials.
  // A CURVE client gets in when its public key is on the allow list.
  void answer_zap(zmq::socket_t& zap) {
    std::vector<zmq::message_t> f;
    if (!zmq::recv_multipart(zap, std::back_inserter(f), zmq::recv_flags::dontwait)) return;
    std::string key;
    const bool curve = f.size() >= 7 && f[5].to_string() == "CURVE" && f[6].size() == 32;
    if (curve) key = proto::z85_of_binary_key(f[6].data());
    const bool ok = curve && allowed_.count(key);
    if (!ok) ++counters_.refused_keys;
    const std::string request_id = f.size() >= 2 ? f[1].to_string() : "";
    zap.send(zmq::buffer(std::string("1.0")), zmq::send_flags::sndmore);
    zap.send(zmq::buffer(request_id), zmq::send_flags::sndmore);
    zap.send(zmq::buffer(std::string(ok ? "200" : "400")), zmq::send_flags::sndmore);
    zap.send(zmq::buffer(std::string(ok ? "OK" : "client key not allowed")), zmq::send_flags::sndmore);
    zap.send(zmq::buffer(ok ? key : std::string()), zmq::send_flags::sndmore);
    zap.send(zmq::message_t(), zmq::send_flags::none);
  }

  proto::limits limits() const {
    proto::limits l;
    l.max_n_predict = o_.max_tokens;
    l.max_n_predict_flag = "serve --max-tokens";
    return l;
  }

  // Who sends a request, for the queue's shares: over ZeroMQ its CURVE key (however many sockets it
  // opens) or else its connection; over HTTP what the API put before the last '|' of its identity
  // (the key it was let in with, or its address).
  std::string client_name(char tag, const zmq::message_t& identity, zmq::message_t& payload) const {
    const std::string id = identity.to_string();
    if (tag == address::local_tag) return id.substr(0, id.rfind('|'));
    if (!allowed_.empty()) {
      try {
        if (const char* key = payload.gets("User-Id"); key && *key) return fmt::format("curve:{:.12}", key);
      } catch (const zmq::error_t&) {
      }
    }
    std::string hex = "zmq:";
    for (unsigned char c : id) hex += fmt::format("{:02x}", c);
    return hex;
  }

  // Requests that wait for the text worker: at most this many per client and in all; past that,
  // `busy` (each holds its text, up to a frame).
  static constexpr int64_t max_text_jobs_per_client = 16, max_text_jobs = 256;
  // Texts this short are tokenized at once (well under a millisecond): the worker is for long ones.
  static constexpr size_t inline_text_bytes = 2048;

  // Runs `job` on the text worker if the client and the server have room for it; else answers busy.
  bool post_text_job(const address& to, const std::string& id, std::function<text_worker::completion()> job) {
    auto& acct = accounts_.account(to.identity);
    if (acct->text_jobs >= max_text_jobs_per_client || text_.pending() >= max_text_jobs) {
      ++counters_.busy;
      send(to, proto::encode_error({proto::error_code::busy, fmt::format("{} requests of this client wait for the tokenizer", acct->text_jobs), id}, 100));
      return false;
    }
    ++acct->text_jobs;
    text_.post(
        [job = std::move(job), acct]() -> text_worker::completion {
          auto then = job();
          return [then = std::move(then), acct] {
            --acct->text_jobs;
            then();
          };
        },
        [this, to, id, acct] {  // the server stopped before this job started: answered, not lost
          --acct->text_jobs;
          const auto key = std::make_pair(to.identity, id);
          if (auto it = by_client_.find(key); it != by_client_.end() && it->second == pending_tokenize) by_client_.erase(it);
          pending_cancelled_.erase(key);
          send(to, proto::encode_error({proto::error_code::shutting_down, "the server is stopping", id}));
        });
    return true;
  }

  // A long prompt is tokenized on the text worker; the generate goes on when it is done (a cancel
  // meanwhile is remembered: by_client_ marks its id pending_tokenize).
  void handle(const address& to, proto::generate_request& g) {
    ++counters_.requests;
    if (by_client_.count({to.identity, g.id})) return refuse(to, g.id, proto::error_code::duplicate_id, "a request with this id is in flight");
    if (!g.messages.empty()) {  // a conversation, as the HTTP API reads one (tools and all)
      chat_request c;
      try {
        c = chat_of(g.messages, g.tools, g.tool_choice, chat_);
        if (!c.grammar.empty() && !(g.grammar.empty() && g.json_schema.empty())) throw std::invalid_argument("tool_choice together with a grammar or json_schema");
      } catch (const std::invalid_argument& e) {
        return refuse(to, g.id, proto::error_code::invalid_field, e.what());
      }
      if (!c.grammar.empty()) g.grammar = std::move(c.grammar);
      if (!c.tools.active()) g.tools.clear();  // (no calls read back)
      return start_generate(to, g, std::move(c.tokens));
    }
    if (!g.prompt) return start_generate(to, g, std::vector<token_id>(g.tokens.begin(), g.tokens.end()));
    if (g.prompt->size() <= inline_text_bytes) return start_generate(to, g, v_.tokenize(*g.prompt, true, g.parse_special));
    auto req = std::make_shared<proto::generate_request>(std::move(g));
    const bool posted = post_text_job(to, req->id, [this, to, req]() -> text_worker::completion {
      auto tokens = v_.tokenize(*req->prompt, true, req->parse_special);
      return [this, to, req, tokens = std::move(tokens)]() mutable {
        const auto key = std::make_pair(to.identity, req->id);
        const bool cancelled = pending_cancelled_.erase(key) > 0;
        by_client_.erase(key);
        start_generate(to, *req, std::move(tokens), cancelled);
      };
    });
    if (posted) by_client_[{to.identity, req->id}] = pending_tokenize;
  }

  // A generate that cannot start: counted as an invalid request, answered with the error.
  void refuse(const address& to, const std::string& id, proto::error_code c, std::string why) {
    ++counters_.errors;
    metrics_.request_done("invalid", 0, 0);
    send(to, proto::encode_error({c, std::move(why), id}));
  }

  void start_generate(const address& to, proto::generate_request& g, std::vector<token_id> tokens, bool cancelled = false) {
    auto refuse = [&](proto::error_code c, std::string why) { this->refuse(to, g.id, c, std::move(why)); };
    if (status_.stopping) {
      send(to, proto::encode_error({proto::error_code::shutting_down, "the server is stopping", g.id}));
      return;
    }
    const int64_t max_prompt = o_.max_prompt_tokens > 0 ? std::min(o_.max_prompt_tokens, l_.ctx->n_ctx()) : l_.ctx->n_ctx();
    if (auto bad = check_prompt(tokens, l_.m->hp().n_vocab, max_prompt, l_.ctx->n_ctx())) return refuse(bad->code, std::move(bad->why));
    std::string gbnf;  // the request's grammar or schema, checked; else the server's own (serve --grammar)
    try {
      gbnf = checked_grammar(g.grammar, g.json_schema);
    } catch (const std::invalid_argument& e) {
      return refuse(proto::error_code::invalid_field, g.json_schema.empty() ? e.what() : fmt::format("json_schema: {}", e.what()));
    }
    if (gbnf.empty() && g.json_schema.empty()) gbnf = o_.grammar;
    // A free slot and no one waiting: it starts at once; else it waits its turn, if the queue and
    // this client's share of it have room.
    const int64_t ticket = next_ticket_++;
    const auto admitted = admission_.admit(to.client, ticket);
    if (admitted.busy) {
      ++counters_.busy;
      metrics_.request_done("busy", 0, 0);
      send(to, proto::encode_error({proto::error_code::busy, *admitted.busy, g.id}, admitted.retry_ms));
      return;
    }
    actors::generation_request r;
    r.prompt = tokens;
    // -1: until the end of the text or a full context, at most --max-tokens.
    r.n_predict = g.n_predict < 0 ? o_.max_tokens : g.n_predict;
    const uint64_t seed = g.params.seed ? *g.params.seed : seeds_();
    r.sampling = sampler_params_of(g.params, seed);
    r.sampling.grammar = std::move(gbnf);
    r.cache_prompt = g.cache_prompt && !g.prompt_logprobs;  // (the prompt's log probabilities: every position computed)
    r.sampling.logprobs = g.logprobs ? g.n_probs : -1;
    r.all_logits = g.prompt_logprobs, r.ignore_eos = g.ignore_eos;
    // Accepted before it is submitted: the pipeline can sample the first token (and stamp it) before
    // this thread runs again, which made a time to first token negative now and then.
    const auto accepted = clock_type::now();
    live& lv = lives_[ticket];
    lv.pending = std::move(r);
    lv.to = to;
    lv.id = g.id;
    lv.stream = g.stream;
    lv.prompt_tokens = static_cast<int64_t>(tokens.size());
    lv.accepted = accepted;
    if (record_.is_open()) {  // the request as it ran: its fields, the seed the sampler used
      g.params.seed = seed;
      lv.recorded_request = proto::generate_body(g).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      lv.arrival_s = std::chrono::duration<double>(lv.accepted - status_.started).count();
    }
    lv.out = stop_text(std::move(g.stop));
    lv.n_probs = g.n_probs;
    if (!g.messages.empty() && !g.tools.empty() && chat_.chat) lv.tools = tool_format_of(*chat_.chat);
    if (g.prompt_logprobs) lv.prompt = tokens;
    by_client_[{to.identity, g.id}] = ticket;
    ++accounts_.account(to.identity)->in_flight;
    send(to, proto::encode_accepted(g.id, lv.prompt_tokens, seed), &lv);
    if (admitted.start_now) start(ticket);
    if (cancelled) cancel(ticket);  // cancelled while its prompt was tokenized
  }

  // Hands a request to the pipeline.
  void start(int64_t ticket) {
    live& lv = lives_.at(ticket);
    lv.waited_s = std::chrono::duration<double>(clock_type::now() - lv.accepted).count();
    lv.pid = pipe_->submit(std::move(lv.pending));
    ticket_of_pid_[lv.pid] = ticket;
    admission_.started();
  }

  // Free slots to the waiting requests, the clients in turn.
  void start_waiting() {
    while (const auto ticket = admission_.next()) start(*ticket);
  }

  // Cancels a request: in the pipeline, its done (finish "cancelled") follows within a step; waiting,
  // it leaves the queue and ends in this round.
  void cancel(int64_t ticket) {
    live& lv = lives_.at(ticket);
    if (!lv.waiting()) return pipe_->cancel(lv.pid);
    if (admission_.remove(ticket)) ended_waiting_.push_back(ticket);
  }

  // The tickets of the requests `pick` chooses (to act on them while the map may change).
  std::vector<int64_t> tickets_where(const std::function<bool(const live&)>& pick) const {
    std::vector<int64_t> out;
    for (const auto& [ticket, lv] : lives_)
      if (pick(lv)) out.push_back(ticket);
    return out;
  }

  void handle(const address& to, proto::cancel_request& c) {
    auto it = by_client_.find({to.identity, c.id});
    if (it == by_client_.end()) {
      send(to, proto::encode_error({proto::error_code::not_found, "no request with this id in flight", c.id}));
      return;
    }
    if (it->second == pending_tokenize) pending_cancelled_.insert(it->first);  // cancelled once it starts
    else cancel(it->second);
  }

  void handle(const address& to, proto::health_request& h) { send(to, proto::encode_health(h.id, status_.health(), admission_.in_pipeline(), admission_.waiting())); }

  void handle(const address& to, proto::model_info_request& m) {
    const auto& hp = l_.m->hp();
    proto::model_facts f;
    f.path = l_.m->path();
    f.architecture = std::string(architecture_name(hp.arch));
    f.activation = std::string(activation_name(hp.act));
    f.mode = ffn_mode_name(l_.ctx->mode());
    f.n_vocab = hp.n_vocab, f.n_ctx = l_.ctx->n_ctx(), f.n_layer = hp.n_layer, f.n_embd = hp.n_embd, f.n_ff = hp.n_ff;
    f.bos = v_.bos(), f.eos = v_.eos();
    send(to, proto::encode_model_info(m.id, f));
  }

  // Tokenize and detokenize run on the text worker; their replies are encoded there too.
  void handle(const address& to, proto::tokenize_request& t) {
    if (t.text.size() <= inline_text_bytes) {
      auto ids = v_.tokenize(t.text, t.add_special, t.parse_special);
      return send(to, proto::encode_tokens(t.id, std::vector<int32_t>(ids.begin(), ids.end())));
    }
    auto req = std::make_shared<proto::tokenize_request>(std::move(t));
    post_text_job(to, req->id, [this, to, req]() -> text_worker::completion {
      auto ids = v_.tokenize(req->text, req->add_special, req->parse_special);
      auto reply = std::make_shared<std::string>(proto::encode_tokens(req->id, std::vector<int32_t>(ids.begin(), ids.end())));
      return [this, to, reply] { send(to, std::move(*reply)); };
    });
  }

  void handle(const address& to, proto::detokenize_request& d) {
    for (int32_t t : d.tokens)
      if (t >= l_.m->hp().n_vocab) {
        send(to, proto::encode_error({proto::error_code::invalid_field, fmt::format("token id {} is outside the vocabulary of {}", t, l_.m->hp().n_vocab), d.id}));
        return;
      }
    if (d.tokens.size() <= inline_text_bytes / 4)
      return send(to, proto::encode_text(d.id, v_.detokenize(std::vector<token_id>(d.tokens.begin(), d.tokens.end()))));
    auto req = std::make_shared<proto::detokenize_request>(std::move(d));
    post_text_job(to, req->id, [this, to, req]() -> text_worker::completion {
      auto reply = std::make_shared<std::string>(proto::encode_text(req->id, v_.detokenize(std::vector<token_id>(req->tokens.begin(), req->tokens.end()))));
      return [this, to, reply] { send(to, std::move(*reply)); };
    });
  }

  void on_event(actors::pipeline_event& ev) {
    if (auto* t = std::get_if<actors::token_event>(&ev)) return on_token(*t);
    if (auto* d = std::get_if<actors::done_event>(&ev)) return on_done(*d);
    if (auto* l = std::get_if<actors::logits_event>(&ev); l && of_pid(l->request))  // (the prompt's log probabilities)
      for (auto& frame : prompt_token_replies(*of_pid(l->request), *l, v_)) send(of_pid(l->request)->to, std::move(frame), of_pid(l->request));
    if (auto* e = std::get_if<actors::slot_event>(&ev); e && slot_askers_.count(e->request)) {
      const slot_asker a = slot_askers_.at(e->request);
      slot_askers_.erase(e->request);
      send(a.to, slot_answer(*e, a.id));
    }
  }

  // A slot's cache to or from a file of --slot-save-path, or erased: the scheduler does it between steps.
  void handle(const address& to, proto::slot_request& s) {
    try {
      slot_askers_[pipe_->slot_action(s.action, s.slot, slot_file_path(o_, s))] = {to, s.id};
    } catch (const std::invalid_argument& e) {
      send(to, proto::encode_error({proto::error_code::invalid_field, e.what(), s.id}));
    }
  }

  live* of_pid(int64_t pid) {
    const auto t = ticket_of_pid_.find(pid);
    return t == ticket_of_pid_.end() ? nullptr : &lives_.at(t->second);
  }

  void on_token(const actors::token_event& t) {
    live* found = of_pid(t.request);
    if (!found) return;
    live& lv = *found;
    if (lv.out.stopped()) return;  // cut: the cancel is on its way
    const auto now = t.at;  // when the token was sampled, not when this loop got to it
    if (t.index == 0) {
      lv.ttft_s = std::chrono::duration<double>(now - lv.accepted).count();
      metrics_.time_to_first_token(lv.ttft_s);
    } else {
      const double gap = std::chrono::duration<double>(now - lv.last_token).count();
      metrics_.inter_token_latency(gap);
      if (record_.is_open()) lv.itl_s.push_back(gap);
    }
    lv.last_token = now;
    recent_tokens_.push_back(now);
    if (t.probs) lv.probs[t.index] = *t.probs;
    if (lv.out.add(t.index, t.token, v_.piece(t.token), std::chrono::duration<double, std::milli>(now - lv.accepted).count(), sender(lv)))
      pipe_->cancel(t.request);  // a stop string: the text ends where it begins
  }

  // Sends each token the text releases (streaming), and counts it.
  stop_text::sink sender(live& lv) {
    return [this, &lv](const stop_text::token& tk) {
      const auto wire = take_probs(lv, tk.index, v_);
      if (lv.stream) send(lv.to, proto::encode_token(lv.id, tk.index, tk.id, tk.text, tk.ms, wire ? &*wire : nullptr), &lv);
      ++lv.emitted;
    };
  }

  void on_done(const actors::done_event& d) {
    const auto t = ticket_of_pid_.find(d.request);
    if (t == ticket_of_pid_.end()) return;
    const int64_t ticket = t->second;
    ticket_of_pid_.erase(t);
    admission_.ended();
    const double w = lives_.at(ticket).waited_s;
    lives_.at(ticket).cached_tokens = d.cached_tokens;
    lives_.at(ticket).computed_tokens = d.computed_tokens;
    finish(ticket, d.finish, {1000 * (w + d.queued_s), 1000 * (w + d.time_to_first_token_s), 1000 * (w + d.total_s)}, d.error);
  }

  // Requests that left the queue before they started (cancelled, their client gone), ended.
  void end_waiting() {
    for (const int64_t ticket : std::exchange(ended_waiting_, {})) {
      const double w = std::chrono::duration<double>(clock_type::now() - lives_.at(ticket).accepted).count();
      finish(ticket, "cancelled", {1000 * w, 0, 1000 * w});
    }
  }

  // A request's end: counted, recorded, its done sent, forgotten.
  void finish(int64_t ticket, const std::string& pipeline_finish, const proto::timings& tm, const std::string& error = {}) {
    live& lv = lives_.at(ticket);
    lv.out.finish(sender(lv));
    std::string finish = lv.out.stopped() ? "stop_string" : lv.cut_off ? "cut_off" : pipeline_finish;
    if (finish == "cancelled") ++counters_.cancelled;
    else if (finish == "error") ++counters_.errors;
    else ++counters_.completed;
    metrics_.request_done(finish, lv.prompt_tokens, lv.emitted, lv.cached_tokens, lv.computed_tokens);
    if (record_.is_open() && !record_.append(record_line(lv, finish))) metrics_.record_write_error();
    if (o_.log_requests) fmt::print(stderr, "{}\n", log_line(lv, finish, tm, error));
    send(lv.to, done_of(lv, finish, tm, error), &lv);
    by_client_.erase({lv.to.identity, lv.id});
    --accounts_.account(lv.to.identity)->in_flight;
    lives_.erase(ticket);
  }

  // Sends one reply, never waiting (client_accounts::send); nothing to a client that is gone or cut off.
  void send(const address& to, std::string payload, live* lv = nullptr) {
    if (lv && lv->gone) return;
    if (accounts_.cut_off(to.identity)) {
      ++counters_.dropped;
      return;
    }
    accounts_.send(to, std::move(payload));
  }

  // A client nothing more can be sent to: it left (its requests are cancelled, freed within a step),
  // or it stopped reading — cut off: its requests are cancelled (outcome `cut_off`) and what it sends
  // is dropped until it has read what is queued for it.
  void lost(const std::string& identity, bool cut_off, const std::string& why) {
    if (!cut_off) {
      ++counters_.unreachable;
      cancel_requests_of(identity, false);
      return;
    }
    ++counters_.cut_off;
    metrics_.client_cut_off();
    const int64_t cancelled = cancel_requests_of(identity, true);
    fmt::print(stderr, "hotcold serve: a client cut off ({}): {} of its requests cancelled\n", why, cancelled);
  }

  // Cancels the requests of a client nothing more can be sent to (it left, or was cut off); they are
  // freed within a step. Returns how many.
  int64_t cancel_requests_of(const std::string& identity, bool cut_off) {
    const auto tickets = tickets_where([&](const live& r) { return r.to.identity == identity && !r.gone; });
    for (const int64_t ticket : tickets) {
      live& r = lives_.at(ticket);
      r.gone = true;
      r.cut_off = cut_off;
      cancel(ticket);
    }
    return static_cast<int64_t>(tickets.size());
  }

  loader::opened_model& l_;
  const server_options& o_;
  const vocab& v_;
  zmq::context_t zctx_;
  zmq::socket_t sock_{zctx_, zmq::socket_type::router};
  zmq::socket_t local_{zctx_, zmq::socket_type::router};  // the HTTP API's requests (inproc)
  std::unique_ptr<actors::pipeline> pipe_;
  openai_setup chat_;
  std::map<int64_t, live> lives_;                               // by ticket (the server's own numbers)
  std::map<int64_t, int64_t> ticket_of_pid_;                    // pipeline request id -> ticket
  std::map<int64_t, slot_asker> slot_askers_;                   // pipeline slot action id -> who asked
  int64_t next_ticket_ = 0;
  admission admission_;                                         // slots, and the tickets waiting for one
  std::vector<int64_t> ended_waiting_;                          // ... taken out of the queue, to end this round
  client_accounts accounts_;                                    // by identity
  std::map<std::pair<std::string, std::string>, int64_t> by_client_;  // (identity, client id) -> ticket, or:
  static constexpr int64_t pending_tokenize = -1;                     // its prompt is on the text worker
  std::set<std::pair<std::string, std::string>> pending_cancelled_;   // ... and a cancel came meanwhile
  std::set<std::string> allowed_;  // client public keys (CURVE)
  stats_history history_;           // the last minutes, a sample a second (GET /api/history)
  clock_type::time_point last_sample_;
  metrics metrics_;
  record_file record_;
  serve_status status_;  // for the HTTP thread
  std::deque<clock_type::time_point> recent_tokens_;  // tokens of the last 5 s
  std::mt19937_64 seeds_{std::random_device{}()};
  server_counters counters_;
  text_worker text_;  // last: its thread ends before what its jobs use
};

}  // namespace

server_counters serve(loader::opened_model& l, const server_options& o, const std::atomic<bool>& stop) { return serving_loop(l, o).run(stop); }

}  // namespace hotcold::server
