#include "engine/device_experts.hpp"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "engine/device_layers.hpp"
#include "engine/ram_tier.hpp"

namespace hotcold {

std::string_view expert_policy_name(expert_policy p) {
  switch (p) {
    case expert_policy::lru: return "lru";
    case expert_policy::lfu_decay: return "lfu-decay";
    case expert_policy::fixed: return "fixed";
  }
  return "?";
}

expert_policy parse_expert_policy(std::string_view s) {
  for (expert_policy p : {expert_policy::lru, expert_policy::lfu_decay, expert_policy::fixed})
    if (s == expert_policy_name(p)) return p;
  throw std::invalid_argument(fmt::format("expert policy '{}': one of lru, lfu-decay, fixed", s));
}

expert_slots::expert_slots(int64_t n_expert, int64_t capacity, expert_policy p, double decay)
    : held_(static_cast<size_t>(n_expert), 0), score_(static_cast<size_t>(n_expert), 0.0), capacity_(capacity), policy_(p), decay_(decay) {
  if (capacity < 0 || capacity > n_expert)
    throw std::invalid_argument(fmt::format("a cache of {} experts for a layer of {}: give 0 to {}", capacity, n_expert, n_expert));
}

void expert_slots::next_token() {
  ++clock_;
  if (policy_ == expert_policy::lfu_decay)
    for (double& s : score_) s *= decay_;
}

void expert_slots::use(int32_t e) {
  // LRU: the last token that chose it; LFU with decay: its decayed count.
  score_[static_cast<size_t>(e)] = policy_ == expert_policy::lru ? static_cast<double>(clock_) : score_[static_cast<size_t>(e)] + 1.0;
}

int32_t expert_slots::admit(int32_t e, std::span<const int32_t> keep) {
  if (holds(e)) throw std::logic_error(fmt::format("expert {} is held already", e));
  if (policy_ == expert_policy::fixed || capacity_ == 0) return -2;
  int32_t victim = -1;
  if (size_ == capacity_) {
    for (int32_t y = 0; y < static_cast<int32_t>(held_.size()); ++y)
      if (holds(y) && std::find(keep.begin(), keep.end(), y) == keep.end() &&
          (victim < 0 || score_[static_cast<size_t>(y)] < score_[static_cast<size_t>(victim)]))
        victim = y;
    if (victim < 0) return -2;
    held_[static_cast<size_t>(victim)] = 0, --size_;
  }
  held_[static_cast<size_t>(e)] = 1, ++size_;
  return victim;
}

void expert_slots::put(int32_t e) {
  if (holds(e) || size_ == capacity_) throw std::logic_error(fmt::format("expert {}: held already, or no free slot", e));
  held_[static_cast<size_t>(e)] = 1, ++size_;
}

bool expert_residency::any() const {
  return std::any_of(slots.begin(), slots.end(), [](int64_t s) { return s > 0; });
}

device_experts::device_experts(std::shared_ptr<const model> m, const expert_residency& r, std::shared_ptr<const device_layers> on,
                               std::shared_ptr<ram_tier> disk)
    : model_(std::move(m)), r_(r), on_(std::move(on)), disk_(std::move(disk)) {
  const hparams& hp = model_->hp();
  const auto n = static_cast<size_t>(hp.n_layer);
  if (!hp.moe()) throw std::invalid_argument(fmt::format("{}: not a mixture of experts", model_->path()));
  if (r_.slots.size() != n) throw std::invalid_argument(fmt::format("expert slots for {} layers in a model of {}", r_.slots.size(), n));
  if (!r_.first.empty() && r_.first.size() != n) throw std::invalid_argument(fmt::format("first experts for {} layers in a model of {}", r_.first.size(), n));
  devices::device& dev = on_->device();
  gate_.resize(n), up_.resize(n), down_.resize(n), slot_.resize(n), expert_bytes_.assign(n, 0);
  for (size_t il = 0; il < n; ++il) {
    const layer_weights& l = model_->weights().layers[il];
    const int64_t s = r_.slots[il];
    if (s < 0 || s > hp.n_expert)
      throw std::invalid_argument(fmt::format("layer {}: {} expert slots for {} experts", il, s, hp.n_expert));
    policy_.emplace_back(hp.n_expert, s, r_.policy);
    slot_[il].assign(static_cast<size_t>(hp.n_expert), -1);
    expert_bytes_[il] = hotcold::expert_bytes(l, hp.n_expert);
    if (s == 0) continue;
    if (!dense_ffn_reads(dev, {&l.ffn_gate_exps, &l.ffn_up_exps, &l.ffn_down_exps}))
      throw std::invalid_argument(fmt::format("{}: cannot compute layer {}'s experts ({} / {} / {} weights)", dev.name(), il,
                                              tensor_type_name(l.ffn_gate_exps.type), tensor_type_name(l.ffn_up_exps.type),
                                              tensor_type_name(l.ffn_down_exps.type)));
    const auto [gate_bytes, up_bytes, down_bytes] = expert_part_bytes(l, hp.n_expert);
    gate_[il] = dev.allocate(gate_bytes * static_cast<uint64_t>(s), fmt::format("layer {} expert slots (gate)", il));
    up_[il] = dev.allocate(up_bytes * static_cast<uint64_t>(s), fmt::format("layer {} expert slots (up)", il));
    down_[il] = dev.allocate(down_bytes * static_cast<uint64_t>(s), fmt::format("layer {} expert slots (down)", il));
    bytes_ += gate_[il]->charged() + up_[il]->charged() + down_[il]->charged();
    std::vector<int32_t> order = r_.first.empty() ? std::vector<int32_t>{} : r_.first[il];
    for (int32_t e = 0; e < static_cast<int32_t>(hp.n_expert); ++e)  // (then the others, by number)
      if (std::find(order.begin(), order.end(), e) == order.end()) order.push_back(e);
    for (int32_t slot = 0; slot < static_cast<int32_t>(s); ++slot) {
      const int32_t e = order[static_cast<size_t>(slot)];
      if (e < 0 || e >= hp.n_expert || slot_[il][static_cast<size_t>(e)] >= 0)
        throw std::invalid_argument(fmt::format("layer {}: expert {} given twice or outside the {} experts", il, e, hp.n_expert));
      policy_[il].put(e);
      slot_[il][static_cast<size_t>(e)] = slot;
      copy_expert(static_cast<int64_t>(il), e, slot);
    }
  }
  for (pending& p : pending_) p.done->wait();
  pending_.clear();
  counts_.layer_lookups.assign(n, 0), counts_.layer_hits.assign(n, 0), counts_.layer_uploads.assign(n, 0);
  credit_.assign(n, 0.0);
}

device_experts::~device_experts() {
  // The staged bytes of uploads still queued must outlive them.
  for (pending& p : pending_) try {
      p.done->wait();
    } catch (...) {
    }
}

device_experts::rows device_experts::slot_rows(int64_t layer, int32_t slot) const {
  const hparams& hp = model_->hp();
  const layer_weights& l = model_->weights().layers[static_cast<size_t>(layer)];
  auto at = [&](const tensor_view& t, const std::shared_ptr<devices::buffer>& b, int64_t rows) {
    tensor_view v = t;
    v.ne1 = rows, v.stride = 0, v.interleaved16 = false;
    v.data = static_cast<const uint8_t*>(b->data()) + static_cast<size_t>(slot) * static_cast<size_t>(rows) * t.row_bytes;
    return v;
  };
  return {at(l.ffn_gate_exps, gate_[static_cast<size_t>(layer)], hp.n_ff_exp), at(l.ffn_up_exps, up_[static_cast<size_t>(layer)], hp.n_ff_exp),
          at(l.ffn_down_exps, down_[static_cast<size_t>(layer)], hp.n_embd)};
}

void device_experts::copy_expert(int64_t layer, int32_t e, int32_t slot) {
  const hparams& hp = model_->hp();
  const layer_weights& l = model_->weights().layers[static_cast<size_t>(layer)];
  // With the disk tier the expert's rows are in memory while the use lasts, at the row it gives
  // (the same bytes, laid out as the load lays them out).
  std::optional<ram_tier::use> in;
  int32_t row = e;
  if (disk_) {
    const int32_t ids[1] = {e};
    in.emplace(disk_->rows(layer, ids));
    row = in->rows_of(ids)[0];
  }
  const tensor_view views[3] = {expert_rows(l.ffn_gate_exps, row, hp.n_ff_exp), expert_rows(l.ffn_up_exps, row, hp.n_ff_exp),
                                expert_rows(l.ffn_down_exps, row, hp.n_embd)};
  devices::buffer* to[3] = {gate_[static_cast<size_t>(layer)].get(), up_[static_cast<size_t>(layer)].get(), down_[static_cast<size_t>(layer)].get()};
  // The expert's rows in plain order, staged until the copies ran.
  auto staging = std::make_shared<std::vector<uint8_t>>(views[0].bytes() + views[1].bytes() + views[2].bytes());
  uint64_t at = 0;
  for (const tensor_view& v : views) plain_rows(v, staging->data() + at), at += v.bytes();
  // Copies are jobs of the device's queue: after the work already there (which may still read the slot).
  at = 0;
  for (int k = 0; k < 3; ++k) {
    const uint64_t size = views[k].bytes();
    pending_.push_back({on_->device().copy_in(*to[k], static_cast<uint64_t>(slot) * size, staging->data() + at, size), staging});
    at += size;
  }
}

void device_experts::begin_step(int64_t n) {
  // (decoded tokens only: a prompt batch's hits are another matter)
  if (r_.prefetch && r_.prefetch_on_trial && n == 1) trial_.token(static_cast<double>(counts_.hits), static_cast<double>(counts_.lookups));
  while (!pending_.empty() && pending_.front().done->ready()) {
    pending_.front().done->wait();  // rethrows a failed copy
    pending_.pop_front();
  }
  allowance_ = static_cast<double>(r_.upload_bytes_per_token) * static_cast<double>(n);
  const auto caches = [&](size_t il) { return r_.slots[il] > 0 && r_.slots[il] < model_->hp().n_expert; };  // a layer with slots to refill
  int64_t caching = 0;
  for (size_t il = 0; il < r_.slots.size(); ++il) caching += caches(il);
  if (caching == 0) return;
  const double share = allowance_ / static_cast<double>(caching);
  for (size_t il = 0; il < r_.slots.size(); ++il)
    if (caches(il)) credit_[il] = std::min(credit_[il] + share, std::max(share, 2.0 * static_cast<double>(expert_bytes_[il])));
}

int64_t device_experts::chosen(int64_t layer, std::span<const int32_t> experts) {
  expert_slots& c = policy_[static_cast<size_t>(layer)];
  c.next_token();
  int64_t hits = 0;
  for (int32_t e : experts) {
    c.use(e);
    ++counts_.lookups, ++counts_.layer_lookups[static_cast<size_t>(layer)];
    if (slot_of(layer, e) >= 0) ++hits, ++counts_.hits, ++counts_.layer_hits[static_cast<size_t>(layer)];
  }
  return hits;
}

bool device_experts::upload(int64_t layer, int32_t e, std::span<const int32_t> keep, bool guessed) {
  const auto il = static_cast<size_t>(layer);
  if (slot_of(layer, e) >= 0 || r_.slots[il] == 0 || static_cast<double>(expert_bytes_[il]) > credit_[il] ||
      static_cast<double>(expert_bytes_[il]) > allowance_)
    return false;
  if (!take_in(layer, e, keep, true)) return false;
  if (guessed) ++counts_.prefetched;
  return true;
}

bool device_experts::stream(int64_t layer, int32_t e, std::span<const int32_t> keep) {
  if (slot_of(layer, e) >= 0 || r_.slots[static_cast<size_t>(layer)] == 0 || r_.policy == expert_policy::fixed) return false;
  if (!take_in(layer, e, keep, false)) return false;
  ++counts_.streamed;
  return true;
}

double device_experts::upload_seconds_per_byte() const {
  std::lock_guard lock(link_->mu);
  return link_->seconds_per_byte;
}

bool device_experts::take_in(int64_t layer, int32_t e, std::span<const int32_t> keep, bool charged) {
  const auto il = static_cast<size_t>(layer);
  const int32_t victim = policy_[il].admit(e, keep);
  if (victim == -2) return false;
  // The evicted expert's slot; or, with room, the next free one (slots fill in order and are only
  // ever refilled, so the experts held before this one were in slots 0..size - 2).
  int32_t slot = static_cast<int32_t>(policy_[il].size() - 1);
  if (victim >= 0) slot = std::exchange(slot_[il][static_cast<size_t>(victim)], -1);
  slot_[il][static_cast<size_t>(e)] = slot;
  // Timed on the device's queue: a mark before the copies and one after (a running average a byte).
  on_->submit([link = link_] {
    std::lock_guard lock(link->mu);
    link->began = std::chrono::steady_clock::now();
  });
  copy_expert(layer, e, slot);
  on_->submit([link = link_, bytes = expert_bytes_[il]] {
    std::lock_guard lock(link->mu);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - link->began).count() / static_cast<double>(bytes);
    fold_into(link->seconds_per_byte, s);
  });
  if (charged) credit_[il] -= static_cast<double>(expert_bytes_[il]), allowance_ -= static_cast<double>(expert_bytes_[il]);
  ++counts_.uploads, ++counts_.layer_uploads[il], counts_.upload_bytes += expert_bytes_[il];
  return true;
}

}  // namespace hotcold
