// hotcold replay --trace FILE.jsonl --endpoint EP [--speed X] [--max-concurrency N] --report OUT.json [--compare]:
// sends a recorded workload (serve --record) again with its recorded inter-arrival times (open loop)
// and reports the latencies it meets.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "launcher/cmd_replay.hpp"
#include "launcher/commands.hpp"
#include "clients/client.hpp"
#include "tools/whatif.hpp"
#include "engine/bandwidth.hpp"
#include "engine/read_costs.hpp"
#include "engine/thread_pool.hpp"
#include "tools/expert_cache.hpp"

namespace hotcold::launcher {
namespace {

using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;

json summary(std::vector<double> v) {
  if (v.empty()) return json{{"p50", nullptr}, {"p95", nullptr}, {"p99", nullptr}, {"mean", nullptr}, {"max", nullptr}, {"n", 0}};
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))]; };
  double sum = 0;
  for (double x : v) sum += x;
  return json{{"p50", at(0.50)}, {"p95", at(0.95)}, {"p99", at(0.99)}, {"mean", sum / static_cast<double>(v.size())}, {"max", v.back()}, {"n", v.size()}};
}

struct measured {
  std::vector<double> ttft, itl, e2e;
};

// hotcold replay --activations TRACE -m MODEL --vram-budget GiB...: the estimates, as a table and JSON.
// hotcold replay --activations TRACE -m MOE --experts-cached C...: a mixture's recorded routings through
// a device cache of C experts a layer, under each policy, and what a token would take: a bandwidth
// model in which attention, the router, shared experts and the head are on the device (read at the hot
// rate), and each layer's routed experts split — the cold ones read by the CPU while the device reads
// the hot ones and its uploads come over the link — the layer taking the longer side.
void expert_what_if(const tools::activation_record& rec, const std::string& model_path, const tools::whatif_options& o, const std::string& report_path) {
  auto m = model::load(model_path, {true});
  const hparams& hp = m->hp();
  if (o.experts_cached.empty())
    throw std::invalid_argument(fmt::format("--activations on a mixture of experts ({}): give --experts-cached N (one or more cache sizes, experts a layer)",
                                            o.model_path));
  if (rec.n_layer != hp.n_layer || rec.n_ff != hp.n_expert)
    throw std::invalid_argument(fmt::format("{} holds {} layers x {} choices; {} has {} layers x {} experts", rec.source, rec.n_layer, rec.n_ff, o.model_path,
                                            hp.n_layer, hp.n_expert));
  std::optional<tools::activation_record> elsewhere;
  if (!o.experts_popular_from.empty()) elsewhere = loader::read_activation_record(o.experts_popular_from);
  // The rates: the CPU's measured here (or given), the device's given (else the CPU's), the link's.
  double cpu = o.cpu_gbps * 1e9;
  if (cpu <= 0) {
    thread_pool pool(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
    cpu = measure_read_bandwidth(pool);
  }
  const double hot = o.hot_gbps > 0 ? o.hot_gbps * 1e9 : cpu, link = o.link_gbps * 1e9;
  const read_costs costs(*m);
  double fixed = static_cast<double>(costs.output);
  std::vector<double> expert(static_cast<size_t>(hp.n_layer));
  for (size_t l = 0; l < expert.size(); ++l)
    fixed += static_cast<double>(costs.layer_fixed[l]), expert[l] = static_cast<double>(costs.neuron[l] * static_cast<uint64_t>(hp.n_ff_exp));
  const double k = static_cast<double>(hp.n_expert_used);
  auto seconds = [&](const tools::expert_cache_result& r) {
    double t = fixed / hot;
    for (size_t l = 0; l < expert.size(); ++l) {
      const double h = r.layer_hit_rate[l], up = r.uploads_per_token / static_cast<double>(expert.size());
      t += std::max((1 - h) * k * expert[l] / cpu, h * k * expert[l] / hot + up * expert[l] / link);
    }
    return t;
  };
  double all_experts = 0;
  for (double e : expert) all_experts += k * e;
  const double cpu_only = (fixed + all_experts) / cpu;
  fmt::print("expert cache what-if over {} layers x {} experts ({} used a token) from {}\n", hp.n_layer, hp.n_expert, hp.n_expert_used, rec.source);
  fmt::print("time: a bandwidth model: CPU {:.1f} GB/s, device {:.1f} GB/s, uploads {:.1f} GB/s; {:.2f} MiB a token besides the experts (on the device), "
             "{:.2f} MiB an expert; the CPU alone: {:.2f} ms a token ({:.1f} tokens/s)\n",
             cpu / 1e9, hot / 1e9, link / 1e9, fixed / double(1 << 20), expert[0] / double(1 << 20), 1e3 * cpu_only, 1 / cpu_only);
  fmt::print("| experts cached a layer | policy | hit rate | uploads / token | ms/token | tokens/s |\n| --- | --- | --- | --- | --- | --- |\n");
  nlohmann::json rows = nlohmann::json::array();
  int64_t tokens = 0;
  for (int64_t c : o.experts_cached)
    for (int v = 0; v < (elsewhere ? 4 : 3); ++v) {
      const auto p = v == 0 ? tools::expert_policy::lru : v == 1 ? tools::expert_policy::lfu_decay : tools::expert_policy::popular;
      const auto r = tools::replay_expert_cache(rec, p, c, 0.9, v == 3 ? &*elsewhere : nullptr);
      const std::string name = v == 3 ? "popular-elsewhere" : std::string(tools::expert_policy_name(p));
      tokens = r.tokens;
      const double t = seconds(r);
      fmt::print("| {} | {} | {:.4f} | {:.2f} | {:.3f} | {:.1f} |\n", c, name, r.hit_rate, r.uploads_per_token, 1e3 * t, 1 / t);
      rows.push_back({{"experts_cached", c}, {"policy", name}, {"expert_hit_rate", r.hit_rate}, {"expert_uploads_per_token", r.uploads_per_token},
                      {"layer_hit_rate", r.layer_hit_rate}, {"seconds_per_token", t}, {"tokens_per_s", 1 / t}});
    }
  fmt::print("({} tokens; popular: the most chosen experts of the whole record, fixed, never uploaded{})\n", tokens,
             elsewhere ? fmt::format("; popular-elsewhere: those of {}", elsewhere->source) : "");
  if (report_path.empty()) return;
  nlohmann::json j{{"source", rec.source}, {"tokens", tokens}, {"expert_caches", rows},
                   {"rates", {{"cpu_gbps", cpu / 1e9}, {"hot_gbps", hot / 1e9}, {"link_gbps", link / 1e9}}}, {"cpu_only_seconds_per_token", cpu_only}};
  std::ofstream out(report_path);
  out << j.dump(2) << "\n";
  if (!out) throw std::system_error(errno, std::generic_category(), "cannot write " + report_path);
}

void what_if(const std::string& activations, tools::whatif_options o, const std::string& report_path) {
  if (o.model_path.empty()) throw std::invalid_argument("--activations needs -m MODEL (the model the run used)");
  const auto rec = loader::read_activation_record(activations);
  {
    // The file's hyper-parameters only: the neurons' what-if loads the model itself.
    const hparams hp = read_hparams(gguf::file::open(o.model_path));
    if (hp.moe()) return expert_what_if(rec, o.model_path, o, report_path);
    if (!o.experts_popular_from.empty()) throw std::invalid_argument(fmt::format("--experts-popular-from: {} is not a mixture of experts", o.model_path));
    if (!o.experts_cached.empty()) throw std::invalid_argument(fmt::format("--experts-cached: {} is not a mixture of experts", o.model_path));
  }
  if (o.budgets_gib.empty() && o.placements.empty() && rec.hot.empty())
    throw std::invalid_argument("--activations: give --vram-budget GiB (one or more) or --placement FILE to estimate");
  std::vector<std::pair<int64_t, tools::step_timing>> timing;
  std::string trace_json;
  if (!rec.from_profile) {
    trace_json = rec.source.ends_with(".activations") ? rec.source.substr(0, rec.source.size() - 12) : rec.source;
    if (std::filesystem::exists(trace_json)) timing = tools::read_step_timing(trace_json, rec.n_layer);
  }
  const auto r = tools::estimate_whatif(rec, timing, o);
  fmt::print("what-if over {} steps, {} tokens ({:.1f}% of FFN neurons active) from {}\n", r.steps, r.tokens, 100 * r.active_ratio, rec.source);
  if (r.timed)
    fmt::print("time: the trace's steps ({:.3f} ms/token recorded), each layer's FFN re-costed at the rates its intervals show: cold side {:.1f} GB/s + {:.0f} us, "
               "hot side {:.1f} GB/s + {:.0f} us\n",
               1000 * r.recorded_seconds_per_token, r.cold_gbps, r.cold_overhead_us, r.hot_gbps, r.hot_overhead_us);
  else
    fmt::print("time: a bandwidth model (no trace{}): CPU {:.1f} GB/s, hot device {:.1f} GB/s\n", rec.from_profile ? " for a profile" : " beside the record",
               r.cold_gbps, r.hot_gbps);
  fmt::print("| placement | hot neurons | hot FFN GiB | hot-hit ratio | FFN rows/token hot / cold | ms/token | tokens/s |\n"
             "| --- | --- | --- | --- | --- | --- | --- |\n");
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& row : r.rows) {
    fmt::print("| {} | {} | {:.3f} | {:.4f} | {:.0f} / {:.0f} | {:.3f} | {:.1f} |\n", row.label, row.hot_neurons, row.hot_bytes / double(1ull << 30),
               row.hot_hit_ratio, row.hot_rows_per_token, row.cold_rows_per_token, 1000 * row.seconds_per_token, 1 / row.seconds_per_token);
    rows.push_back({{"placement", row.label}, {"hot_neurons", row.hot_neurons}, {"hot_ffn_bytes", row.hot_bytes}, {"hot_hit_ratio", row.hot_hit_ratio},
                    {"layer_hot_hit_ratio", row.layer_hot_hit}, {"hot_rows_per_token", row.hot_rows_per_token}, {"cold_rows_per_token", row.cold_rows_per_token},
                    {"seconds_per_token", row.seconds_per_token}});
  }
  if (report_path.empty()) return;
  nlohmann::json j{{"source", rec.source}, {"steps", r.steps}, {"tokens", r.tokens}, {"active_ratio", r.active_ratio}, {"timed", r.timed},
                   {"recorded_seconds_per_token", r.timed ? nlohmann::json(r.recorded_seconds_per_token) : nlohmann::json()},
                   {"rates", {{"cold_gbps", r.cold_gbps}, {"cold_overhead_us", r.cold_overhead_us}, {"hot_gbps", r.hot_gbps}, {"hot_overhead_us", r.hot_overhead_us}}},
                   {"estimates", rows}};
  std::ofstream out(report_path);
  out << j.dump(2) << "\n";
  if (!out) throw std::system_error(errno, std::generic_category(), "cannot write " + report_path);
}

// The records of a serve --record file, by arrival; what they recorded goes to `recorded`, and `torn`
// counts lines cut short (the recorder killed mid-write: the rest is still good).
std::vector<json> read_records(const std::string& path, measured& recorded, int& torn) {
  if (std::filesystem::is_directory(path)) throw std::invalid_argument(fmt::format("--trace {}: a directory, not a record file", path));
  std::ifstream in(path);
  if (!in) throw std::invalid_argument(fmt::format("--trace {}: cannot read ({})", path, std::strerror(errno)));
  std::vector<json> lines;
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    if (line.empty()) continue;
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded()) {
      ++torn;
      fmt::print(stderr, "hotcold replay: {}:{}: not a whole JSON record (cut short?): skipped\n", path, n);
      continue;
    }
    if (!j.is_object() || !j.contains("request") || !j["request"].is_object() || !j.value("arrival_s", json()).is_number())
      throw std::invalid_argument(fmt::format("{}:{}: not a record of serve --record (needs arrival_s and request)", path, n));
    if (j["generated_tokens"].is_number() && j["generated_tokens"].get<int64_t>() > 0) recorded.ttft.push_back(j.value("ttft_s", 0.0));
    for (const auto& g : j.value("itl_s", json::array())) recorded.itl.push_back(g.get<double>());
    recorded.e2e.push_back(j.value("e2e_s", 0.0));
    lines.push_back(std::move(j));
  }
  std::sort(lines.begin(), lines.end(), [](const json& x, const json& y) { return x["arrival_s"].get<double>() < y["arrival_s"].get<double>(); });
  return lines;
}

// Open loop: each record is handed out at its recorded time (scaled) to one of max_concurrency
// workers, each with its own connection; when all are busy, it waits for one.
class open_loop {
 public:
  open_loop(const replay_args& a) : a_(a), reply_timeout_(std::chrono::milliseconds(static_cast<int64_t>(1000 * a.timeout))) {}

  // Sends every record's request at its time; returns the seconds it took.
  double run(const std::vector<json>& lines) {
    start_workers(static_cast<int>(std::min<size_t>(static_cast<size_t>(a_.max_concurrency), std::max<size_t>(lines.size(), 1))));
    const int capacity = static_cast<int>(workers_.size());
    const double t_first = lines.empty() ? 0.0 : lines.front()["arrival_s"].get<double>();
    const auto t0 = clock_type::now();
    for (const auto& line : lines) {
      const double due = (line["arrival_s"].get<double>() - t_first) / a_.speed;
      std::this_thread::sleep_until(t0 + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(due)));
      std::unique_lock lock(m_);
      cv_.wait(lock, [&] { return busy_ < capacity; });
      ++busy_;
      due_now_.push_back(&line["request"]);
      cv_.notify_all();
    }
    {
      std::lock_guard lock(m_);
      all_sent_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    return std::chrono::duration<double>(clock_type::now() - t0).count();
  }
  const measured& replayed() const { return replayed_; }
  int failed() const { return failed_; }

 private:
  void start_workers(int n) {
    for (int k = 0; k < n; ++k) {
      try {
        workers_.emplace_back([this] { work(); });
      } catch (const std::system_error& e) {
        if (workers_.empty()) throw std::runtime_error(fmt::format("cannot start a thread for the requests: {}", e.what()));
        fmt::print(stderr, "hotcold replay: {} requests at once, not {}: no more threads ({})\n", workers_.size(), n, e.what());
        break;
      }
    }
  }
  void work() {
    std::unique_ptr<clients::client> c;
    for (;;) {
      const json* request = nullptr;
      {
        std::unique_lock lock(m_);
        cv_.wait(lock, [&] { return all_sent_ || !due_now_.empty(); });
        if (due_now_.empty()) return;
        request = due_now_.front();
        due_now_.pop_front();
      }
      std::vector<double> gaps;
      double ttft = -1;
      const auto start = clock_type::now();
      auto last = start;
      bool ok = true;
      try {
        if (!c) c = std::make_unique<clients::client>(a_.endpoint, reply_timeout_);
        c->generate(*request, [&](const protocol::token_reply&) {
          const auto now = clock_type::now();
          if (ttft < 0) ttft = std::chrono::duration<double>(now - start).count();
          else gaps.push_back(std::chrono::duration<double>(now - last).count());
          last = now;
        });
      } catch (const std::exception& e) {
        ok = false;
        c.reset();  // a fresh connection: late replies of this request must not meet the next one
        fmt::print(stderr, "hotcold replay: a request failed: {}\n", e.what());
      }
      const double e2e = std::chrono::duration<double>(clock_type::now() - start).count();
      std::lock_guard lock(m_);
      if (ok) {
        if (ttft >= 0) replayed_.ttft.push_back(ttft);
        replayed_.itl.insert(replayed_.itl.end(), gaps.begin(), gaps.end());
        replayed_.e2e.push_back(e2e);
      } else {
        ++failed_;
      }
      --busy_;
      cv_.notify_all();
    }
  }
  const replay_args& a_;
  const std::chrono::milliseconds reply_timeout_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<const json*> due_now_;
  bool all_sent_ = false;
  int busy_ = 0, failed_ = 0;
  measured replayed_;
  std::vector<std::thread> workers_;
};

void print_latencies(const json& report, size_t requests, double seconds, int failed, bool compare) {
  auto ms = [](const json& v) { return v.is_null() ? std::string("-") : fmt::format("{:.1f}", 1000 * v.get<double>()); };
  fmt::print("{} requests in {:.2f} s ({} failed); milliseconds:\n", requests, seconds, failed);
  fmt::print("| metric | {} p50 | p95 | p99 | mean | max |\n| --- | --- | --- | --- | --- | --- |\n", compare ? "replayed / recorded" : "");
  for (const char* k : {"ttft_s", "itl_s", "e2e_s"}) {
    std::vector<std::string> cells;
    for (const char* q : {"p50", "p95", "p99", "mean", "max"})
      cells.push_back(compare ? fmt::format("{} / {}", ms(report[k][q]), ms(report["recorded"][k][q])) : ms(report[k][q]));
    fmt::print("| {} | {} |\n", k, fmt::join(cells, " | "));
  }
}

}  // namespace

void run_replay(const replay_args& a) {
  if (!a.activations.empty()) return what_if(a.activations, a.w, a.report);
  if (a.trace.empty() || a.report.empty()) throw std::invalid_argument("replay needs --trace FILE.jsonl and --report OUT.json (or --activations TRACE for a what-if)");
  measured recorded;
  int torn = 0;
  const auto lines = read_records(a.trace, recorded, torn);
  // Is anyone there? (ZeroMQ connects lazily and would wait for a server for ever.)
  try {
    clients::client probe(a.endpoint, std::chrono::milliseconds(static_cast<int64_t>(1000 * a.connect_timeout)));
    probe.call("health");
  } catch (const clients::client_error& e) {
    throw std::runtime_error(fmt::format("--endpoint {}: no server answered within {} s ({})", a.endpoint, a.connect_timeout, e.what()));
  }
  open_loop loop(a);
  const double seconds = loop.run(lines);
  const measured& replayed = loop.replayed();
  json report{{"requests", lines.size()}, {"failed", loop.failed()}, {"skipped_lines", torn}, {"seconds", seconds}, {"speed", a.speed}, {"max_concurrency", a.max_concurrency},
              {"ttft_s", summary(replayed.ttft)}, {"itl_s", summary(replayed.itl)}, {"e2e_s", summary(replayed.e2e)}};
  if (a.compare) report["recorded"] = {{"ttft_s", summary(recorded.ttft)}, {"itl_s", summary(recorded.itl)}, {"e2e_s", summary(recorded.e2e)}};
  std::ofstream out(a.report);
  out << report.dump(2) << "\n";
  out.flush();
  if (!out) throw std::runtime_error(fmt::format("--report {}: cannot write ({})", a.report, std::strerror(errno)));
  print_latencies(report, lines.size(), seconds, loop.failed(), a.compare);
  if (loop.failed() > 0) throw std::runtime_error(fmt::format("{} of {} requests failed", loop.failed(), lines.size()));
}

}  // namespace hotcold::launcher
