#pragma once
// Something a run may do or not (a guess read or uploaded ahead) whose worth depends on the file and
// the machine, tried both ways while the run goes and the better kept, so that what does not pay for
// itself turns itself off. Epochs of `epoch` decoded tokens alternate on, off, on, off, each measured
// after its first `warm` tokens (the state the other way left behind wears off) by a score the caller
// counts: the change of a running numerator over the change of a running denominator across the
// measured tokens (hits over lookups; tokens over seconds). After the four it stays on unless the
// score off was higher by more than `margin` (of the score on, where `relative`), and both are tried
// again after `retrial` epochs.
#include <cstdint>

namespace hotcold {

class on_off_trial {
 public:
  struct rules {
    int64_t epoch = 32, warm = 8, retrial = 16;
    double margin = 0.01;
    bool relative = false;
  };
  explicit on_off_trial(rules r) : r_(r) {}
  bool on() const { return on_now; }
  // A decoded token begins; num and den: the caller's running totals (they only grow).
  void token(double num, double den);

  // Where the trial stands (read by tests and figures).
  bool on_now = true;
  int64_t epoch = 0, tokens = 0;          // epochs since the cycle began, decoded tokens into this one
  double num0 = 0, den0 = 0;              // the totals when the epoch's measured part began
  double on_num = 0, on_den = 0, off_num = 0, off_den = 0;  // the cycle's trial epochs
  double on_score = -1, off_score = -1;   // the last trial's (-1: none yet)
  int64_t tokens_on = 0, tokens_off = 0;
  static constexpr int64_t trial_epochs = 4;

 private:
  rules r_;
};

inline void on_off_trial::token(double num, double den) {
  const auto count = [&] {
    (on_now ? tokens_on : tokens_off) += 1, tokens += 1;
    if (tokens == r_.warm) num0 = num, den0 = den;
  };
  if (tokens < r_.epoch) return count();
  // An epoch has ended: a trial epoch's measured part goes to its side; after the four, the choice.
  if (epoch < trial_epochs) (on_now ? on_num : off_num) += num - num0, (on_now ? on_den : off_den) += den - den0;
  ++epoch, tokens = 0;
  if (epoch < trial_epochs) {
    on_now = epoch % 2 == 0;
  } else if (epoch == trial_epochs) {
    on_score = on_den > 0 ? on_num / on_den : 0.0;
    off_score = off_den > 0 ? off_num / off_den : 0.0;
    on_now = !(off_score > on_score + r_.margin * (r_.relative ? on_score : 1.0));
  } else if (epoch == trial_epochs + r_.retrial) {  // a new cycle: both tried again
    epoch = 0, on_now = true;
    on_num = on_den = off_num = off_den = 0;
  }
  count();
}

}  // namespace hotcold
