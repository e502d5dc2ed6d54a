#include "services/router/output_text.h"

#include "gtest/gtest.h"
#include "services/router/test_byte_tokenizer.h"

namespace pdserve {
namespace {

// Pushes each byte of `text` as a token; returns the released deltas joined by '|'.
std::string Deltas(OutputText& out, const std::string& text, bool* stopped = nullptr) {
  std::string joined;
  for (char c : text) {
    OutputText::Step step = out.Push(ByteTokenizer::Id(static_cast<unsigned char>(c)));
    joined += step.text + "|";
    if (step.stopped) {
      if (stopped != nullptr) *stopped = true;
      break;
    }
  }
  return joined;
}

TEST(OutputTextTest, NoStopStringsReleasesWholeCharacters) {
  ByteTokenizer tok;
  OutputText out(tok, 1, {});
  EXPECT_EQ(Deltas(out,
                   "a\xC3\xA9"
                   "b"),
            "a||\xC3\xA9|b|");
  EXPECT_EQ(out.Flush().text, "");
  EXPECT_EQ(out.released(),
            "a\xC3\xA9"
            "b");
}

TEST(OutputTextTest, HoldsBackAPossibleStopStringPrefix) {
  ByteTokenizer tok;
  OutputText out(tok, 1, {"END"});
  bool stopped = false;
  EXPECT_EQ(Deltas(out, "xENyENDz", &stopped), "x|||ENy||||");
  EXPECT_TRUE(stopped);
  EXPECT_EQ(out.released(), "xENy");
}

TEST(OutputTextTest, FlushReleasesAnUnmatchedPrefix) {
  ByteTokenizer tok;
  OutputText out(tok, 1, {"stop"});
  EXPECT_EQ(Deltas(out, "ab st"), "a|b| |||");
  OutputText::Step last = out.Flush();
  EXPECT_EQ(last.text, "st");
  EXPECT_FALSE(last.stopped);
  EXPECT_EQ(out.released(), "ab st");
}

TEST(OutputTextTest, EarliestOfSeveralStopStrings) {
  ByteTokenizer tok;
  OutputText out(tok, 1, {"cd", "bcx", "\n"});
  bool stopped = false;
  Deltas(out, "abcdef", &stopped);
  EXPECT_TRUE(stopped);
  EXPECT_EQ(out.released(), "ab");
}

TEST(OutputTextTest, MultiByteStopString) {
  ByteTokenizer tok;
  OutputText out(tok, 1, {"\xC3\xA9"});
  bool stopped = false;
  Deltas(out, "caf\xC3\xA9!", &stopped);
  EXPECT_TRUE(stopped);
  EXPECT_EQ(out.released(), "caf");
}

}  // namespace
}  // namespace pdserve
