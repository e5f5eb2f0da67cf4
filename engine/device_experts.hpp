#pragma once
// A mixture of experts' experts on the hot device (docs/moe.md, "Hot and cold experts"). Each layer
// has a number of slots on the device, each holding one expert's gate, up and down rows (plain rows,
// as a GPU's kernels read them). A step's routed experts split into the ones a slot holds (hot: the
// device computes them) and the rest (cold: the CPU's workers compute them from host memory at the
// same time); the forward pass joins the two weighted sums (engine/moe_ffn.cpp).
//
// Where a layer holds fewer slots than experts, the slots are a cache: an expert a token chose that no
// slot held is uploaded after the layer (evicting the one the policy scores lowest, never one the step
// is using), and the experts the next layer's router guesses (moe_block::guess_next) are
// uploaded one layer early; both within an allowance of bytes per token, so that uploads queued ahead
// of the device's work never hold up a token by more than that. Uploads are queued on the device's
// queue, after the work already there (which may still read the slot being refilled).
#include <cstdint>
#include <chrono>
#include <deque>
#include <mutex>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "devices/device.hpp"
#include "engine/on_off_trial.hpp"
#include "model/model.hpp"

namespace hotcold {

class device_layers;
class ram_tier;

// A running average's next value: `average` moved a fifth of the way to `sample` (the first sample
// taken as it is, while the average is 0).
inline void fold_into(double& average, double sample) { average = average > 0 ? 0.8 * average + 0.2 * sample : sample; }

enum class expert_policy {
  lru,        // evict the expert chosen longest ago
  lfu_decay,  // evict the lowest count of choices, every count multiplied by a decay each token (recency and popularity)
  fixed,      // no uploads: the slots keep the experts they were given
};
std::string_view expert_policy_name(expert_policy p);
// "lru", "lfu-decay", "fixed"; std::invalid_argument naming the choices otherwise.
expert_policy parse_expert_policy(std::string_view s);

// One layer's cache of experts: which experts it holds, and each expert's score under the policy
// (higher: kept longer). Shared by the device's slots and `hotcold replay`'s what-if (tools/expert_cache).
class expert_slots {
 public:
  expert_slots(int64_t n_expert, int64_t capacity, expert_policy p, double decay = 0.9);
  bool holds(int32_t e) const { return held_[static_cast<size_t>(e)] != 0; }
  int64_t size() const { return size_; }
  int64_t capacity() const { return capacity_; }
  expert_policy policy() const { return policy_; }
  void next_token();     // a token begins: LFU's counts decay
  void use(int32_t e);   // the token chose e (held or not)
  // Takes e in, evicting the held expert of lowest score not in `keep` when every slot is taken; returns
  // the expert evicted, -1 when a slot was free, -2 when nothing was taken in (every held expert is
  // kept, or the policy is fixed). Throws std::logic_error when e is held already.
  int32_t admit(int32_t e, std::span<const int32_t> keep);
  // Fills a free slot with e, whatever the policy (the initial set); std::logic_error when full or held.
  void put(int32_t e);

 private:
  std::vector<uint8_t> held_;
  std::vector<double> score_;
  int64_t size_ = 0, capacity_ = 0;
  expert_policy policy_;
  double decay_;
  int64_t clock_ = 0;
};

// What the plan gives the device of a mixture's experts.
struct expert_residency {
  std::vector<int64_t> slots;  // per layer: experts the device holds (0: all on the CPU, n_expert: all of them)
  expert_policy policy = expert_policy::lfu_decay;
  uint64_t upload_bytes_per_token = 0;  // the uploads' allowance (0: none)
  bool prefetch = true;                 // upload the next layer's guessed experts one layer early ...
  bool prefetch_on_trial = true;        // ... where it pays: device_experts::guessing
  // Per layer the experts the slots start with, in this order (empty: 0, 1, 2, ...): e.g. the most
  // chosen in a recorded run, a static placement by popularity with the fixed policy.
  std::vector<std::vector<int32_t>> first;
  bool any() const;
};

class device_experts {
 public:
  // The slots' rows are allocated on the device that `on` holds and filled with each layer's first
  // experts (residency.first, else 0, 1, ...). Throws devices::out_of_device_memory when they do not fit its budget,
  // std::invalid_argument for slots that do not fit the model or experts the device cannot compute.
  // disk: the disk tier (--ram-budget) that holds the experts' host rows (null: the model holds them
  // all); an expert's upload then reads its rows through it, as the CPU's steps do.
  device_experts(std::shared_ptr<const model> m, const expert_residency& r, std::shared_ptr<const device_layers> on,
                 std::shared_ptr<ram_tier> disk = nullptr);
  ~device_experts();

  int64_t slots(int64_t layer) const { return r_.slots[static_cast<size_t>(layer)]; }
  const expert_residency& residency() const { return r_; }
  // Expert e's slot in layer `layer` (-1: on the host only).
  int32_t slot_of(int64_t layer, int32_t e) const { return slot_[static_cast<size_t>(layer)][static_cast<size_t>(e)]; }
  // A slot's rows on the device: gate and up (n_ff_exp rows of n_embd), down (n_embd rows of n_ff_exp).
  struct rows {
    tensor_view gate, up, down;
  };
  rows slot_rows(int64_t layer, int32_t slot) const;
  uint64_t expert_bytes(int64_t layer) const { return expert_bytes_[static_cast<size_t>(layer)]; }
  uint64_t bytes() const { return bytes_; }  // every slot's rows
  const device_layers& layers() const { return *on_; }

  // A step of n tokens begins: its upload allowance, n x upload_bytes_per_token, shared among the
  // layers that hold slots (each layer's share accrues as credit, up to two experts' bytes, so that
  // the first layers do not spend every token's allowance and a layer refills every few tokens); the
  // step's uploads never pass the allowance.
  void begin_step(int64_t n);
  // One token at `layer` chose `experts`: the policy's uses, and the hits counted (held at routing);
  // returns the hits.
  int64_t chosen(int64_t layer, std::span<const int32_t> experts);
  // Queues expert e's upload into a slot of `layer` (evicting by the policy, sparing `keep`) when the
  // step's allowance has room; returns whether it was queued. guessed: a prefetch (counted apart).
  bool upload(int64_t layer, int32_t e, std::span<const int32_t> keep, bool guessed = false);
  // A prompt batch's cold expert that enough of its tokens chose: uploaded now, whatever the
  // allowance (the caller weighed its cost), so that the device computes it for them.
  bool stream(int64_t layer, int32_t e, std::span<const int32_t> keep);
  // Seconds an upload takes a byte, as measured on the device's queue (0: not measured yet).
  double upload_seconds_per_byte() const;

  // Whether the next layer's experts are guessed and uploaded a layer early now. On trial
  // (residency().prefetch_on_trial): the guess buys hits where it brings in what the next token
  // chooses, and costs them where it evicts what that token wanted or spends the allowance a miss would
  // use — which wins depends on the file's routing. The run alternates epochs of guess_epoch decoded
  // tokens with the guess on and off (on, off, on, off; each measured after its first guess_warm_in
  // tokens), keeps it on unless the hit rate without it was higher by more than guess_margin (it was
  // higher with it on every file measured, docs/moe.md), and tries both again after guess_retrial
  // epochs — so a guess that does not pay for itself turns itself off.
  bool guessing() const { return r_.prefetch && (!r_.prefetch_on_trial || trial_.on_now); }
  static constexpr int64_t guess_epoch = 32, guess_warm_in = 8, guess_retrial = 16;
  static constexpr double guess_margin = 0.01;
  using guess_trial = on_off_trial;  // (its scores: the hit rates with the guess and without)
  const guess_trial& guess_trials() const { return trial_; }

  struct counts {
    int64_t lookups = 0, hits = 0;       // experts routed, and of those held by a slot when routed
    int64_t uploads = 0, prefetched = 0; // experts uploaded (prefetched: of those, guessed a layer early)
    int64_t streamed = 0;                // of those, a prompt batch's cold experts uploaded to be computed there
    uint64_t upload_bytes = 0;
    std::vector<int64_t> layer_lookups, layer_hits, layer_uploads;
  };
  const counts& counted() const { return counts_; }

 private:
  struct pending {
    devices::event done;
    std::shared_ptr<std::vector<uint8_t>> staging;
  };
  void copy_expert(int64_t layer, int32_t e, int32_t slot);
  bool take_in(int64_t layer, int32_t e, std::span<const int32_t> keep, bool charged);
  // Uploads timed on the device's queue: a mark before an expert's copies and one after.
  struct link_timing {
    std::mutex mu;
    std::chrono::steady_clock::time_point began;
    double seconds_per_byte = 0;  // a running average
  };
  std::shared_ptr<link_timing> link_ = std::make_shared<link_timing>();
  std::shared_ptr<const model> model_;
  expert_residency r_;
  std::shared_ptr<const device_layers> on_;
  std::shared_ptr<ram_tier> disk_;
  std::vector<std::shared_ptr<devices::buffer>> gate_, up_, down_;  // per layer: slots x rows
  std::vector<std::vector<int32_t>> slot_;       // per layer, per expert: its slot or -1
  std::vector<expert_slots> policy_;             // per layer
  std::vector<uint64_t> expert_bytes_;
  uint64_t bytes_ = 0;
  std::vector<double> credit_;  // per layer: bytes it may upload now
  double allowance_ = 0;        // of the step's allowance, what is left (a hard bound, whatever the credits)
  std::deque<pending> pending_;
  counts counts_;
  guess_trial trial_{{guess_epoch, guess_warm_in, guess_retrial, guess_margin, false}};
};

}  // namespace hotcold
