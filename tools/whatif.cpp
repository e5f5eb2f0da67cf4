#include "tools/whatif.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/bandwidth.hpp"
#include "model/placement_file.hpp"
#include "engine/read_costs.hpp"
#include "engine/thread_pool.hpp"
#include "loader/placement.hpp"
#include "loader/profile.hpp"

namespace hotcold::tools {

namespace fs = std::filesystem;

namespace {

// y = a + b x by least squares, a >= 0 (a fixed cost per call cannot be negative); b from the means
// when the x do not vary.
std::pair<double, double> fit_line(const std::vector<double>& x, const std::vector<double>& y) {
  const double n = static_cast<double>(x.size());
  if (x.empty()) return {0, 0};
  const double mx = std::accumulate(x.begin(), x.end(), 0.0) / n, my = std::accumulate(y.begin(), y.end(), 0.0) / n;
  double sxx = 0, sxy = 0;
  for (size_t i = 0; i < x.size(); ++i) sxx += (x[i] - mx) * (x[i] - mx), sxy += (x[i] - mx) * (y[i] - my);
  double b = sxx > 0 ? sxy / sxx : 0, a = my - b * mx;
  if (b <= 0 || a < 0) a = 0, b = mx > 0 ? my / mx : 0;
  return {a, b};
}

struct split_counts {
  int64_t hot_pairs = 0, pairs = 0, hot_rows = 0, rows = 0;
};

// A (step, layer) entry split by the layer's hot neurons as bits (empty: none hot).
split_counts split_entry(const activation_record::entry& e, int64_t n_ff, const std::vector<uint8_t>& hot_bits) {
  const size_t row = static_cast<size_t>((n_ff + 7) / 8);
  split_counts c;
  std::vector<uint8_t> any(row, 0);
  for (int64_t t = 0; t < e.tokens; ++t) {
    const uint8_t* b = e.bits.data() + static_cast<size_t>(t) * row;
    for (size_t k = 0; k < row; ++k) {
      c.pairs += std::popcount(static_cast<unsigned>(b[k]));
      if (!hot_bits.empty()) c.hot_pairs += std::popcount(static_cast<unsigned>(b[k] & hot_bits[k]));
      any[k] |= b[k];
    }
  }
  for (size_t k = 0; k < row; ++k) {
    c.rows += std::popcount(static_cast<unsigned>(any[k]));
    if (!hot_bits.empty()) c.hot_rows += std::popcount(static_cast<unsigned>(any[k] & hot_bits[k]));
  }
  return c;
}

// Each layer's hot neurons as bits (bit i of byte i/8), as the records hold their choices.
std::vector<std::vector<uint8_t>> hot_bits_of(const std::vector<std::vector<int32_t>>& hot, int64_t n_layer, int64_t n_ff) {
  std::vector<std::vector<uint8_t>> m(static_cast<size_t>(n_layer), std::vector<uint8_t>(static_cast<size_t>((n_ff + 7) / 8), 0));
  for (size_t l = 0; l < hot.size() && l < m.size(); ++l)
    for (int32_t i : hot[l])
      if (i >= 0 && i < n_ff) m[l][static_cast<size_t>(i / 8)] |= static_cast<uint8_t>(1u << (i % 8));
  return m;
}

}  // namespace

std::vector<std::pair<int64_t, step_timing>> read_step_timing(const std::string& trace_json, int64_t n_layer) {
  std::ifstream in(trace_json);
  if (!in) throw std::runtime_error(fmt::format("{}: cannot read the trace", trace_json));
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.contains("traceEvents") || !j["traceEvents"].is_array())
    throw std::runtime_error(fmt::format("{}: not a trace (no traceEvents)", trace_json));
  std::map<int64_t, step_timing> steps;
  std::map<std::pair<int64_t, int64_t>, std::pair<double, double>> hot, cold;  // extent per (step, layer)
  for (const auto& ev : j["traceEvents"]) {
    if (ev.value("ph", "") != "X" || !ev.contains("args")) continue;
    const std::string name = ev.value("name", "");
    const int64_t step = ev["args"].value("step", int64_t{-1}), layer = ev["args"].value("layer", int64_t{-1});
    const double b = ev.value("ts", 0.0), e = b + ev.value("dur", 0.0);
    if (step < 0) continue;
    auto [it, fresh] = steps.try_emplace(step);
    if (fresh) it->second.begin_us = b, it->second.end_us = e;
    it->second.begin_us = std::min(it->second.begin_us, b);
    it->second.end_us = std::max(it->second.end_us, e);
    auto extend = [&](auto& m) {
      auto [x, f] = m.try_emplace({step, layer}, b, e);
      if (!f) x->second.first = std::min(x->second.first, b), x->second.second = std::max(x->second.second, e);
    };
    if (name == "hot_ffn") extend(hot);
    if (name == "cold_ffn") extend(cold);
  }
  for (auto& [step, t] : steps) t.hot_us.assign(static_cast<size_t>(n_layer), 0.0), t.cold_us.assign(static_cast<size_t>(n_layer), 0.0);
  for (const auto& [k, ext] : hot)
    if (k.second >= 0 && k.second < n_layer) steps[k.first].hot_us[static_cast<size_t>(k.second)] = ext.second - ext.first;
  for (const auto& [k, ext] : cold)
    if (k.second >= 0 && k.second < n_layer) steps[k.first].cold_us[static_cast<size_t>(k.second)] = ext.second - ext.first;
  return {steps.begin(), steps.end()};
}

namespace {

// The record's own counts (n_layer x n_ff): how often each neuron was chosen.
std::vector<uint64_t> chosen_counts(const activation_record& rec, const hparams& hp) {
  std::vector<uint64_t> counts(static_cast<size_t>(hp.n_layer * hp.n_ff), 0);
  const size_t row = static_cast<size_t>((hp.n_ff + 7) / 8);
  for (const auto& e : rec.entries)
    for (int64_t t = 0; t < e.tokens; ++t)
      for (int64_t i = 0; i < hp.n_ff; ++i)
        counts[static_cast<size_t>(e.layer * hp.n_ff + i)] += (e.bits[static_cast<size_t>(t) * row + static_cast<size_t>(i / 8)] >> (i % 8)) & 1;
  return counts;
}

// Microseconds each side's FFN takes for `bytes` of rows: a + b bytes (0 for none).
struct side_rates {
  double cold_a = 0, cold_b = 0, hot_a = 0, hot_b = 0;
  double cold(double bytes) const { return bytes > 0 ? cold_a + cold_b * bytes : 0.0; }
  double hot(double bytes) const { return bytes > 0 ? hot_a + hot_b * bytes : 0.0; }
};

// What a candidate placement (`hot`, per layer) gives on the record: the recorded rows split by it, and
// a token's time with each layer's FFN the longer of its two sides.
whatif_row candidate_row(const std::string& label, const std::vector<std::vector<int32_t>>& hot, const activation_record& rec, const hparams& hp,
                         const std::vector<uint64_t>& neuron, const side_rates& rates, double rest_us_total, int64_t tokens) {
  whatif_row row;
  row.label = label;
  const auto masks = hot_bits_of(hot, hp.n_layer, hp.n_ff);
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    int64_t n = 0;
    for (uint8_t b : masks[static_cast<size_t>(l)]) n += std::popcount(static_cast<unsigned>(b));
    row.hot_neurons += n;
    row.hot_bytes += static_cast<uint64_t>(n) * neuron[static_cast<size_t>(l)];
  }
  std::vector<int64_t> lh(static_cast<size_t>(hp.n_layer), 0), lp(static_cast<size_t>(hp.n_layer), 0);
  int64_t hot_pairs = 0, all_pairs = 0, hot_rows = 0, cold_rows = 0;
  double ffn_us = 0;
  for (const auto& e : rec.entries) {
    const auto s = split_entry(e, hp.n_ff, masks[static_cast<size_t>(e.layer)]);
    hot_pairs += s.hot_pairs, all_pairs += s.pairs, hot_rows += s.hot_rows, cold_rows += s.rows - s.hot_rows;
    lh[static_cast<size_t>(e.layer)] += s.hot_pairs, lp[static_cast<size_t>(e.layer)] += s.pairs;
    const double nb = static_cast<double>(neuron[static_cast<size_t>(e.layer)]);
    ffn_us += std::max(rates.hot(static_cast<double>(s.hot_rows) * nb), rates.cold(static_cast<double>(s.rows - s.hot_rows) * nb));
  }
  row.hot_hit_ratio = all_pairs ? static_cast<double>(hot_pairs) / static_cast<double>(all_pairs) : 0;
  for (int64_t l = 0; l < hp.n_layer; ++l)
    row.layer_hot_hit.push_back(lp[static_cast<size_t>(l)] ? static_cast<double>(lh[static_cast<size_t>(l)]) / static_cast<double>(lp[static_cast<size_t>(l)]) : 0);
  row.hot_rows_per_token = static_cast<double>(hot_rows) / static_cast<double>(tokens);
  row.cold_rows_per_token = static_cast<double>(cold_rows) / static_cast<double>(tokens);
  row.seconds_per_token = (rest_us_total + ffn_us) * 1e-6 / static_cast<double>(tokens);
  return row;
}

}  // namespace

whatif_result estimate_whatif(const activation_record& rec, const std::vector<std::pair<int64_t, step_timing>>& timing, const whatif_options& o) {
  auto m = model::load(o.model_path, {true});
  const auto& hp = m->hp();
  if (hp.moe())
    throw std::invalid_argument(fmt::format("{} is a mixture of experts: {} holds its routings ({} experts a layer), which replay estimates "
                                            "with --experts-cached N (docs/moe.md), not by hot neurons",
                                            o.model_path, rec.source, rec.n_ff));
  if (hp.n_layer != rec.n_layer || hp.n_ff != rec.n_ff)
    throw std::invalid_argument(fmt::format("{} was recorded on a model of {} layers x {} neurons; {} has {} x {}", rec.source, rec.n_layer, rec.n_ff,
                                            o.model_path, hp.n_layer, hp.n_ff));
  const read_costs costs(*m);
  const std::vector<uint64_t>& neuron = costs.neuron;

  // The candidates: placements as `place` would choose them, and placement files.
  const std::vector<uint64_t> counts = o.stats_dir.empty() ? chosen_counts(rec, hp) : loader::counts_in_order_of(loader::read_profile(o.stats_dir), *m);
  struct candidate {
    std::string label;
    std::vector<std::vector<int32_t>> hot;
  };
  std::vector<candidate> cands;
  if (!rec.hot.empty()) cands.push_back({"recorded", rec.hot});
  for (double b : o.budgets_gib) cands.push_back({fmt::format("budget {:g} GiB", b), loader::plan_placement(*m, counts, b, o.ctx).solution.hot});
  for (const auto& p : o.placements) cands.push_back({p, read_placement_file(p, hp.n_layer, hp.n_ff).hot});

  whatif_result r;
  // Tokens per step: the entries of its first layer.
  std::map<int64_t, int64_t> step_tokens;
  for (const auto& e : rec.entries)
    if (!step_tokens.count(e.step) || e.layer == 0) step_tokens[e.step] = e.tokens;
  r.steps = static_cast<int64_t>(step_tokens.size());
  for (const auto& [s, n] : step_tokens) r.tokens += n;

  // Rates from the trace: each side's FFN interval against the bytes of the rows it read, under the
  // placement that was in force.
  std::map<int64_t, const step_timing*> by_step;
  for (const auto& [s, t] : timing) by_step[s] = &t;
  const auto rec_masks = hot_bits_of(rec.hot, hp.n_layer, hp.n_ff);
  std::vector<double> cx, cy, hx, hy;
  int64_t timed_entries = 0;
  for (const auto& e : rec.entries) {
    auto it = by_step.find(e.step);
    if (it == by_step.end()) continue;
    ++timed_entries;
    const auto c = split_entry(e, hp.n_ff, rec_masks[static_cast<size_t>(e.layer)]);
    const double nb = static_cast<double>(neuron[static_cast<size_t>(e.layer)]);
    const double hot_us = it->second->hot_us[static_cast<size_t>(e.layer)], cold_us = it->second->cold_us[static_cast<size_t>(e.layer)];
    if (cold_us > 0) cx.push_back(static_cast<double>(c.rows - c.hot_rows) * nb), cy.push_back(cold_us);
    if (hot_us > 0) hx.push_back(static_cast<double>(c.hot_rows) * nb), hy.push_back(hot_us);
  }
  r.timed = !rec.from_profile && timed_entries * 2 >= static_cast<int64_t>(rec.entries.size()) && !cx.empty();
  side_rates rates;
  auto& [cold_a, cold_b, hot_a, hot_b] = rates;
  if (r.timed) {
    std::tie(cold_a, cold_b) = fit_line(cx, cy);
    if (!hx.empty()) std::tie(hot_a, hot_b) = fit_line(hx, hy);
    else if (o.hot_gbps > 0) hot_b = 1e6 / (o.hot_gbps * 1e9);
    else hot_a = cold_a, hot_b = cold_b;  // no hot side recorded: a device as fast as the CPU
    if (o.hot_gbps > 0) hot_a = 0, hot_b = 1e6 / (o.hot_gbps * 1e9);
  } else {
    double cpu = o.cpu_gbps > 0 ? o.cpu_gbps * 1e9 : 0;
    if (cpu <= 0) {
      thread_pool pool(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
      cpu = measure_read_bandwidth(pool);
    }
    cold_b = 1e6 / cpu;
    hot_b = o.hot_gbps > 0 ? 1e6 / (o.hot_gbps * 1e9) : cold_b;
  }
  r.cold_gbps = cold_b > 0 ? 1e6 / cold_b / 1e9 : 0, r.hot_gbps = hot_b > 0 ? 1e6 / hot_b / 1e9 : 0;
  r.cold_overhead_us = cold_a, r.hot_overhead_us = hot_a;

  // What the rest of a token costs: recorded (timed), or the rest of the weights at the CPU's rate.
  double rest_us_total = 0;
  if (r.timed) {
    double wall = 0, ffn = 0;
    for (const auto& [s, t] : timing) {
      if (!step_tokens.count(s)) continue;
      wall += t.end_us - t.begin_us;
      for (int64_t l = 0; l < hp.n_layer; ++l) ffn += std::max(t.hot_us[static_cast<size_t>(l)], t.cold_us[static_cast<size_t>(l)]);
    }
    rest_us_total = wall - ffn;
    r.recorded_seconds_per_token = wall * 1e-6 / static_cast<double>(r.tokens);
  } else {
    uint64_t rest = costs.output + costs.embedding_row;
    for (uint64_t b : costs.layer_fixed) rest += b;
    rest_us_total = static_cast<double>(rest) * cold_b * static_cast<double>(r.steps);
  }

  int64_t chosen = 0;
  for (const auto& e : rec.entries) chosen += split_entry(e, hp.n_ff, {}).pairs;
  r.active_ratio = static_cast<double>(chosen) / static_cast<double>(r.tokens * hp.n_ff * hp.n_layer);

  for (const auto& c : cands) r.rows.push_back(candidate_row(c.label, c.hot, rec, hp, neuron, rates, rest_us_total, r.tokens));
  return r;
}

}  // namespace hotcold::tools
