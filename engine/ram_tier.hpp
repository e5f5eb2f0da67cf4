#pragma once
// The disk tier (docs/disk.md): a sparse file whose per-neuron FFN rows are larger than the memory
// given them. The model is loaded with those rows left in the file (load_options::ffn_rows_from_disk:
// their memory in the private copy untouched, no resident pages). A layer's per-neuron tensors are
// rows a use names by index (neuron_set::rows), so a neuron's rows need not sit at its own:
//  - rows lo .. lo + pinned - 1 hold their own neurons (prepare orders a layer's neurons most often
//    firing first, so a prefix is the hottest; lo: the first neurons a hot device holds, which the
//    CPU never reads — 0 without one), read at the start and kept;
//  - the next `window` rows of every layer are one shared window: the same memory (a memfd mapped at
//    each layer's rows), so slot j holds one neuron of one layer at a time, whichever was read last (a
//    clock, second chance, picks the slot to reuse) — the current layer's and the next layer's
//    read-ahead need a few layers' worth, not every layer's;
//  - the rest of a layer's rows (below lo, and past the window) are overflow, slots a step that needs
//    more than the window takes for its length, given back (madvise) when it ends.
// A use of a layer says in which row each neuron it named sits, and the sparse routines read them
// there: the same bytes in the same order as with the whole file in memory — the same bits whatever
// the budget. A slot's memory, once touched, stays: nothing is zeroed or faulted again when it is
// reused. Every row of a layer (all_rows) puts each neuron in its own row (the window's slots with it).
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <string>
#include <mutex>
#include <span>
#include <vector>

#include "engine/disk_reads.hpp"
#include "engine/on_off_trial.hpp"
#include "model/model.hpp"

namespace hotcold {

class predictor_runner;

struct ram_tier_plan {
  std::vector<int64_t> pinned_rows;  // per layer: neurons kept (from device_rows on)
  // Per layer: the neurons 0 .. device_rows - 1 a hot device holds (empty: none), which the CPU does
  // not read: its pinned ones are the hottest after them (where the budget reaches them).
  std::vector<int64_t> device_rows;
  int64_t window_rows = 0;           // the shared window's slots (a neuron of some layer each; a mixture's: experts cached for all the layers)
  uint64_t window_bytes = 0;         // their bytes
  uint64_t fixed_bytes = 0;          // what the model holds besides the per-neuron rows (and the embedding rows kept)
  uint64_t least_bytes = 0;          // ... at the least: with the embedding rows of a budget that does not hold everything
  int64_t token_rows = 0;            // embedding rows kept at most (model::embeddings_from_disk), else 0
  uint64_t row_bytes = 0;            // every layer's per-neuron rows, all of them
  std::vector<uint64_t> neuron_bytes;  // per layer: one neuron's rows (what a miss reads; 0 where the process does not hold the layer)
  bool experts = false;              // a mixture's: the units are experts (all pinned where all fit, else none: a cache), not neurons
};
// The tier's units of layer il (tier_units, where this process holds the layer: a worker's are some of
// them), one unit's bytes over them, and a layer's units (its neurons, or a mixture's experts).
std::vector<tensor_view> tier_tensors(const model& m, int64_t il);
uint64_t tier_unit_bytes(const model& m, int64_t il);
int64_t tier_units_per_layer(const model& m);
// The plan for `budget` bytes of weights in memory: what is not a per-neuron row is held whole
// (std::invalid_argument naming the bytes where the budget is smaller); of what is left, the window
// takes half, up to a quarter of a layer's neurons (a few layers' choices), and each layer's hottest
// neurons alike the rest (all of them, where every row fits). A mixture's: every expert where all fit,
// else none pinned and every expert slot the window's (its cache for all the layers).
// device_rows: per layer, the first neurons a hot device holds (empty: none; not a mixture's): the
// pinned ones follow them, no more than the neurons left.
ram_tier_plan plan_ram_tier(const model& m, uint64_t budget, std::span<const int64_t> device_rows = {});
// What the plan holds and reads, as stderr says it ("--ram-budget B GiB: ... read from PATH as tokens
// choose them").
std::string describe(const ram_tier_plan& p, uint64_t budget, const std::string& path);

class ram_tier {
 public:
  // m loaded with ffn_rows_from_disk; reads the pinned rows now (std::runtime_error naming the file
  // and offset on a read that fails).
  ram_tier(std::shared_ptr<const model> m, const ram_tier_plan& plan, const disk_file::options& io = {});
  ~ram_tier();

  // Layer il's rows of neurons ids (each < n_ff) in memory until the use ends; rows()[k] is the row
  // of the layer's per-neuron tensors that holds neuron ids[k] (its slot). all_rows: every neuron in
  // its own row (rows() empty). While a use lasts its slots are not reused.
  //
  // lazy: the rows not in memory are submitted and not waited on; the step computes its other neurons
  // meanwhile and asks for the rest (ready(k0, k1), from any thread) before it reads neurons k0 .. k1
  // of ids; ready() for all of them (and the read's error, rethrown). The disk's latency (~0.5 ms a
  // read on an idle virtual disk) then overlaps the step's work on what it holds.
  class use {
   public:
    use() = default;
    use(use&& o) noexcept : tier_(o.tier_), layer_(o.layer_), all_(o.all_), rows_(std::move(o.rows_)), lazy_(std::move(o.lazy_)) { o.tier_ = nullptr; }
    use& operator=(use&&) = delete;
    ~use();
    std::span<const int32_t> rows() const { return rows_; }
    // The rows of the ids the use was asked for: rows(), or the ids themselves (every neuron in its own row).
    std::span<const int32_t> rows_of(std::span<const int32_t> ids) const { return rows_.empty() ? ids : std::span<const int32_t>(rows_); }
    // Whether neurons k0 .. k1 of ids are in memory, waiting for their read first (false: it failed;
    // ready() says how). Without lazy, always true at once.
    bool ready(int64_t k0, int64_t k1) const;
    void ready() const;
   private:
    friend class ram_tier;
    struct lazy_read;
    use(ram_tier* t, int64_t il, bool all, std::vector<int32_t> rows) : tier_(t), layer_(il), all_(all), rows_(std::move(rows)) {}
    void land() const;
    ram_tier* tier_ = nullptr;
    int64_t layer_ = 0;
    bool all_ = false;
    std::vector<int32_t> rows_;
    std::shared_ptr<lazy_read> lazy_;
  };
  use rows(int64_t il, std::span<const int32_t> ids, bool lazy = false);
  use all_rows(int64_t il);
  // Reads ahead: layer il's rows of neurons ids that are not in memory, into window slots, submitted
  // now and not waited on (the next layer's guess while this one computes); rows(il) waits for them.
  void read_ahead(int64_t il, std::span<const int32_t> ids);
  // The guesses' scratch (the caller's: a guess is made and its reads submitted within one call).
  struct guess_scratch {
    std::vector<float> in;
    std::vector<uint8_t> chosen;
    std::vector<int32_t> ids;
  };
  // The read-ahead of layer il + 1 from layer il's step: that layer's predictor (runner) on layer il's
  // predictor input (n rows), its choice read ahead. Nothing for the last layer or one without a
  // predictor.
  // host_only: keeps of a layer's ids those the host reads (with a hot device: not the device's).
  using id_filter = std::function<void(int64_t il, std::vector<int32_t>& ids)>;
  void read_ahead_next(int64_t il, predictor_runner& runner, const float* pred_in, int64_t n, guess_scratch& g, const id_filter& host_only = {});
  // The second guess of layer il's rows, before its attention: its predictor on x, the layer's input
  // (n rows) — what the predictor reads where it reads the layer's input, else the residual stream
  // before attention adds to it (normalized by the FFN's norm where the predictor reads that), nearer
  // than the guess a layer before — the rows neither in memory nor on their way read while attention
  // computes. It costs a predictor's pass a layer, which pays where reads are waited on and not
  // where the disk is busy all the time anyway: on trial (input_guess_trial(), scored by decoded
  // tokens a second between the steps' starts at the first layer held; off unless it is more than 2%
  // faster without it, a new trial every 16 epochs).
  void read_ahead_at_input(int64_t il, predictor_runner& runner, const float* x, int64_t n, guess_scratch& g, const id_filter& host_only = {});
  const on_off_trial& input_guess_trial() const { return input_trial_; }
  bool input_guess = true, input_guess_on_trial = true;  // the second guess: made at all; on trial (else always)
  bool guessing() const { return input_guess && (!input_guess_on_trial || input_trial_.on()); }
  int read_ahead_layers = 1;  // layers read ahead (2 measured no faster: a step's own reads wait behind the further layer's)
  // The embedding rows of tokens ids in place (model::embeddings_from_disk; else nothing to do): a
  // row read stays until the plan's token_rows are held, when all are given back. Read under the
  // step's embedding (a few KB a token), not ahead.
  void token_rows(std::span<const int32_t> ids);

  // Over the run: neurons looked up and those whose rows were all in memory; bytes read from the disk
  // (reads' own, rounding included), reads, seconds waited; overflow pages given back; the bytes of
  // rows held now (pinned and window slots that hold a neuron).
  // ahead: of the neurons whose rows were not in memory when their layer asked, those the read-ahead
  // had brought (or was bringing); missed: those read then. read-ahead recall = ahead / (ahead + missed).
  struct counts {
    uint64_t lookups = 0, hits = 0;
    uint64_t ahead = 0, missed = 0;
    uint64_t needed_bytes = 0;  // the rows' bytes of those (ahead + missed): what a step had to have from the disk
    uint64_t disk_bytes = 0, reads = 0;
    double wait_seconds = 0;
    uint64_t released_pages = 0;
    uint64_t held_bytes = 0;
    uint64_t token_steps = 0, guessed_steps = 0;  // steps of one token at the first layer held; of those, with the second guess on
  };
  counts counted() const;
  const ram_tier_plan& plan() const { return plan_; }
  // Layer il's rows: pinned (its neurons from first_pinned on), then the shared window's (window_rows,
  // or none where the layer's rows could not be mapped on pages).
  int64_t pinned_rows(int64_t il) const { return layers_.at(static_cast<size_t>(il)).pinned; }
  int64_t first_pinned(int64_t il) const { return layers_.at(static_cast<size_t>(il)).lo; }
  int64_t window_rows(int64_t il) const { return layers_.at(static_cast<size_t>(il)).window; }

 private:
  // A slot beyond the pinned rows: the window's (shared by the layers) or a layer's overflow.
  struct slot_t {
    int32_t layer = -1, neuron = -1;  // what it holds (-1: nothing)
    uint8_t state = 0;                // free, held, queued (a read in flight)
    uint8_t referenced = 0, ahead = 0;  // the clock's second chance; brought by a read-ahead not asked for yet
    uint16_t users = 0;               // uses holding it
  };
  struct layer_t {
    std::vector<tensor_view> tensors;         // its units' tensors (tier_units: row r of each is slot r; a neuron, or an expert)
    int64_t units = 0;                        // the layer's neurons (or experts): its rows
    int64_t lo = 0, pinned = 0, window = 0;   // rows [lo, lo + pinned) pinned, then `window` of the shared window; the rest overflow
    // A mixture's layer (plan_.experts): every row past the pinned ones is a slot of its own, in the
    // layer's own memory, all layers' together held to the window's capacity (own_capacity_) — an
    // expert's pages given back when it leaves its slot — instead of rows of the shared window.
    std::vector<slot_t> own;
    std::vector<const tensor_view*> interleaved;  // a mixture's expert tensors the load marked interleaved: each expert's rows rewritten as it lands
    uint64_t neuron_bytes = 0;                // a neuron's bytes over the tensors
    std::vector<int32_t> row_of;              // per neuron: the row holding it, -1 none (a pinned one: itself)
    std::vector<slot_t> overflow;             // rows below lo, then rows from the window's end on
    std::vector<int32_t> overflow_free;       // overflow rows not in use (a stack)
    int64_t overflow_top = 0, low_top = 0;    // overflow rows below them (past the window; below lo) used since last given back
    int64_t win0() const { return lo + pinned; }  // the window's first row
    int64_t win1() const { return lo + pinned + window; }
    bool pinned_row(int64_t r) const { return r >= lo && r < lo + pinned; }
    bool window_row(int64_t r) const { return r >= win0() && r < win1(); }
    int users_all = 0, uses = 0;              // all_rows uses in progress; uses in progress
    std::vector<std::pair<uint64_t, std::vector<int32_t>>> pending;  // reads not waited on (ahead, or a lazy use's): ticket, rows
  };
  slot_t& slot(layer_t& L, int32_t row) {
    if (plan_.experts) return L.own[static_cast<size_t>(row - L.pinned)];  // (lo is 0)
    if (L.window_row(row)) return window_[static_cast<size_t>(row - L.win0())];
    return L.overflow[static_cast<size_t>(row < L.lo ? row : row - L.pinned - L.window)];
  }
  // A free row of a mixture's layer il, the least recently used expert of any layer out of its slot first
  // where the layers hold their capacity; beyond it only with over (a step's own experts), else -1.
  int32_t own_row(int64_t il, bool over);
  use take(int64_t il, std::span<const int32_t> ids, bool all, bool lazy = false);
  // Layer il's predictor on in (n rows), the host's share of its choice read ahead.
  void guess(int64_t il, predictor_runner& runner, const float* in, int64_t n, guess_scratch& g, const id_filter& host_only);
  std::string land(int64_t il, uint64_t ticket);  // a read of layer il's rows in: "" or its error
  void arrange(const layer_t& L, std::span<const int32_t> rows) const;  // rows just read, as the load lays them out (interleaved experts)
  // A pending read waited on: its rows held, or on an error free again (the error kept for a lazy use
  // that asks after) and returned.
  std::string finish(layer_t& L, uint64_t ticket, const std::vector<int32_t>& rows);
  int32_t free_row(int64_t il, bool overflow_too, bool& window_full);  // a window slot to reuse (clock), else overflow (-1: none)
  void drop(slot_t& s);                     // the slot's neuron out of it
  void hold(int64_t il, int32_t row, int32_t neuron, bool ahead);  // the row to hold the neuron (being read)
  std::vector<disk_file::piece> pieces(const layer_t& L, const std::vector<std::pair<int32_t, int32_t>>& moves) const;  // (neuron, row)
  void wait_ahead(layer_t& L);
  void unread(layer_t& L, const std::vector<int32_t>& rows);  // a read that failed: its rows free again
  void release(int64_t il, bool all, std::span<const int32_t> rows);
  void give_back_overflow(layer_t& L);
  static void free_overflow(layer_t& L);  // every overflow row free (none taken)
  void give_back(const uint8_t* from, const uint8_t* to);  // the pages wholly inside [from, to) (an edge page is a neighbour's too)
  void share_window();  // maps the window's memory at every layer's window rows
  void bring_tokens(std::span<const int32_t> ids);  // token_rows, the lock held

  std::shared_ptr<const model> m_;
  ram_tier_plan plan_;
  disk_file file_;
  uint64_t page_;
  std::vector<layer_t> layers_;
  std::vector<slot_t> window_;
  int64_t hand_ = 0;              // the clock, over the window
  int64_t window_users_ = 0;      // uses holding the window's slots, over all of them
  bool all_active_ = false;       // an all_rows use holds the window
  int64_t own_capacity_ = 0, own_held_ = 0;  // a mixture's: experts its layers' own slots may hold (the window's), and hold now
  int64_t own_hand_ = 0;                      // the clock over them (layer x slot)
  int window_fd_ = -1;
  uint64_t held_bytes_ = 0;
  std::vector<uint8_t> token_held_;  // per token: its embedding row in memory
  int64_t tokens_held_ = 0;
  std::map<uint64_t, std::string> failed_;  // reads waited on that failed: ticket, error (for a lazy use)
  counts c_;  // (its disk figures: the file's own counts since the pinned rows)
  // read_ahead_at_input's trial, and its clock: decoded tokens and their seconds, a token's from one
  // step's start at the first layer this process holds to the next's.
  on_off_trial input_trial_{{32, 8, 16, 0.02, true}};
  int64_t first_held_ = -1;
  std::chrono::steady_clock::time_point step_began_;
  bool step_was_token_ = false;
  double decoded_ = 0, decoded_seconds_ = 0;
  disk_file::counts file_base_;
  mutable std::mutex mu_;
  std::condition_variable turn_;  // an all_rows use waits for the uses of its layer and of the window, and a layer's uses for it
};

}  // namespace hotcold
