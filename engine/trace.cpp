#include "engine/trace.hpp"

#include <pthread.h>

#include <algorithm>
#include <fstream>
#include <stdexcept>
#include <system_error>
#include <tuple>

#include <nlohmann/json.hpp>

namespace hotcold {

namespace {
std::atomic<uint64_t> next_recorder_id{1};

// The buffer this thread last used, and for which recorder (ids are never reused).
struct thread_slot {
  uint64_t recorder = 0;
  void* buffer = nullptr;
};
thread_local thread_slot slot;
}  // namespace

trace_recorder::trace_recorder() : id_(next_recorder_id.fetch_add(1)) {}
trace_recorder::~trace_recorder() = default;

trace_recorder::thread_buffer& trace_recorder::mine() {
  if (slot.recorder == id_) return *static_cast<thread_buffer*>(slot.buffer);
  auto b = std::make_unique<thread_buffer>();
  char name[32] = {};
  if (pthread_getname_np(pthread_self(), name, sizeof name) != 0 || !name[0]) std::snprintf(name, sizeof name, "thread");
  b->name = name;
  b->spans.reserve(4096);
  std::lock_guard lock(registry_mutex_);
  threads_.push_back(std::move(b));
  slot = {id_, threads_.back().get()};
  return *threads_.back();
}

void trace_recorder::record(const char* name, int64_t step, int64_t layer, int64_t seqs, clock::time_point begin, clock::time_point end) {
  mine().spans.push_back(interval{name, step, layer, seqs, begin, end});
}

std::vector<trace_recorder::entry> trace_recorder::entries() const {
  std::lock_guard lock(registry_mutex_);
  std::vector<entry> out;
  for (size_t t = 0; t < threads_.size(); ++t)
    for (const auto& s : threads_[t]->spans) out.push_back({s, static_cast<int>(t)});
  return out;
}

std::vector<std::string> trace_recorder::thread_names() const {
  std::lock_guard lock(registry_mutex_);
  std::vector<std::string> out;
  for (const auto& t : threads_) out.push_back(t->name);
  return out;
}

std::string trace_recorder::chrome_json() const {
  auto all = entries();
  auto names = thread_names();
  clock::time_point origin = all.empty() ? clock::time_point{} : all.front().span.begin;
  for (const auto& e : all) origin = std::min(origin, e.span.begin);
  auto us = [&](clock::time_point t) { return std::chrono::duration<double, std::micro>(t - origin).count(); };
  nlohmann::json events = nlohmann::json::array();
  for (size_t t = 0; t < names.size(); ++t)
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", t + 1}, {"args", {{"name", names[t]}}}});
  std::sort(all.begin(), all.end(), [](const entry& a, const entry& b) { return a.span.begin < b.span.begin; });
  for (const auto& e : all)
    events.push_back({{"name", e.span.name},
                      {"ph", "X"},
                      {"pid", 1},
                      {"tid", e.thread + 1},
                      {"ts", us(e.span.begin)},
                      {"dur", us(e.span.end) - us(e.span.begin)},
                      {"args", {{"step", e.span.step}, {"layer", e.span.layer}, {"seqs", e.span.seqs}}}});
  return nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump();
}

void trace_recorder::write(const std::string& path) const {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::system_error(errno, std::generic_category(), "cannot write " + path);
  out << chrome_json() << "\n";
  out.close();
  if (!out) throw std::system_error(errno, std::generic_category(), "cannot write " + path);
}

trace_busy busy_time(const std::vector<trace_recorder::entry>& entries, const std::string& a, const std::string& b) {
  using clock = trace_recorder::clock;
  trace_busy out;
  if (entries.empty()) return out;
  auto first = entries.front().span.begin, last = entries.front().span.end;
  std::map<std::string, std::vector<std::pair<clock::time_point, clock::time_point>>> by_name;
  for (const auto& e : entries) {
    first = std::min(first, e.span.begin), last = std::max(last, e.span.end);
    by_name[e.span.name].emplace_back(e.span.begin, e.span.end);
  }
  out.span_s = std::chrono::duration<double>(last - first).count();
  // The union of a name's intervals, as sorted disjoint pieces.
  auto merged = [](std::vector<std::pair<clock::time_point, clock::time_point>> v) {
    std::sort(v.begin(), v.end());
    std::vector<std::pair<clock::time_point, clock::time_point>> m;
    for (const auto& x : v) {
      if (!m.empty() && x.first <= m.back().second) m.back().second = std::max(m.back().second, x.second);
      else m.push_back(x);
    }
    return m;
  };
  std::map<std::string, std::vector<std::pair<clock::time_point, clock::time_point>>> pieces;
  for (auto& [name, v] : by_name) {
    pieces[name] = merged(v);
    double s = 0;
    for (const auto& p : pieces[name]) s += std::chrono::duration<double>(p.second - p.first).count();
    out.busy_s[name] = s;
  }
  // Both at once: the intersection of the two unions.
  const auto& pa = pieces[a];
  const auto& pb = pieces[b];
  for (size_t i = 0, j = 0; i < pa.size() && j < pb.size();) {
    const auto lo = std::max(pa[i].first, pb[j].first), hi = std::min(pa[i].second, pb[j].second);
    if (lo < hi) out.both_s += std::chrono::duration<double>(hi - lo).count();
    (pa[i].second < pb[j].second) ? ++i : ++j;
  }
  return out;
}

}  // namespace hotcold

namespace hotcold {

void trace_recorder::record_active(int64_t step, int64_t layer, int64_t tokens, int64_t n_ff, const uint8_t* chosen) {
  const int64_t row = (n_ff + 7) / 8;
  active_record r{step, layer, tokens, std::vector<uint8_t>(static_cast<size_t>(tokens * row), 0)};
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t i = 0; i < n_ff; ++i)
      if (chosen[t * n_ff + i]) r.bits[static_cast<size_t>(t * row + i / 8)] |= static_cast<uint8_t>(1u << (i % 8));
  std::lock_guard lock(active_mutex_);
  active_n_ff_ = n_ff;
  active_n_layer_ = std::max(active_n_layer_, layer + 1);
  active_.push_back(std::move(r));
}

void trace_recorder::set_hot_neurons(std::vector<std::vector<int32_t>> hot) {
  std::lock_guard lock(active_mutex_);
  hot_ = std::move(hot);
}

std::vector<trace_recorder::active_set> trace_recorder::active_sets() const {
  std::lock_guard lock(active_mutex_);
  std::vector<active_set> out;
  for (const auto& r : active_) out.push_back({r.step, r.layer, r.tokens, active_n_ff_, r.bits});
  return out;
}

std::vector<std::vector<std::vector<bool>>> trace_recorder::sequence_mask(int64_t positions, int64_t n_layer, int64_t n_ff) const {
  auto sets = active_sets();
  std::stable_sort(sets.begin(), sets.end(), [](const auto& a, const auto& b) { return std::tie(a.step, a.layer) < std::tie(b.step, b.layer); });
  std::vector<std::vector<std::vector<bool>>> mask(static_cast<size_t>(positions),
                                                   std::vector<std::vector<bool>>(static_cast<size_t>(n_layer), std::vector<bool>(static_cast<size_t>(n_ff), true)));
  int64_t base = 0;
  for (size_t k = 0; k < sets.size();) {
    const int64_t step = sets[k].step, tokens = sets[k].tokens;
    for (; k < sets.size() && sets[k].step == step; ++k) {
      const auto& s = sets[k];
      if (s.tokens != tokens || s.n_ff != n_ff || s.layer < 0 || s.layer >= n_layer || base + tokens > positions)
        throw std::runtime_error("the recorded choices are not one sequence's run of " + std::to_string(positions) + " positions");
      for (int64_t t = 0; t < tokens; ++t) {
        auto& row = mask[static_cast<size_t>(base + t)][static_cast<size_t>(s.layer)];
        for (int64_t i = 0; i < n_ff; ++i) row[static_cast<size_t>(i)] = s.chosen(t, i);
      }
    }
    base += tokens;
  }
  if (base != positions)
    throw std::runtime_error("the recorded choices cover " + std::to_string(base) + " positions, not the run's " + std::to_string(positions));
  return mask;
}

bool trace_recorder::has_activations() const {
  std::lock_guard lock(active_mutex_);
  return !active_.empty();
}

void trace_recorder::write_activations(const std::string& path) const {
  std::lock_guard lock(active_mutex_);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::system_error(errno, std::generic_category(), "cannot write " + path);
  auto u32 = [&](uint64_t v) {
    const uint8_t b[4] = {static_cast<uint8_t>(v), static_cast<uint8_t>(v >> 8), static_cast<uint8_t>(v >> 16), static_cast<uint8_t>(v >> 24)};
    out.write(reinterpret_cast<const char*>(b), 4);
  };
  const int64_t n_layer = std::max<int64_t>(active_n_layer_, static_cast<int64_t>(hot_.size()));
  const int64_t row = (active_n_ff_ + 7) / 8;
  out.write("HCACT001", 8);
  u32(static_cast<uint64_t>(n_layer));
  u32(static_cast<uint64_t>(active_n_ff_));
  u32(hot_.empty() ? 0 : static_cast<uint64_t>(n_layer));
  if (!hot_.empty())
    for (int64_t l = 0; l < n_layer; ++l) {
      std::vector<uint8_t> bits(static_cast<size_t>(row), 0);
      if (l < static_cast<int64_t>(hot_.size()))
        for (int32_t i : hot_[static_cast<size_t>(l)])
          if (i >= 0 && i < active_n_ff_) bits[static_cast<size_t>(i / 8)] |= static_cast<uint8_t>(1u << (i % 8));
      out.write(reinterpret_cast<const char*>(bits.data()), static_cast<std::streamsize>(bits.size()));
    }
  for (const auto& r : active_) {
    u32(static_cast<uint64_t>(r.step) & 0xffffffffu);
    u32(static_cast<uint64_t>(r.step) >> 32);
    u32(static_cast<uint64_t>(r.layer));
    u32(static_cast<uint64_t>(r.tokens));
    out.write(reinterpret_cast<const char*>(r.bits.data()), static_cast<std::streamsize>(r.bits.size()));
  }
  if (!out) throw std::system_error(errno, std::generic_category(), "cannot write " + path);
}

}  // namespace hotcold
