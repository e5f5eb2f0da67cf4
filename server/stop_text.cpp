#include "server/stop_text.hpp"

#include <algorithm>

namespace hotcold::server {

stop_text::stop_text(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (const auto& s : stops_) longest_ = std::max(longest_, s.size());
}

bool stop_text::add(int64_t index, int32_t id, std::string_view piece, double ms, const sink& out) {
  if (stopped_) return false;
  // A new stop string can only end in the new piece: it begins at most longest - 1 bytes before it.
  const size_t search_from = text_.size() >= longest_ ? text_.size() - longest_ + 1 : 0;
  const size_t start = text_.size();
  text_ += piece;
  held_.push_back({index, id, start, text_.size(), ms});
  size_t cut = std::string::npos;
  for (const auto& s : stops_)
    if (auto at = text_.find(s, std::min(search_from, text_.size())); at != std::string::npos) cut = std::min(cut, at);
  if (cut != std::string::npos) {
    text_.resize(cut);
    stopped_ = true;
    release(text_.size(), out);
    return true;
  }
  // Released up to where the text could still be the beginning of a stop string.
  size_t safe = text_.size();
  for (const auto& s : stops_)
    for (size_t k = std::min(s.size() - 1, text_.size()); k > 0; --k)
      if (text_.compare(text_.size() - k, k, s, 0, k) == 0) {
        safe = std::min(safe, text_.size() - k);
        break;
      }
  release(safe, out);
  return false;
}

// The held-back tokens whose text ends by `upto`; after a stop string, those that begin before it
// (the last one cut there), and the rest are dropped.
void stop_text::release(size_t upto, const sink& out) {
  size_t n = 0;
  for (; n < held_.size(); ++n) {
    const held& h = held_[n];
    if (stopped_ ? h.start >= upto : h.end > upto) break;
    const size_t end = std::min(h.end, upto);
    out({h.index, h.id, std::string_view(text_).substr(h.start, end - h.start), h.ms});
  }
  held_.erase(held_.begin(), stopped_ ? held_.end() : held_.begin() + static_cast<std::ptrdiff_t>(n));
}

}  // namespace hotcold::server
