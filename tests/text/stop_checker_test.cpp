#include <gtest/gtest.h>

#include "text/detokenizer/stop_checker.h"

using halo::text::StopChecker;

namespace {

struct Out {
  std::vector<std::string> released;
  std::string all;
};

Out run(StopChecker& c, const std::vector<std::string>& deltas) {
  Out o;
  for (const auto& d : deltas) {
    o.released.push_back(c.feed(d));
    o.all += o.released.back();
  }
  o.released.push_back(c.finish());
  o.all += o.released.back();
  return o;
}

}  // namespace

TEST(StopChecker, NoStopStringsPassesThrough) {
  StopChecker c({}, false);
  EXPECT_EQ(c.feed("hello "), "hello ");
  EXPECT_EQ(c.feed("world"), "world");
  EXPECT_EQ(c.finish(), "");
  EXPECT_FALSE(c.stopped());
}

TEST(StopChecker, EmptyStopStringIsIgnored) {
  StopChecker c({""}, false);
  EXPECT_EQ(c.feed("abc"), "abc");
  EXPECT_FALSE(c.stopped());
}

TEST(StopChecker, StopInsideOneDelta) {
  StopChecker c({"STOP"}, false);
  EXPECT_EQ(c.feed("abc STOP def"), "abc ");
  EXPECT_TRUE(c.stopped());
  EXPECT_EQ(c.stop_string(), "STOP");
  EXPECT_EQ(c.feed("more"), "");
  EXPECT_EQ(c.finish(), "");
}

TEST(StopChecker, IncludeStopString) {
  StopChecker c({"STOP"}, true);
  EXPECT_EQ(c.feed("abc STOP def"), "abc STOP");
  EXPECT_TRUE(c.stopped());
}

TEST(StopChecker, StopSpanningDeltasIsHeldBack) {
  StopChecker c({"</answer>"}, false);
  EXPECT_EQ(c.feed("The result is 4"), "The result is 4");
  EXPECT_EQ(c.feed("</"), "");
  EXPECT_EQ(c.held_back(), 2u);
  EXPECT_EQ(c.feed("ans"), "");
  EXPECT_EQ(c.feed("wer"), "");
  EXPECT_EQ(c.feed(">tail"), "");
  EXPECT_TRUE(c.stopped());
  EXPECT_EQ(c.finish(), "");
}

TEST(StopChecker, FalseStartIsReleased) {
  StopChecker c({"</answer>"}, false);
  EXPECT_EQ(c.feed("a</an"), "a");
  EXPECT_EQ(c.feed("d more"), "</and more");
  EXPECT_FALSE(c.stopped());
  EXPECT_EQ(c.feed("</"), "");
  EXPECT_EQ(c.finish(), "</");  // end of generation: the held text was not a stop
}

TEST(StopChecker, OverlappingPrefixes) {
  // "aab" inside "aaab": the held "aa" must keep the right suffix.
  StopChecker c({"aab"}, false);
  Out o = run(c, {"x", "a", "a", "a", "b", "y"});
  EXPECT_TRUE(c.stopped());
  EXPECT_EQ(o.all, "xa");
  StopChecker c2({"abab"}, true);
  o = run(c2, {"ab", "ab", "ab"});
  EXPECT_EQ(o.all, "abab");
}

TEST(StopChecker, EarliestCompletingStopWins) {
  StopChecker c({"world", "lo w"}, false);
  EXPECT_EQ(c.feed("hello world"), "hel");
  EXPECT_EQ(c.stop_index(), 1u);
  // Same text in other chunkings gives the same result.
  for (const std::vector<std::string>& chunks : std::vector<std::vector<std::string>>{
           {"h", "e", "l", "l", "o", " ", "w", "o", "r", "l", "d"}, {"hello w", "orld"}, {"hello world"}}) {
    StopChecker k({"world", "lo w"}, false);
    EXPECT_EQ(run(k, chunks).all, "hel");
    EXPECT_EQ(k.stop_index(), 1u);
  }
  // Same end: the longer (earlier starting) one.
  StopChecker t({"cd", "bcd"}, false);
  EXPECT_EQ(t.feed("abcde"), "a");
  EXPECT_EQ(t.stop_string(), "bcd");
}

TEST(StopChecker, UnicodeStops) {
  StopChecker c({"。", "🛑"}, false);
  EXPECT_EQ(c.feed("你好"), "你好");
  // U+3002 is E3 80 82; streamed text is whole characters, the stop still spans deltas.
  EXPECT_EQ(c.feed("世界"), "世界");
  EXPECT_EQ(c.feed("。再见"), "");
  EXPECT_TRUE(c.stopped());
  StopChecker e({"🛑 end"}, true);
  EXPECT_EQ(e.feed("go 🛑"), "go ");
  EXPECT_EQ(e.feed(" end!"), "🛑 end");
}

TEST(StopChecker, NothingAfterStopIsReleased) {
  StopChecker c({"\n\n"}, false);
  Out o = run(c, {"line1\n", "\nline2", "line3"});
  EXPECT_EQ(o.all, "line1");
  EXPECT_TRUE(c.stopped());
}
