#include "engine/ram_tier.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "engine/predictor.hpp"

namespace hotcold {

namespace {
constexpr uint8_t absent = 0, held = 1, pinned = 2, queued = 3;

uint64_t neuron_bytes(const model& m, int64_t il) {
  uint64_t b = 0;
  for (const tensor_view* t : neuron_row_tensors(m.hp(), il, m.weights().layers[static_cast<size_t>(il)])) b += t->row_bytes;
  return b;
}
}  // namespace

ram_tier_plan plan_ram_tier(const model& m, uint64_t budget) {
  const auto& hp = m.hp();
  ram_tier_plan p;
  uint64_t per_neuron = 0;  // one neuron of every layer
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    for (const tensor_view* t : neuron_row_tensors(hp, il, m.weights().layers[static_cast<size_t>(il)])) p.row_bytes += t->bytes();
    per_neuron += neuron_bytes(m, il);
  }
  if (p.row_bytes == 0) throw std::invalid_argument(fmt::format("--ram-budget: {} has no FFN rows read by neuron (a sparse file's: `hotcold prepare`)", m.path()));
  p.fixed_bytes = m.weight_bytes() > p.row_bytes ? m.weight_bytes() - p.row_bytes : 0;
  if (budget < p.fixed_bytes)
    throw std::invalid_argument(fmt::format("--ram-budget {:.3f} GiB is below what {} holds besides its FFN rows: {:.3f} GiB (attention, embeddings, head, "
                                            "predictors, norms)",
                                            budget / double(1ull << 30), m.path(), p.fixed_bytes / double(1ull << 30)));
  const uint64_t left = std::min(budget - p.fixed_bytes, p.row_bytes);
  const int64_t rows = left == p.row_bytes ? hp.n_ff : std::min<int64_t>(hp.n_ff, static_cast<int64_t>(left / 2 / std::max<uint64_t>(per_neuron, 1)));
  p.pinned_rows.assign(static_cast<size_t>(hp.n_layer), rows);
  p.window_bytes = left - static_cast<uint64_t>(rows) * per_neuron;
  return p;
}

ram_tier::use::~use() {
  if (tier_) tier_->release(layer_);
}

ram_tier::ram_tier(std::shared_ptr<const model> m, const ram_tier_plan& plan, const disk_file::options& io)
    : m_(std::move(m)), plan_(plan), file_(m_->path(), io), page_(static_cast<uint64_t>(sysconf(_SC_PAGESIZE))) {
  if (!m_->ffn_rows_from_disk()) throw std::logic_error(fmt::format("{}: the disk tier needs the model loaded with its FFN rows left in the file", m_->path()));
  const auto& hp = m_->hp();
  if (static_cast<int64_t>(plan_.pinned_rows.size()) != hp.n_layer) throw std::invalid_argument("a disk tier's plan names every layer's pinned rows");
  layers_.resize(static_cast<size_t>(hp.n_layer));
  users_.assign(static_cast<size_t>(hp.n_layer), 0);
  pending_.resize(static_cast<size_t>(hp.n_layer));
  window_pages_ = plan_.window_bytes / page_;
  for (int64_t il = 0; il < hp.n_layer; ++il)
    for (const tensor_view* t : neuron_row_tensors(hp, il, m_->weights().layers[static_cast<size_t>(il)])) {
      span_t s;
      s.data = t->data, s.bytes = t->bytes(), s.row_bytes = t->row_bytes;
      const auto addr = reinterpret_cast<uint64_t>(s.data);
      s.first_page = addr / page_;
      const uint64_t pages = (addr + s.bytes + page_ - 1) / page_ - s.first_page;
      s.state.assign(pages, absent), s.referenced.assign(pages, 0), s.ahead.assign(pages, 0);
      auto& spans = layers_[static_cast<size_t>(il)];
      // Pages wholly inside the tensor may be given back; the edge pages (shared with its neighbours)
      // are kept once read.
      for (uint64_t k = 0; k < pages; ++k)
        if (s.interior(k, page_)) clock_.push_back({static_cast<uint32_t>(il), static_cast<uint32_t>(spans.size()), k});
      spans.push_back(std::move(s));
    }
  std::lock_guard lock(mu_);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    std::vector<int32_t> ids(static_cast<size_t>(std::min(plan_.pinned_rows[static_cast<size_t>(il)], hp.n_ff)));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
    bring(il, ids, false, true);
  }
  c_ = counts{};  // (the run's figures start after the pinned rows)
  file_base_ = file_.counted();
}

ram_tier::~ram_tier() {
  std::lock_guard lock(mu_);
  for (size_t il = 0; il < pending_.size(); ++il)  // (reads still in flight write into the model's memory)
    try {
      wait_ahead(static_cast<int64_t>(il));
    } catch (...) {
    }
}

ram_tier::use ram_tier::rows(int64_t il, std::span<const int32_t> ids) { return take(il, ids, false); }
ram_tier::use ram_tier::all_rows(int64_t il) { return take(il, {}, true); }

ram_tier::use ram_tier::take(int64_t il, std::span<const int32_t> ids, bool all) {
  std::lock_guard lock(mu_);
  ++users_[static_cast<size_t>(il)];
  try {
    bring(il, ids, all, false);
  } catch (...) {
    --users_[static_cast<size_t>(il)];
    throw;
  }
  return use(this, il);
}

void ram_tier::release(int64_t il) {
  std::lock_guard lock(mu_);
  --users_[static_cast<size_t>(il)];
}

// The pages of the rows of neurons ids (every neuron: all) of layer il not in memory, marked as being
// read; the others marked used. count: the lookups, hits, and whether a read-ahead brought them.
std::vector<ram_tier::need> ram_tier::absent_pages(int64_t il, std::span<const int32_t> ids, bool all, bool pin, bool count) {
  auto& spans = layers_[static_cast<size_t>(il)];
  const int64_t n_ff = m_->hp().n_ff;
  std::vector<need> needs;
  const int64_t n = all ? n_ff : static_cast<int64_t>(ids.size());
  for (int64_t k = 0; k < n; ++k) {
    const int64_t id = all ? k : ids[static_cast<size_t>(k)];
    if (id < 0 || id >= n_ff) {
      forget(il, needs);
      throw std::out_of_range(fmt::format("layer {}: neuron {} of {}", il, id, n_ff));
    }
    bool missing = false, brought = false;
    for (uint32_t si = 0; si < spans.size(); ++si) {
      span_t& s = spans[si];
      const auto at = reinterpret_cast<uint64_t>(s.data) + static_cast<uint64_t>(id) * s.row_bytes;
      for (uint64_t p = at / page_; p <= (at + s.row_bytes - 1) / page_; ++p) {
        const uint64_t i = p - s.first_page;
        const uint8_t st = s.state[i];
        if (st == held || st == pinned) {
          s.referenced[i] = 1;
          if (count && s.ahead[i]) brought = true, s.ahead[i] = 0;
          if (pin && st == held) s.state[i] = pinned, --held_window_pages_, pinned_bytes_ += page_;
        } else {
          missing = true;
          if (st == absent) s.state[i] = queued, needs.push_back({si, i});
        }
      }
    }
    if (!count) continue;
    ++c_.lookups;
    c_.hits += missing ? 0 : 1;
    c_.ahead += !missing && brought ? 1 : 0;
    c_.missed += missing ? 1 : 0;
  }
  return needs;
}

std::vector<disk_file::piece> ram_tier::pieces_of(int64_t il, const std::vector<need>& needs) const {
  const auto& spans = layers_[static_cast<size_t>(il)];
  std::vector<disk_file::piece> pieces;
  pieces.reserve(needs.size());
  for (const need& n : needs) {
    const span_t& s = spans[n.span];
    const auto addr = reinterpret_cast<uint64_t>(s.data);
    const uint64_t lo = std::max((s.first_page + n.page) * page_, addr), hi = std::min((s.first_page + n.page + 1) * page_, addr + s.bytes);
    auto* into = reinterpret_cast<uint8_t*>(lo);  // (the model's private copy: writable memory)
    pieces.push_back({m_->file_offset(into), hi - lo, into});
  }
  return pieces;
}

void ram_tier::landed(int64_t il, const std::vector<need>& needs, bool pin, bool ahead) {
  auto& spans = layers_[static_cast<size_t>(il)];
  for (const need& n : needs) {
    span_t& s = spans[n.span];
    s.state[n.page] = pin || !s.interior(n.page, page_) ? pinned : held;
    s.referenced[n.page] = 1;
    s.ahead[n.page] = ahead ? 1 : 0;
    if (s.state[n.page] == held) ++held_window_pages_;
    else pinned_bytes_ += page_;
  }
}

void ram_tier::wait_ahead(int64_t il) {
  auto& pending = pending_[static_cast<size_t>(il)];
  while (!pending.empty()) {
    pending_read r = std::move(pending.back());
    pending.pop_back();
    try {
      file_.wait(r.ticket);
    } catch (...) {
      forget(il, r.pages);
      throw;
    }
    landed(il, r.pages, false, true);
  }
}

void ram_tier::bring(int64_t il, std::span<const int32_t> ids, bool all, bool pin) {
  wait_ahead(il);
  const std::vector<need> needs = absent_pages(il, ids, all, pin, !pin);
  if (needs.empty()) return;
  if (!pin) make_room(window_pages_in(il, needs));
  try {
    file_.read(pieces_of(il, needs));
  } catch (...) {
    forget(il, needs);
    throw;
  }
  landed(il, needs, pin, false);
}

void ram_tier::read_ahead(int64_t il, std::span<const int32_t> ids) {
  std::lock_guard lock(mu_);
  const std::vector<need> needs = absent_pages(il, ids, false, false, false);
  if (needs.empty()) return;
  make_room(window_pages_in(il, needs));
  try {
    pending_[static_cast<size_t>(il)].push_back({file_.submit(pieces_of(il, needs)), needs});
  } catch (...) {
    forget(il, needs);
    throw;
  }
}

void ram_tier::read_ahead_next(int64_t il, predictor_runner& runner, const float* pred_in, int64_t n, std::vector<uint8_t>& chosen,
                               std::vector<int32_t>& ids) {
  const hparams& hp = m_->hp();
  if (il + 1 >= hp.n_layer || !m_->weights().layers[static_cast<size_t>(il + 1)].pred_fc1) return;
  if (static_cast<int64_t>(chosen.size()) < n * hp.n_ff) chosen.resize(static_cast<size_t>(n * hp.n_ff));
  // (The next layer's input is this one's plus what this layer adds: the residual stream moves little
  // in a layer, so its predictor on this input names most of what it will choose.)
  runner.predict(il + 1, pred_in, n, chosen.data(), ids);
  read_ahead(il + 1, ids);
}

uint64_t ram_tier::window_pages_in(int64_t il, const std::vector<need>& needs) const {
  const auto& spans = layers_[static_cast<size_t>(il)];
  return static_cast<uint64_t>(std::count_if(needs.begin(), needs.end(), [&](const need& n) { return spans[n.span].interior(n.page, page_); }));
}

void ram_tier::forget(int64_t il, const std::vector<need>& needs) {
  for (const need& n : needs) layers_[static_cast<size_t>(il)][n.span].state[n.page] = absent;
}

// Gives back window pages (clock order, a second chance for one used since the hand last passed)
// until `pages` more fit and a sixteenth of the window is free (so the next reads find room without a
// sweep of their own), skipping the pages of a layer in use; where none can go, the window grows for
// now (a step that needs more than the window holds) and shrinks at the next read. The pages go back
// in runs of adjacent ones, one madvise a run (each call costs the other threads a TLB flush).
void ram_tier::make_room(uint64_t pages) {
  if (clock_.empty() || held_window_pages_ + pages <= window_pages_) return;
  const uint64_t slack = window_pages_ / 16;
  std::vector<uint64_t> victims;  // page numbers
  size_t steps = 0;
  while (held_window_pages_ + pages + slack > window_pages_ && held_window_pages_ > 0 && steps < 2 * clock_.size()) {
    const page_ref r = clock_[hand_];
    hand_ = (hand_ + 1) % clock_.size();
    ++steps;
    span_t& s = layers_[r.layer][r.tensor];
    if (s.state[r.index] != held || users_[r.layer] > 0) continue;
    if (s.referenced[r.index]) {
      s.referenced[r.index] = 0;
      continue;
    }
    victims.push_back(s.first_page + r.index);
    s.state[r.index] = absent;
    s.ahead[r.index] = 0;
    --held_window_pages_;
    ++c_.released_pages;
    steps = 0;
  }
  std::sort(victims.begin(), victims.end());
  for (size_t i = 0; i < victims.size();) {
    size_t j = i + 1;
    while (j < victims.size() && victims[j] == victims[j - 1] + 1) ++j;
    madvise(reinterpret_cast<void*>(victims[i] * page_), (j - i) * page_, MADV_DONTNEED);
    i = j;
  }
}

ram_tier::counts ram_tier::counted() const {
  std::lock_guard lock(mu_);
  counts c = c_;
  const disk_file::counts f = file_.counted();  // (the file is read for the tier alone)
  c.disk_bytes = f.bytes - file_base_.bytes, c.reads = f.reads - file_base_.reads, c.wait_seconds = f.wait_seconds - file_base_.wait_seconds;
  c.held_bytes = pinned_bytes_ + held_window_pages_ * page_;
  return c;
}

}  // namespace hotcold
