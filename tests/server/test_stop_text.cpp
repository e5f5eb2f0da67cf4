// The stop-string hold-back of serve's token stream, token by token.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/stop_text.hpp"

using hotcold::server::stop_text;

namespace {

struct collected {
  std::vector<std::string> texts;
  std::vector<int64_t> indexes;
  stop_text::sink sink() {
    return [this](const stop_text::token& t) {
      texts.emplace_back(t.text);
      indexes.push_back(t.index);
    };
  }
};

}  // namespace

TEST(StopText, HoldsBackWhatCouldBeginAStopStringAndCutsWhereItBegins) {
  stop_text s({"END", "\n\n"});
  collected c;
  EXPECT_FALSE(s.add(0, 10, "Hello", 1, c.sink()));
  EXPECT_EQ(c.texts, (std::vector<std::string>{"Hello"}));
  EXPECT_FALSE(s.add(1, 11, " E", 2, c.sink()));  // " E" could begin "END": held
  EXPECT_EQ(c.texts.size(), 1u);
  EXPECT_FALSE(s.add(2, 12, "x", 3, c.sink()));   // " Ex" cannot: both go
  EXPECT_EQ(c.texts, (std::vector<std::string>{"Hello", " E", "x"}));
  EXPECT_FALSE(s.add(3, 13, " E", 4, c.sink()));
  EXPECT_TRUE(s.add(4, 14, "ND and more", 5, c.sink()));  // the stop string spans two tokens
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.text(), "Hello Ex ");
  // The token where it begins goes out cut there; the one after is dropped.
  EXPECT_EQ(c.texts, (std::vector<std::string>{"Hello", " E", "x", " "}));
  EXPECT_EQ(c.indexes, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_FALSE(s.add(5, 15, "late", 6, c.sink()));  // nothing after a stop
  s.finish(c.sink());
  EXPECT_EQ(c.texts.size(), 4u);
}

TEST(StopText, FinishReleasesWhatWasHeld) {
  stop_text s({"</s>"});
  collected c;
  EXPECT_FALSE(s.add(0, 1, "a<", 1, c.sink()));
  EXPECT_EQ(c.texts, (std::vector<std::string>{}));  // "<" could begin "</s>"
  EXPECT_FALSE(s.add(1, 2, "/", 2, c.sink()));
  EXPECT_TRUE(c.texts.empty());
  s.finish(c.sink());
  EXPECT_EQ(c.texts, (std::vector<std::string>{"a<", "/"}));
  EXPECT_FALSE(s.stopped());
  EXPECT_EQ(s.text(), "a</");
}

TEST(StopText, NoStopsSendsEachTokenAtOnce) {
  stop_text s;
  collected c;
  EXPECT_FALSE(s.add(0, 1, "x", 1, c.sink()));
  EXPECT_FALSE(s.add(1, 2, "y", 1, c.sink()));
  EXPECT_EQ(c.texts, (std::vector<std::string>{"x", "y"}));
}
