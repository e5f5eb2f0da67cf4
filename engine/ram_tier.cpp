#include "engine/ram_tier.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

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
  window_pages_ = plan_.window_bytes / page_;
  for (int64_t il = 0; il < hp.n_layer; ++il)
    for (const tensor_view* t : neuron_row_tensors(hp, il, m_->weights().layers[static_cast<size_t>(il)])) {
      span_t s;
      s.data = t->data, s.bytes = t->bytes(), s.row_bytes = t->row_bytes;
      const auto addr = reinterpret_cast<uint64_t>(s.data);
      s.first_page = addr / page_;
      const uint64_t pages = (addr + s.bytes + page_ - 1) / page_ - s.first_page;
      s.state.assign(pages, absent), s.referenced.assign(pages, 0);
      auto& spans = layers_[static_cast<size_t>(il)];
      // Pages wholly inside the tensor may be given back; the edge pages (shared with its neighbours)
      // are kept once read.
      for (uint64_t k = 0; k < pages; ++k) {
        const uint64_t lo = (s.first_page + k) * page_, hi = lo + page_;
        if (lo >= addr && hi <= addr + s.bytes) clock_.push_back({static_cast<uint32_t>(il), static_cast<uint32_t>(spans.size()), k});
      }
      spans.push_back(std::move(s));
    }
  std::lock_guard lock(mu_);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    std::vector<int32_t> ids(static_cast<size_t>(std::min(plan_.pinned_rows[static_cast<size_t>(il)], hp.n_ff)));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
    bring(il, ids, false, true);
  }
  c_.lookups = c_.hits = 0;  // (the run's figures start after the pinned rows)
}

ram_tier::~ram_tier() = default;

ram_tier::use ram_tier::rows(int64_t il, std::span<const int32_t> ids) {
  std::lock_guard lock(mu_);
  ++users_[static_cast<size_t>(il)];
  try {
    bring(il, ids, false, false);
  } catch (...) {
    --users_[static_cast<size_t>(il)];
    throw;
  }
  return use(this, il);
}

ram_tier::use ram_tier::all_rows(int64_t il) {
  std::lock_guard lock(mu_);
  ++users_[static_cast<size_t>(il)];
  try {
    bring(il, {}, true, false);
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

void ram_tier::bring(int64_t il, std::span<const int32_t> ids, bool all, bool pin) {
  auto& spans = layers_[static_cast<size_t>(il)];
  const int64_t n_ff = m_->hp().n_ff;
  struct need {
    uint32_t span;
    uint64_t page;
  };
  std::vector<need> needs;
  uint64_t window_needs = 0;
  auto look = [&](uint32_t si, uint64_t k) {  // page k of span si: true where it is in memory
    span_t& s = spans[si];
    const uint8_t st = s.state[k];
    if (st == held || st == pinned) {
      s.referenced[k] = 1;
      if (pin && st == held) s.state[k] = pinned, --held_window_pages_, pinned_bytes_ += page_;
      return true;
    }
    if (st == absent) {
      s.state[k] = queued;
      needs.push_back({si, k});
      const uint64_t lo = (s.first_page + k) * page_;
      const auto addr = reinterpret_cast<uint64_t>(s.data);
      if (!pin && lo >= addr && lo + page_ <= addr + s.bytes) ++window_needs;
    }
    return false;
  };
  const int64_t count = all ? n_ff : static_cast<int64_t>(ids.size());
  for (int64_t k = 0; k < count; ++k) {
    const int64_t id = all ? k : ids[static_cast<size_t>(k)];
    if (id < 0 || id >= n_ff) throw std::out_of_range(fmt::format("layer {}: neuron {} of {}", il, id, n_ff));
    bool in = true;
    for (uint32_t si = 0; si < spans.size(); ++si) {
      const span_t& s = spans[si];
      const auto at = reinterpret_cast<uint64_t>(s.data) + static_cast<uint64_t>(id) * s.row_bytes;
      for (uint64_t p = at / page_; p <= (at + s.row_bytes - 1) / page_; ++p) in = look(si, p - s.first_page) && in;
    }
    ++c_.lookups;
    c_.hits += in ? 1 : 0;
  }
  if (needs.empty()) return;
  make_room(window_needs);
  std::vector<disk_file::piece> pieces;
  pieces.reserve(needs.size());
  for (const need& n : needs) {
    const span_t& s = spans[n.span];
    const auto addr = reinterpret_cast<uint64_t>(s.data);
    const uint64_t lo = std::max((s.first_page + n.page) * page_, addr), hi = std::min((s.first_page + n.page + 1) * page_, addr + s.bytes);
    auto* into = reinterpret_cast<uint8_t*>(lo);  // (the model's private copy: writable memory)
    pieces.push_back({m_->file_offset(into), hi - lo, into});
  }
  const auto before = file_.counted();
  try {
    file_.read(pieces);
  } catch (...) {
    for (const need& n : needs) spans[n.span].state[n.page] = absent;
    throw;
  }
  const auto after = file_.counted();
  c_.disk_bytes += after.bytes - before.bytes, c_.reads += after.reads - before.reads, c_.wait_seconds += after.wait_seconds - before.wait_seconds;
  for (const need& n : needs) {
    span_t& s = spans[n.span];
    const uint64_t lo = (s.first_page + n.page) * page_;
    const auto addr = reinterpret_cast<uint64_t>(s.data);
    const bool interior = lo >= addr && lo + page_ <= addr + s.bytes;
    s.state[n.page] = pin || !interior ? pinned : held;
    s.referenced[n.page] = 1;
    if (s.state[n.page] == held) ++held_window_pages_;
    else pinned_bytes_ += page_;
  }
}

// Gives back window pages (clock order, a second chance for one used since the hand last passed)
// until `pages` more fit, skipping the pages of a layer in use; where none can go, the window grows for
// now (a step that needs more than the window holds) and shrinks at the next read.
void ram_tier::make_room(uint64_t pages) {
  if (clock_.empty()) return;
  size_t steps = 0;
  while (held_window_pages_ + pages > window_pages_ && held_window_pages_ > 0 && steps < 2 * clock_.size()) {
    const page_ref r = clock_[hand_];
    hand_ = (hand_ + 1) % clock_.size();
    ++steps;
    span_t& s = layers_[r.layer][r.tensor];
    if (s.state[r.index] != held || users_[r.layer] > 0) continue;
    if (s.referenced[r.index]) {
      s.referenced[r.index] = 0;
      continue;
    }
    madvise(reinterpret_cast<void*>((s.first_page + r.index) * page_), page_, MADV_DONTNEED);
    s.state[r.index] = absent;
    --held_window_pages_;
    ++c_.released_pages;
    steps = 0;
  }
}

ram_tier::counts ram_tier::counted() const {
  std::lock_guard lock(mu_);
  counts c = c_;
  c.held_bytes = pinned_bytes_ + held_window_pages_ * page_;
  return c;
}

}  // namespace hotcold
