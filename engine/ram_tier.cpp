#include "engine/ram_tier.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "engine/layer_ops.hpp"
#include "engine/predictor.hpp"
#include "model/recipe.hpp"

namespace hotcold {

namespace {
constexpr uint8_t slot_free = 0, slot_held = 1, slot_queued = 2;
}  // namespace

struct ram_tier::use::lazy_read {
  uint64_t ticket = 0;
  std::vector<uint8_t> missing;  // per id: read by this use
  std::once_flag once;
  std::string error;
};

void ram_tier::use::land() const {
  std::call_once(lazy_->once, [this] { lazy_->error = tier_->land(layer_, lazy_->ticket); });
}

bool ram_tier::use::ready(int64_t k0, int64_t k1) const {
  if (!lazy_) return true;
  const auto& m = lazy_->missing;
  if (std::find(m.begin() + k0, m.begin() + k1, uint8_t{1}) == m.begin() + k1) return true;
  land();
  return lazy_->error.empty();
}

void ram_tier::use::ready() const {
  if (!lazy_) return;
  land();
  if (!lazy_->error.empty()) throw std::runtime_error(lazy_->error);
}

ram_tier::use::~use() {
  if (!tier_) return;
  if (lazy_) land();  // (its reads write into the rows: in before they go)
  tier_->release(layer_, all_, rows_);
}

std::string ram_tier::land(int64_t il, uint64_t ticket) {
  std::lock_guard lock(mu_);
  layer_t& L = layers_[static_cast<size_t>(il)];
  const auto it = std::find_if(L.pending.begin(), L.pending.end(), [&](const auto& p) { return p.first == ticket; });
  if (it == L.pending.end()) {  // (waited on already, by a step of the layer that came after)
    const auto f = failed_.find(ticket);
    return f == failed_.end() ? std::string{} : f->second;
  }
  const auto rows = std::move(it->second);
  L.pending.erase(it);
  return finish(L, ticket, rows);
}

std::string ram_tier::finish(layer_t& L, uint64_t ticket, const std::vector<int32_t>& rows) {
  try {
    file_.wait(ticket);
  } catch (const std::exception& e) {
    unread(L, rows);
    return failed_[ticket] = e.what();
  }
  arrange(L, rows);
  for (int32_t r : rows) slot(L, r).state = slot_held;
  return {};
}

void ram_tier::arrange(const layer_t& L, std::span<const int32_t> rows) const {
  for (const tensor_view* t : L.interleaved)
    for (int32_t r : rows) interleave_expert_in_place(*t, r, L.units);
}

namespace {

// The whole pages of `rows` rows of t (a mapping's unit): the window's last row may end in a page of
// the layer's own, which its holder writes like the rest of the row.
uint64_t mapped_bytes(int64_t rows, const tensor_view& t, uint64_t page) {
  return static_cast<uint64_t>(rows) * t.row_bytes / page * page;
}

// Whether every tensor's row `row` starts on a page (where a mapping can begin).
bool on_page(const std::vector<tensor_view>& ts, int64_t row, uint64_t page) {
  return std::all_of(ts.begin(), ts.end(), [&](const tensor_view& t) { return (reinterpret_cast<uint64_t>(t.data) + static_cast<uint64_t>(row) * t.row_bytes) % page == 0; });
}
}  // namespace

ram_tier::ram_tier(std::shared_ptr<const model> m, const ram_tier_plan& plan, const disk_file::options& io)
    : m_(std::move(m)), plan_(plan), file_(m_->path(), io), page_(static_cast<uint64_t>(sysconf(_SC_PAGESIZE))) {
  if (!m_->ffn_rows_from_disk()) throw std::logic_error(fmt::format("{}: the disk tier needs the model loaded with its FFN rows left in the file", m_->path()));
  const auto& hp = m_->hp();
  if (static_cast<int64_t>(plan_.pinned_rows.size()) != hp.n_layer) throw std::invalid_argument("a disk tier's plan names every layer's pinned rows");
  if (!plan_.device_rows.empty() && static_cast<int64_t>(plan_.device_rows.size()) != hp.n_layer)
    throw std::invalid_argument("a disk tier's plan names every layer's rows on the device, or none");
  layers_.resize(static_cast<size_t>(hp.n_layer));
  // The window: for the layers whose tensors are alike (the rows and their bytes of the first's).
  const int64_t window = std::max<int64_t>(plan_.window_rows, 0);
  const layer_t* first = nullptr;
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    layer_t& L = layers_[static_cast<size_t>(il)];
    L.tensors = tier_tensors(*m_, il);
    L.units = tier_units_per_layer(*m_);
    if (hp.moe() && m_->holds_layer(il)) {
      const layer_weights& lw = m_->weights().layers[static_cast<size_t>(il)];
      for (const tensor_view* t : {&lw.ffn_gate_exps, &lw.ffn_up_exps, &lw.ffn_down_exps})
        if (*t && t->interleaved16) L.interleaved.push_back(t);
    }
    L.neuron_bytes = tier_unit_bytes(*m_, il);
    if (!first && !L.tensors.empty()) first = &L, first_held_ = il;
  }
  std::lock_guard lock(mu_);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    layer_t& L = layers_[static_cast<size_t>(il)];
    if (!plan_.experts && !L.tensors.empty() && !plan_.device_rows.empty())
      L.lo = std::clamp<int64_t>(plan_.device_rows[static_cast<size_t>(il)], 0, L.units);
    L.pinned = L.tensors.empty() ? L.units : std::min(plan_.pinned_rows[static_cast<size_t>(il)], L.units - L.lo);
    if (plan_.experts && !L.tensors.empty()) {  // (a mixture's: its own slots, all layers' held to the window's capacity)
      L.window = L.units - L.pinned;
      L.own.assign(static_cast<size_t>(L.window), slot_t{});
      L.row_of.assign(static_cast<size_t>(L.units), -1);
      continue;
    }
    const bool alike = first && L.tensors.size() == first->tensors.size() &&
                       std::equal(L.tensors.begin(), L.tensors.end(), first->tensors.begin(), [](const tensor_view& a, const tensor_view& b) { return a.row_bytes == b.row_bytes; });
    if (alike && window > 0) {
      // The window starts on a page (past the pinned rows, rounded down to where every tensor's row
      // does; below lo, where the device's rows leave no room for it after them: nothing pinned then).
      int64_t w = std::min(L.win0(), L.units - window);
      const int64_t lowest = std::max<int64_t>(0, w - static_cast<int64_t>(page_));
      while (w >= lowest && !on_page(L.tensors, w, page_)) --w;
      if (w >= lowest) L.lo = std::min(L.lo, w), L.pinned = w - L.lo, L.window = window;
    }
    L.row_of.assign(static_cast<size_t>(L.units), -1);
    L.overflow.assign(static_cast<size_t>(L.units - L.pinned - L.window), slot_t{});
    free_overflow(L);
  }
  if (plan_.experts) {
    own_capacity_ = window;
  } else if (std::any_of(layers_.begin(), layers_.end(), [](const layer_t& L) { return L.window > 0; })) {
    window_.assign(static_cast<size_t>(window), slot_t{});
    share_window();
  }
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    layer_t& L = layers_[static_cast<size_t>(il)];
    std::vector<std::pair<int32_t, int32_t>> moves;
    std::vector<int32_t> read;
    for (int64_t i = L.lo; i < L.win0(); ++i) L.row_of[static_cast<size_t>(i)] = static_cast<int32_t>(i), moves.emplace_back(i, i), read.push_back(static_cast<int32_t>(i));
    if (!L.tensors.empty()) file_.read(pieces(L, moves)), arrange(L, read);
    held_bytes_ += static_cast<uint64_t>(L.pinned) * L.neuron_bytes;
  }
  if (m_->embeddings_from_disk() && plan_.token_rows >= m_->weights().token_embd.ne1) {  // (the whole table held)
    std::vector<int32_t> all(static_cast<size_t>(m_->weights().token_embd.ne1));
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int32_t>(i);
    bring_tokens(all);
  }
  file_base_ = file_.counted();  // (the run's figures start after the pinned rows)
}

// One memfd holds the window (each tensor's slots in turn); every layer's window rows of each tensor
// map its part, so a slot's bytes are at row win0() + j of every layer.
void ram_tier::share_window() {
  const layer_t* first = nullptr;
  for (const layer_t& L : layers_)
    if (L.window > 0) {
      first = &L;
      break;
    }
  std::vector<uint64_t> at;  // each tensor's part of the memfd
  uint64_t bytes = 0;
  for (const tensor_view& t : first->tensors) at.push_back(bytes), bytes += mapped_bytes(first->window, t, page_);
  if (bytes == 0) return;  // (a window smaller than a page: each layer's own memory)
  window_fd_ = memfd_create("hotcold-ram-window", MFD_CLOEXEC);
  if (window_fd_ < 0 || ftruncate(window_fd_, static_cast<off_t>(bytes)) != 0)
    throw std::runtime_error(fmt::format("the disk tier's window ({} bytes): {}", bytes, std::strerror(errno)));
  for (const layer_t& L : layers_) {
    if (L.window == 0) continue;
    for (size_t k = 0; k < L.tensors.size(); ++k) {
      const tensor_view& t = L.tensors[k];
      void* want = const_cast<uint8_t*>(t.data) + static_cast<uint64_t>(L.win0()) * t.row_bytes;  // (the model's private copy)
      const uint64_t len = mapped_bytes(L.window, t, page_);
      if (len == 0) continue;
      if (mmap(want, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, window_fd_, static_cast<off_t>(at[k])) == MAP_FAILED)
        throw std::runtime_error(fmt::format("the disk tier's window at {}: {}", t.name, std::strerror(errno)));
    }
  }
}

ram_tier::~ram_tier() {
  std::lock_guard lock(mu_);
  for (layer_t& L : layers_)  // (reads still in flight write into the model's memory)
    try {
      wait_ahead(L);
    } catch (...) {
    }
  if (window_fd_ >= 0) ::close(window_fd_);  // (the mappings stay)
}

ram_tier::use ram_tier::rows(int64_t il, std::span<const int32_t> ids, bool lazy) { return take(il, ids, false, lazy); }
ram_tier::use ram_tier::all_rows(int64_t il) { return take(il, {}, true); }

std::vector<disk_file::piece> ram_tier::pieces(const layer_t& L, const std::vector<std::pair<int32_t, int32_t>>& moves) const {
  std::vector<disk_file::piece> out;
  out.reserve(moves.size() * L.tensors.size());
  for (const tensor_view& t : L.tensors)
    for (const auto& [neuron, row] : moves) {
      auto* into = const_cast<uint8_t*>(t.data) + static_cast<uint64_t>(row) * t.row_bytes;  // (the model's private copy: writable memory)
      out.push_back({m_->file_offset(t.data + static_cast<uint64_t>(neuron) * t.row_bytes), t.row_bytes, into});
    }
  return out;
}

void ram_tier::drop(slot_t& s) {
  if (s.neuron >= 0) {
    layer_t& owner = layers_[static_cast<size_t>(s.layer)];
    owner.row_of[static_cast<size_t>(s.neuron)] = -1;
    held_bytes_ -= owner.neuron_bytes;
    if (plan_.experts) {  // (its bytes, in the owner's memory)
      const int64_t row = owner.pinned + (&s - owner.own.data());
      for (const tensor_view& t : owner.tensors) give_back(t.row(row), t.row(row + 1));
      --own_held_;
    }
  }
  s.layer = -1, s.neuron = -1, s.state = slot_free, s.referenced = 0, s.ahead = 0;
}

void ram_tier::hold(int64_t il, int32_t row, int32_t neuron, bool ahead) {
  layer_t& L = layers_[static_cast<size_t>(il)];
  slot_t& s = slot(L, row);
  s.layer = static_cast<int32_t>(il), s.neuron = neuron, s.state = slot_queued, s.referenced = ahead ? 0 : 1, s.ahead = ahead ? 1 : 0;
  L.row_of[static_cast<size_t>(neuron)] = row;
  held_bytes_ += L.neuron_bytes;
  own_held_ += plan_.experts ? 1 : 0;
}

int32_t ram_tier::own_row(int64_t il, bool over) {
  layer_t& L = layers_[static_cast<size_t>(il)];
  int32_t row = -1;
  for (size_t j = 0; j < L.own.size() && row < 0; ++j)
    if (L.own[j].neuron < 0) row = static_cast<int32_t>(L.pinned + static_cast<int64_t>(j));
  if (row < 0) return -1;
  // (the clock over every layer's own slots: one in use or being read passed, one used since the hand
  // last passed given a second chance)
  const auto per = static_cast<int64_t>(L.own.size()), all = per * static_cast<int64_t>(layers_.size());
  for (int64_t step = 0; own_held_ >= own_capacity_ && step < 2 * all; ++step) {
    layer_t& V = layers_[static_cast<size_t>(own_hand_ / per)];
    const int64_t j = own_hand_ % per;
    own_hand_ = (own_hand_ + 1) % all;
    if (j >= static_cast<int64_t>(V.own.size())) continue;  // (a layer this process does not hold)
    slot_t& s = V.own[static_cast<size_t>(j)];
    if (s.neuron < 0 || s.users > 0 || s.state == slot_queued) continue;
    if (s.referenced) {
      s.referenced = 0;
      continue;
    }
    drop(s);
  }
  return own_held_ < own_capacity_ || over ? row : -1;
}

// A window slot for a neuron of layer il to be read: the clock's hand passes slots in use or being
// read, gives one used since it last passed a second chance, and takes the first other (a free one
// at once; it may hold another layer's neuron); where the whole window is in use, an overflow row of
// the layer (overflow_too) or none. window_full: set once the hand found none, so that the rest of a
// step's neurons go straight to the overflow.
int32_t ram_tier::free_row(int64_t il, bool overflow_too, bool& window_full) {
  layer_t& L = layers_[static_cast<size_t>(il)];
  if (plan_.experts) return own_row(il, overflow_too);
  const auto w = static_cast<int64_t>(window_.size());
  for (int64_t step = 0; L.window > 0 && !all_active_ && !window_full && step < 2 * w; ++step) {
    slot_t& s = window_[static_cast<size_t>(hand_)];
    const int64_t j = hand_;
    hand_ = (hand_ + 1) % w;
    if (s.users > 0 || s.state == slot_queued) continue;
    if (s.state == slot_held && s.referenced) {
      s.referenced = 0;
      continue;
    }
    drop(s);
    return static_cast<int32_t>(L.win0() + j);
  }
  window_full = true;
  if (!overflow_too || L.overflow_free.empty()) return -1;
  const int32_t r = L.overflow_free.back();
  L.overflow_free.pop_back();
  int64_t& top = r < L.lo ? L.low_top : L.overflow_top;
  top = std::max<int64_t>(top, r + 1);
  return r;
}

void ram_tier::unread(layer_t& L, const std::vector<int32_t>& rows) {
  for (int32_t r : rows) {
    drop(slot(L, r));
    if (!L.pinned_row(r) && !L.window_row(r)) L.overflow_free.push_back(r);
  }
}

void ram_tier::wait_ahead(layer_t& L) {
  while (!L.pending.empty()) {
    const auto [ticket, rows] = std::move(L.pending.back());
    L.pending.pop_back();
    if (std::string error = finish(L, ticket, rows); !error.empty()) throw std::runtime_error(error);
  }
}

ram_tier::use ram_tier::take(int64_t il, std::span<const int32_t> ids, bool all, bool lazy) {
  std::unique_lock lock(mu_);
  layer_t& L = layers_.at(static_cast<size_t>(il));
  const int64_t n_ff = L.units;  // (neurons, or experts)
  for (int32_t id : ids)
    if (id < 0 || id >= n_ff) throw std::out_of_range(fmt::format("layer {}: neuron {} of {}", il, id, n_ff));

  // Every neuron in its own row moves what the layer's rows and the window hold: it waits for the
  // layer's other uses and those of the window, and the layer's uses for it.
  turn_.wait(lock, [&] { return all ? L.uses == 0 && (L.window == 0 || (window_users_ == 0 && !all_active_)) : L.users_all == 0; });
  ++L.uses, L.users_all += all ? 1 : 0;
  if (all && L.window > 0) all_active_ = true;
  std::vector<int32_t> rows, read;  // (read: the rows read now)
  std::shared_ptr<use::lazy_read> later;
  if (lazy && !all) later = std::make_shared<use::lazy_read>(), later->missing.assign(ids.size(), 0);
  std::vector<std::pair<int32_t, int32_t>> moves;
  bool window_full = false;
  int64_t taken = 0;  // window slots this step took
  auto add_user = [&](int32_t r) {
    ++slot(L, r).users;
    if (L.window_row(r)) ++window_users_;
  };
  try {
    if (all && L.window > 0)
      for (layer_t& other : layers_) wait_ahead(other);  // (the window's slots being read)
    else
      wait_ahead(L);
    const int64_t n = all ? n_ff : static_cast<int64_t>(ids.size());
    if (!all) rows.assign(ids.size(), -1);
    if (all) {  // (first out of every row that holds another neuron, so that each can go to its own)
      for (int64_t r = 0; r < n_ff; ++r) {
        if (L.pinned_row(r)) continue;
        slot_t& s = slot(L, static_cast<int32_t>(r));
        if (s.layer != il || s.neuron != r) drop(s);
      }
      L.overflow_free.clear();
      L.overflow_top = n_ff, L.low_top = L.lo;
    }
    for (int64_t k = 0; k < n; ++k) {
      const int32_t id = all ? static_cast<int32_t>(k) : ids[static_cast<size_t>(k)];
      int32_t r = L.row_of[static_cast<size_t>(id)];
      ++c_.lookups;
      if (r >= 0) {
        ++c_.hits;
        if (!L.pinned_row(r)) {
          slot_t& s = slot(L, r);
          if (s.ahead) ++c_.ahead, c_.needed_bytes += L.neuron_bytes, s.ahead = 0;
          s.referenced = 1;
          add_user(r);
        }
      } else {
        ++c_.missed, c_.needed_bytes += L.neuron_bytes;
        // (half the window at most for one step: the other half takes the next layer's read-ahead)
        window_full = window_full || 2 * taken >= static_cast<int64_t>(window_.size());
        r = all ? id : free_row(il, true, window_full);
        if (r < 0) {  // (no overflow left: the rest of the window after all, the other layers' reads ahead landed first)
          for (layer_t& other : layers_)
            if (&other != &L) wait_ahead(other);
          bool again = false;
          r = free_row(il, false, again);
        }
        taken += L.window_row(r) ? 1 : 0;
        if (r < 0)  // (the window held by the other layers' steps in progress)
          throw std::runtime_error(fmt::format("the disk tier: layer {} needs more rows than its window and overflow hold while other layers' steps "
                                               "hold the window: raise --ram-budget",
                                               il));
        hold(il, r, id, false);
        add_user(r);
        moves.emplace_back(id, r), read.push_back(r);
        if (later) later->missing[static_cast<size_t>(k)] = 1;
      }
      if (!all) rows[static_cast<size_t>(k)] = r;
    }
    if (later && !moves.empty()) {
      later->ticket = file_.submit(pieces(L, moves));
      L.pending.emplace_back(later->ticket, read);
    } else {
      if (!moves.empty()) file_.read(pieces(L, moves)), arrange(L, read);
      for (int32_t r : read) slot(L, r).state = slot_held;
      later.reset();
    }
  } catch (...) {
    unread(L, read);
    lock.unlock();
    release(il, all, all ? std::span<const int32_t>{} : std::span<const int32_t>(rows));
    throw;
  }
  use u(this, il, all, std::move(rows));
  u.lazy_ = std::move(later);
  return u;
}

void ram_tier::release(int64_t il, bool all, std::span<const int32_t> rows) {
  {
    std::lock_guard lock(mu_);
    layer_t& L = layers_[static_cast<size_t>(il)];
    auto let_go = [&](int32_t r) {
      slot_t& s = slot(L, r);
      if (s.users == 0) return;
      --s.users;
      if (L.window_row(r)) --window_users_;
    };
    if (all) {
      for (int64_t r = 0; r < L.units; ++r)
        if (!L.pinned_row(r)) let_go(static_cast<int32_t>(r));
    } else {
      for (int32_t r : rows)
        if (!L.pinned_row(r)) let_go(r);
    }
    --L.uses, L.users_all -= all ? 1 : 0;
    if (all && L.window > 0) all_active_ = false;
    if (L.uses == 0) give_back_overflow(L);
  }
  turn_.notify_all();
}

// The overflow rows a step took, free again and their pages given back to the system (one madvise a
// tensor and range: the pages wholly inside the overflow rows; an edge page is a neighbour's too).
void ram_tier::give_back_overflow(layer_t& L) {
  const int64_t first = L.win1();
  if (L.overflow_top <= first && L.low_top == 0) return;
  for (const auto& [from, to] : {std::pair{int64_t{0}, L.low_top}, std::pair{first, L.overflow_top}}) {
    if (to <= from) continue;
    for (int64_t r = from; r < to; ++r) drop(slot(L, static_cast<int32_t>(r)));
    for (const tensor_view& t : L.tensors) give_back(t.row(from), t.row(to));
  }
  free_overflow(L);
}

// Every overflow row free: past the window's end first, then those below lo.
void ram_tier::free_overflow(layer_t& L) {
  L.overflow_free.clear();
  for (int64_t r = L.lo - 1; r >= 0; --r) L.overflow_free.push_back(static_cast<int32_t>(r));
  for (int64_t r = L.units - 1; r >= L.win1(); --r) L.overflow_free.push_back(static_cast<int32_t>(r));
  L.overflow_top = 0, L.low_top = 0;
}

void ram_tier::give_back(const uint8_t* from, const uint8_t* to) {
  const auto lo = (reinterpret_cast<uint64_t>(from) + page_ - 1) / page_ * page_, hi = reinterpret_cast<uint64_t>(to) / page_ * page_;
  if (hi <= lo) return;
  madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
  c_.released_pages += (hi - lo) / page_;
}

void ram_tier::read_ahead(int64_t il, std::span<const int32_t> ids) {
  std::lock_guard lock(mu_);
  layer_t& L = layers_.at(static_cast<size_t>(il));
  if (L.users_all > 0 || L.window == 0 || all_active_) return;
  std::vector<std::pair<int32_t, int32_t>> moves;
  std::vector<int32_t> rows;
  bool window_full = false;
  for (int32_t id : ids) {
    if (id < 0 || id >= L.units || L.row_of[static_cast<size_t>(id)] >= 0) continue;
    const int32_t r = free_row(il, false, window_full);
    if (r < 0) break;
    hold(il, r, id, true);  // (not marked used: a guess its layer does not ask for is the first the clock reuses)
    moves.emplace_back(id, r), rows.push_back(r);
  }
  if (moves.empty()) return;
  try {
    L.pending.emplace_back(file_.submit(pieces(L, moves)), rows);
  } catch (...) {
    unread(L, rows);
    throw;
  }
}

void ram_tier::guess(int64_t il, predictor_runner& runner, const float* in, int64_t n, guess_scratch& g, const id_filter& host_only) {
  const int64_t n_ff = m_->hp().n_ff;
  if (static_cast<int64_t>(g.chosen.size()) < n * n_ff) g.chosen.resize(static_cast<size_t>(n * n_ff));
  runner.predict(il, in, n, g.chosen.data(), g.ids);
  if (host_only) host_only(il, g.ids);
  read_ahead(il, g.ids);
}

void ram_tier::read_ahead_next(int64_t il, predictor_runner& runner, const float* pred_in, int64_t n, guess_scratch& g, const id_filter& host_only) {
  // (The next layers' inputs are this one's plus what the layers between add: the residual stream
  // moves little in a layer, so their predictors on this input name most of what they will choose.)
  for (int64_t next = il + 1; next <= il + read_ahead_layers && next < m_->hp().n_layer; ++next) {
    if (!m_->weights().layers[static_cast<size_t>(next)].pred_fc1) return;
    guess(next, runner, pred_in, n, g, host_only);
  }
}

void ram_tier::read_ahead_at_input(int64_t il, predictor_runner& runner, const float* x, int64_t n, guess_scratch& g, const id_filter& host_only) {
  const hparams& hp = m_->hp();
  if (il < 0 || il >= hp.n_layer || !m_->holds_layer(il)) return;
  if (il == first_held_) {  // (a step begins: the trial's clock and turn)
    std::lock_guard lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    if (n == 1 && step_was_token_) decoded_ += 1, decoded_seconds_ += std::chrono::duration<double>(now - step_began_).count();
    step_began_ = now, step_was_token_ = n == 1;
    if (n == 1 && input_guess && input_guess_on_trial) input_trial_.token(decoded_, decoded_seconds_);
    if (n == 1) c_.token_steps += 1, c_.guessed_steps += guessing() ? 1 : 0;
  }
  if (!guessing()) return;
  const layer_weights& l = m_->weights().layers[static_cast<size_t>(il)];
  if (!l.pred_fc1) return;
  const layer_recipe r = recipe_of(hp, l);
  const float* in = x;
  if (r.predictor_reads_ffn_input) {  // (the FFN's norm of what attention has not added to yet)
    const int64_t d = hp.n_embd;
    g.in.resize(static_cast<size_t>(n * d));
    for (int64_t t = 0; t < n; ++t) apply_norm(r.norm, r.ffn_norm, x + t * d, g.in.data() + t * d, d, hp.norm_eps);
    in = g.in.data();
  }
  guess(il, runner, in, n, g, host_only);
}

void ram_tier::token_rows(std::span<const int32_t> ids) {
  if (!m_->embeddings_from_disk()) return;
  std::lock_guard lock(mu_);
  bring_tokens(ids);
}

void ram_tier::bring_tokens(std::span<const int32_t> ids) {
  const tensor_view& e = m_->weights().token_embd;
  if (token_held_.empty()) token_held_.assign(static_cast<size_t>(e.ne1), 0);
  std::vector<int32_t> want;
  for (int32_t id : ids) {
    if (id < 0 || id >= e.ne1) throw std::out_of_range(fmt::format("token {} of {}", id, e.ne1));
    if (!token_held_[static_cast<size_t>(id)] && std::find(want.begin(), want.end(), id) == want.end()) want.push_back(id);
  }
  if (want.empty()) return;
  if (tokens_held_ + static_cast<int64_t>(want.size()) > plan_.token_rows && tokens_held_ > 0) {
    // All given back, then this step's read again (a row on an edge page kept its bytes; it is read
    // again all the same).
    give_back(e.data, e.data + e.bytes());
    std::fill(token_held_.begin(), token_held_.end(), 0);
    held_bytes_ -= static_cast<uint64_t>(tokens_held_) * e.row_bytes;
    tokens_held_ = 0;
    want.clear();
    for (int32_t id : ids)
      if (std::find(want.begin(), want.end(), id) == want.end()) want.push_back(id);
  }
  std::vector<disk_file::piece> pieces;
  for (int32_t id : want) {
    auto* into = const_cast<uint8_t*>(e.row(id));  // (the model's private copy: writable memory)
    pieces.push_back({m_->file_offset(into), e.row_bytes, into});
  }
  file_.read(pieces);
  for (int32_t id : want) token_held_[static_cast<size_t>(id)] = 1;
  tokens_held_ += static_cast<int64_t>(want.size());
  held_bytes_ += want.size() * e.row_bytes;
}

ram_tier::counts ram_tier::counted() const {
  std::lock_guard lock(mu_);
  counts c = c_;
  const disk_file::counts f = file_.counted();  // (the file is read for the tier alone)
  c.disk_bytes = f.bytes - file_base_.bytes, c.reads = f.reads - file_base_.reads, c.wait_seconds = f.wait_seconds - file_base_.wait_seconds;
  c.held_bytes = held_bytes_;
  return c;
}

}  // namespace hotcold
