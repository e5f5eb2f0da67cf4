#pragma once
// The disk tier (docs/disk.md): a sparse file whose per-neuron FFN rows are larger than the memory
// given them. The model is loaded with those rows left in the file (load_options::ffn_rows_from_disk:
// their memory in the private copy untouched, no resident pages); the tier reads into place, before a
// layer computes, the pages of the rows its chosen neurons need that are not there, and gives pages
// back (madvise) to stay within its budget. The rows sit where they would with the whole file read, so
// every path computes from the same bytes at the same addresses: the same bits whatever the budget.
//
// What stays: each layer's first `pinned_rows` neurons (prepare orders a layer's neurons most often
// firing first, so a prefix is the hottest), read at the start and never given back; then a window of
// recently used pages, given back by a clock (second chance) when a read needs room. A page is the
// unit: the rows of a page's neurons come in together (page-sized reads, adjacent ones coalesced by
// engine/disk_reads), and a page at a tensor's edge, shared with the tensor beside it, is read for its
// part of the tensor only and kept.
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "engine/disk_reads.hpp"
#include "model/model.hpp"

namespace hotcold {

class predictor_runner;

struct ram_tier_plan {
  std::vector<int64_t> pinned_rows;  // per layer: neurons 0 .. pinned_rows - 1 kept
  uint64_t window_bytes = 0;         // recently used pages kept beside them
  uint64_t fixed_bytes = 0;          // what the model holds besides the per-neuron rows
  uint64_t row_bytes = 0;            // every layer's per-neuron rows, all of them
};
// The plan for `budget` bytes of weights in memory: what is not a per-neuron row is held whole
// (std::invalid_argument naming the bytes where the budget is smaller); of what is left, half goes to
// each layer's hottest neurons alike and half to the window (all of them, where every row fits).
ram_tier_plan plan_ram_tier(const model& m, uint64_t budget);

class ram_tier {
 public:
  // m loaded with ffn_rows_from_disk; reads the pinned rows now (std::runtime_error naming the file
  // and offset on a read that fails).
  ram_tier(std::shared_ptr<const model> m, const ram_tier_plan& plan, const disk_file::options& io = {});
  ~ram_tier();

  // Layer il's rows of neurons ids (each < n_ff) in place until the use ends; every row of the layer
  // for all_rows. While a use of a layer lasts its pages are not given back.
  class use {
   public:
    use() = default;
    use(use&& o) noexcept : tier_(o.tier_), layer_(o.layer_) { o.tier_ = nullptr; }
    use& operator=(use&&) = delete;
    ~use();
   private:
    friend class ram_tier;
    use(ram_tier* t, int64_t il) : tier_(t), layer_(il) {}
    ram_tier* tier_ = nullptr;
    int64_t layer_ = 0;
  };
  use rows(int64_t il, std::span<const int32_t> ids);
  use all_rows(int64_t il);
  // Reads ahead: the pages of layer il's rows of neurons ids that are not in memory, submitted now and
  // not waited on (the next layer's guess while this one computes); rows(il) waits for them first.
  void read_ahead(int64_t il, std::span<const int32_t> ids);
  // The read-ahead of layer il + 1 from layer il's step: that layer's predictor (runner) on layer il's
  // predictor input (n rows), its choice read ahead; chosen and ids are the caller's scratch. Nothing
  // for the last layer or one without a predictor.
  void read_ahead_next(int64_t il, predictor_runner& runner, const float* pred_in, int64_t n, std::vector<uint8_t>& chosen, std::vector<int32_t>& ids);

  // Over the run: neurons looked up and those whose rows were all in memory; bytes read from the disk
  // (reads' own, rounding included), reads, seconds waited; pages given back; the bytes held now.
  // ahead: of the neurons whose rows were not in memory when their layer asked, those the read-ahead
  // had brought (or was bringing); missed: those read then. read-ahead recall = ahead / (ahead + missed).
  struct counts {
    uint64_t lookups = 0, hits = 0;
    uint64_t ahead = 0, missed = 0;
    uint64_t disk_bytes = 0, reads = 0;
    double wait_seconds = 0;
    uint64_t released_pages = 0;
    uint64_t held_bytes = 0;
  };
  counts counted() const;
  const ram_tier_plan& plan() const { return plan_; }

 private:
  struct page_ref {
    uint32_t layer, tensor;
    uint64_t index;
  };
  struct span_t {  // a tensor's per-neuron rows and their pages
    const uint8_t* data = nullptr;
    uint64_t bytes = 0, row_bytes = 0;
    uint64_t first_page = 0;          // address / page of its first byte
    std::vector<uint8_t> state;       // per page: 0 absent, 1 held, 2 pinned (never given back), 3 being read
    std::vector<uint8_t> referenced;  // the clock's second chance
    std::vector<uint8_t> ahead;       // brought by a read-ahead its layer has not asked for yet
    // Page k lies wholly inside the tensor (may be given back; an edge page is shared with a neighbour).
    bool interior(uint64_t k, uint64_t page) const {
      const auto addr = reinterpret_cast<uint64_t>(data);
      return (first_page + k) * page >= addr && (first_page + k + 1) * page <= addr + bytes;
    }
  };
  struct need {
    uint32_t span;
    uint64_t page;
  };
  struct pending_read {
    uint64_t ticket;
    std::vector<need> pages;
  };
  use take(int64_t il, std::span<const int32_t> ids, bool all);
  void bring(int64_t il, std::span<const int32_t> ids, bool all, bool pin);
  uint64_t window_pages_in(int64_t il, const std::vector<need>& needs) const;  // the pages of needs that may be given back
  void forget(int64_t il, const std::vector<need>& needs);                     // marked absent again (a read that failed)
  std::vector<need> absent_pages(int64_t il, std::span<const int32_t> ids, bool all, bool pin, bool count);
  std::vector<disk_file::piece> pieces_of(int64_t il, const std::vector<need>& needs) const;
  void landed(int64_t il, const std::vector<need>& needs, bool pin, bool ahead);
  void wait_ahead(int64_t il);
  void release(int64_t il);
  void make_room(uint64_t pages);

  std::shared_ptr<const model> m_;
  ram_tier_plan plan_;
  disk_file file_;
  uint64_t page_;
  std::vector<std::vector<span_t>> layers_;
  std::vector<int> users_;
  std::vector<std::vector<pending_read>> pending_;  // per layer, read-aheads not waited on
  std::vector<page_ref> clock_;  // every page that may be given back, in order
  size_t hand_ = 0;
  uint64_t held_window_pages_ = 0, window_pages_ = 0, pinned_bytes_ = 0;
  counts c_;                     // (its disk figures: the file's own counts since the pinned rows)
  disk_file::counts file_base_;
  mutable std::mutex mu_;
};

}  // namespace hotcold
