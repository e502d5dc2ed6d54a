#include "tools/loadgen/workload.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

namespace pdserve::loadgen {
namespace {

using ::testing::HasSubstr;

TEST(TraceLine, ParsesMooncakeFields) {
  absl::StatusOr<TraceEntry> e = ParseTraceLine(
      R"({"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 48]})",
      "t.jsonl", 1);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->timestamp_ms, 27482);
  EXPECT_EQ(e->input_length, 6955);
  EXPECT_EQ(e->output_length, 52);
  EXPECT_EQ(e->hash_ids, (std::vector<int64_t>{46, 47, 48}));
}

TEST(TraceLine, BadLinesNameFileLineAndProblem) {
  struct Case {
    const char* line;
    const char* message;
  };
  const Case cases[] = {
      {"{not json", "t.jsonl:7: not valid JSON"},
      {"[1, 2]", "t.jsonl:7: not a JSON object"},
      {R"({"input_length": 3, "output_length": 2})", "t.jsonl:7: missing \"timestamp\""},
      {R"({"timestamp": "soon", "input_length": 3, "output_length": 2})", "\"timestamp\""},
      {R"({"timestamp": 0, "output_length": 2})", "missing \"input_length\""},
      {R"({"timestamp": 0, "input_length": 3, "output_length": 0})",
       "\"output_length\" must be an integer ≥ 1, got 0"},
      {R"({"timestamp": 0, "input_length": 1.5, "output_length": 2})", "\"input_length\""},
      {R"({"timestamp": 0, "input_length": 3, "output_length": 2, "hash_ids": 4})",
       "\"hash_ids\" must be an array"},
      {R"({"timestamp": 0, "input_length": 3, "output_length": 2, "hash_ids": ["a"]})",
       "non-integer"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<TraceEntry> e = ParseTraceLine(c.line, "t.jsonl", 7);
    ASSERT_FALSE(e.ok()) << c.line;
    EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(e.status().message()), HasSubstr(c.message)) << c.line;
    EXPECT_THAT(std::string(e.status().message()), HasSubstr("t.jsonl:7:"));
  }
}

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = (std::filesystem::temp_directory_path() / name).string();
  std::ofstream(path) << text;
  return path;
}

TEST(ReadTrace, SkipsBlankLinesAndReportsTheBadLineNumber) {
  const std::string good = WriteTemp(
      "loadgen_good.jsonl",
      "{\"timestamp\": 0, \"input_length\": 4, \"output_length\": 2, \"hash_ids\": [1]}\n\n"
      "{\"timestamp\": 5, \"input_length\": 4, \"output_length\": 3}\r\n");
  absl::StatusOr<std::vector<TraceEntry>> trace = ReadTrace(good);
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_EQ(trace->size(), 2u);
  EXPECT_EQ((*trace)[1].output_length, 3);

  const std::string bad =
      WriteTemp("loadgen_bad.jsonl",
                "{\"timestamp\": 0, \"input_length\": 4, \"output_length\": 2}\n\n"
                "{\"timestamp\": 1, \"input_length\": -4, \"output_length\": 2}\n");
  trace = ReadTrace(bad);
  ASSERT_FALSE(trace.ok());
  EXPECT_THAT(std::string(trace.status().message()), HasSubstr(bad + ":3: \"input_length\""));

  trace = ReadTrace(WriteTemp("loadgen_empty.jsonl", "\n"));
  EXPECT_EQ(trace.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadTrace("/nonexistent/trace.jsonl").status().code(), absl::StatusCode::kNotFound);
  std::remove(good.c_str());
  std::remove(bad.c_str());
}

TEST(TracePrompt, RequestsSharingHashIdsSharePrefixBlocks) {
  const TraceEntry a{0, 1200, 4, {7, 8, 9}};
  const TraceEntry b{0, 700, 4, {7, 10}};
  const TraceEntry c{0, 600, 4, {11}};  // 88 tokens past its only block
  const std::vector<int> pa = TracePrompt(a, 512, 1, 0);
  const std::vector<int> pb = TracePrompt(b, 512, 1, 1);
  const std::vector<int> pc = TracePrompt(c, 512, 1, 2);
  ASSERT_EQ(pa.size(), 1200u);
  ASSERT_EQ(pb.size(), 700u);
  ASSERT_EQ(pc.size(), 600u);
  EXPECT_TRUE(std::equal(pa.begin(), pa.begin() + 512, pb.begin()));
  EXPECT_FALSE(std::equal(pa.begin() + 512, pa.begin() + 700, pb.begin() + 512));
  EXPECT_FALSE(std::equal(pa.begin(), pa.begin() + 512, pc.begin()));
  for (int t : pa) {
    ASSERT_GE(t, 3);
    ASSERT_LT(t, 512);
  }
  EXPECT_EQ(TracePrompt(a, 512, 1, 0), pa);  // deterministic
  EXPECT_NE(TracePrompt(a, 512, 2, 0), pa);  // seeded
}

TEST(TraceWorkload, ArrivalsFollowTimestampsOverSpeedup) {
  const std::vector<TraceEntry> trace = {{1000, 4, 2, {}}, {1500, 4, 3, {}}, {3000, 4, 2, {}}};
  const std::vector<RequestSpec> specs = TraceWorkload(trace, 512, 0, 2.0);
  ASSERT_EQ(specs.size(), 3u);
  EXPECT_DOUBLE_EQ(specs[0].arrival_s, 0);
  EXPECT_DOUBLE_EQ(specs[1].arrival_s, 0.25);
  EXPECT_DOUBLE_EQ(specs[2].arrival_s, 1.0);
  EXPECT_EQ(specs[1].output_tokens, 3);
}

TEST(SyntheticWorkload, LengthsStayInRangeAndAreSeeded) {
  const SyntheticOptions options{500, {10, 20}, {3, 3}, 64, 42};
  const std::vector<RequestSpec> specs = SyntheticWorkload(options);
  ASSERT_EQ(specs.size(), 500u);
  int lo = 100, hi = 0;
  for (const RequestSpec& s : specs) {
    lo = std::min(lo, static_cast<int>(s.prompt.size()));
    hi = std::max(hi, static_cast<int>(s.prompt.size()));
    EXPECT_EQ(s.output_tokens, 3);
    for (int t : s.prompt) {
      ASSERT_GE(t, 3);
      ASSERT_LT(t, 64);
    }
  }
  EXPECT_EQ(lo, 10);
  EXPECT_EQ(hi, 20);
  EXPECT_EQ(SyntheticWorkload(options)[17].prompt, specs[17].prompt);
  EXPECT_EQ(LengthSpec({5, 5}).Describe(), "5");
  EXPECT_EQ(LengthSpec({5, 9}).Describe(), "uniform[5,9]");
}

TEST(SyntheticWorkload, GroupsShareTheirPrefixAndNothingMore) {
  SyntheticOptions options{9, {40, 40}, {3, 3}, 512, 7};
  options.shared_prefix = 30;
  options.prefix_groups = 3;
  const std::vector<RequestSpec> specs = SyntheticWorkload(options);
  const auto prefix = [](const RequestSpec& s, size_t n) {
    return std::vector<int>(s.prompt.begin(), s.prompt.begin() + n);
  };
  for (const RequestSpec& s : specs) ASSERT_EQ(s.prompt.size(), 40u);
  EXPECT_EQ(prefix(specs[0], 30), prefix(specs[3], 30));  // group 0
  EXPECT_EQ(prefix(specs[1], 30), prefix(specs[7], 30));  // group 1
  EXPECT_NE(prefix(specs[0], 30), prefix(specs[1], 30));
  EXPECT_NE(specs[0].prompt, specs[3].prompt);  // each its own tail
  // Another seed (a sweep's next rate) keeps the prefixes of prefix_seed and draws new tails.
  SyntheticOptions next = options;
  next.seed = 8;
  const std::vector<RequestSpec> again = SyntheticWorkload(next);
  EXPECT_EQ(prefix(again[0], 30), prefix(specs[0], 30));
  EXPECT_NE(again[0].prompt, specs[0].prompt);
  // A prompt shorter than the prefix still gets one token of its own.
  options.prompt = {10, 10};
  for (const RequestSpec& s : SyntheticWorkload(options)) EXPECT_EQ(s.prompt.size(), 31u);
}

// Each turn's prompt extends the previous turn's exactly: the previous prompt, an answer of the
// previous output length, a new message; conversations differ, a seed reproduces them, and a
// shared prefix opens every conversation of its group.
TEST(ChatWorkload, TurnsExtendTheHistoryExactly) {
  ChatOptions o;
  o.conversations = 4;
  o.turns = 3;
  o.first = {20, 30};
  o.message = {5, 9};
  o.answer = {4, 6};
  o.vocab = 1000;
  o.seed = 7;
  o.shared_prefix = 16;
  o.prefix_groups = 2;
  o.prefix_seed = 99;
  const std::vector<RequestSpec> specs = ChatWorkload(o);
  ASSERT_EQ(specs.size(), 12u);
  for (size_t i = 0; i < specs.size(); ++i) {
    const RequestSpec& s = specs[i];
    EXPECT_EQ(s.index, static_cast<int>(i));
    EXPECT_EQ(s.conversation, static_cast<int>(i) / 3);
    EXPECT_EQ(s.turn, static_cast<int>(i) % 3);
    EXPECT_GE(s.output_tokens, 4);
    EXPECT_LE(s.output_tokens, 6);
    for (int t : s.prompt) {
      EXPECT_GE(t, 3);
      EXPECT_LT(t, 1000);
    }
    if (s.turn == 0) {
      EXPECT_GE(s.prompt.size(), 16u + 20u);
      EXPECT_LE(s.prompt.size(), 16u + 30u);
      continue;
    }
    const RequestSpec& previous = specs[i - 1];
    ASSERT_TRUE(std::equal(previous.prompt.begin(), previous.prompt.end(), s.prompt.begin()))
        << "turn " << s.turn << " of conversation " << s.conversation;
    const size_t added = s.prompt.size() - previous.prompt.size();
    EXPECT_GE(added, static_cast<size_t>(previous.output_tokens) + 5);
    EXPECT_LE(added, static_cast<size_t>(previous.output_tokens) + 9);
  }
  // Conversations 0 and 2 share group 0's prefix and nothing after it; 0 and 1 do not share it.
  auto common = [&](int a, int b) {
    const auto& x = specs[3 * a].prompt;
    const auto& y = specs[3 * b].prompt;
    return std::mismatch(x.begin(), x.end(), y.begin(), y.end()).first - x.begin();
  };
  EXPECT_EQ(common(0, 2), 16);
  EXPECT_LT(common(0, 1), 16);
  EXPECT_EQ(ChatWorkload(o)[7].prompt, specs[7].prompt);
  o.seed = 8;
  EXPECT_NE(ChatWorkload(o)[7].prompt, specs[7].prompt);
}

}  // namespace
}  // namespace pdserve::loadgen
