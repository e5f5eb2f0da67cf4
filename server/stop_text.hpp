#pragma once
// A generation's text as its tokens arrive, cut where the first stop string begins. A token whose
// text could still turn out to be the beginning of a stop string is held back until the next tokens
// decide it; once a stop string appears, the tokens before it are released (the last one cut there)
// and the rest dropped.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace hotcold::server {

class stop_text {
 public:
  explicit stop_text(std::vector<std::string> stops = {});

  struct token {
    int64_t index;
    int32_t id;
    std::string_view text;  // its bytes of the text (valid during the callback)
    double ms;              // when it was sampled, after the request came
  };
  using sink = std::function<void(const token&)>;

  // Adds a token's text and hands `out` the tokens that can no longer begin a stop string. True when
  // a stop string appeared with it: the text ends where the stop string begins.
  bool add(int64_t index, int32_t id, std::string_view piece, double ms, const sink& out);
  // Hands `out` every token still held back (the generation has ended).
  void finish(const sink& out) { release(text_.size(), out); }

  const std::string& text() const { return text_; }
  bool stopped() const { return stopped_; }

 private:
  void release(size_t upto, const sink& out);
  struct held {
    int64_t index;
    int32_t id;
    size_t start, end;  // its bytes of text_
    double ms;
  };
  std::vector<std::string> stops_;
  size_t longest_ = 0;
  std::string text_;
  std::vector<held> held_;
  bool stopped_ = false;
};

}  // namespace hotcold::server
