#include "services/router/request_validation.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/router/test_byte_tokenizer.h"

namespace pdserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class RequestValidationTest : public ::testing::Test {
 protected:
  RequestValidationTest() {
    limits_.tokenizer = &tokenizer_;
    limits_.max_context = 16;
    limits_.vocab_size = ByteTokenizer::kVocab;
  }
  v1::GenerateRequest Text(const std::string& text, int max_tokens = 4) {
    v1::GenerateRequest r;
    r.set_text(text);
    r.set_max_tokens(max_tokens);
    return r;
  }
  v1::GenerateRequest Ids(std::initializer_list<int> ids, int max_tokens = 4) {
    v1::GenerateRequest r;
    for (int id : ids) r.mutable_token_ids()->add_ids(id);
    r.set_max_tokens(max_tokens);
    return r;
  }
  // The INVALID_ARGUMENT message, or "OK" / another code's name.
  std::string Error(const v1::GenerateRequest& r) {
    auto v = ValidateGenerateRequest(r, limits_);
    if (v.ok()) return "OK";
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << v.status();
    return std::string(v.status().message());
  }

  ByteTokenizer tokenizer_;
  ValidationLimits limits_;
};

TEST_F(RequestValidationTest, ValidTextRequest) {
  v1::GenerateRequest r = Text("hi", 5);
  r.mutable_stop()->add_stop_token_ids(ByteTokenizer::Id('.'));
  r.mutable_stop()->add_stop_strings("END");
  auto v = ValidateGenerateRequest(r, limits_);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_THAT(v->prompt, ElementsAre(1, ByteTokenizer::Id('h'), ByteTokenizer::Id('i')));
  EXPECT_EQ(v->max_tokens, 5);
  EXPECT_EQ(v->sampling.top_p, 1.0f);  // 0 on the wire
  EXPECT_EQ(v->sampling.temperature, 0.0f);
  EXPECT_THAT(v->stop_token_ids, ElementsAre(ByteTokenizer::Id('.'), 2, 1));  // + EOS, BOS
  EXPECT_THAT(v->stop_strings, ElementsAre("END"));
}

TEST_F(RequestValidationTest, RenderedChatPromptsGetNoSecondBos) {
  v1::GenerateRequest r = Text("hi", 5);
  r.set_text_has_special_tokens(true);
  auto v = ValidateGenerateRequest(r, limits_);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_THAT(v->prompt, ElementsAre(ByteTokenizer::Id('h'), ByteTokenizer::Id('i')));
}

TEST_F(RequestValidationTest, ValidTokenRequestIgnoringEos) {
  v1::GenerateRequest r = Ids({5, 6, 7}, 13);  // 3 + 13 = 16 = the whole context
  r.mutable_stop()->set_ignore_eos(true);
  r.mutable_sampling()->set_temperature(0.7f);
  r.mutable_sampling()->set_top_p(0.9f);
  r.mutable_sampling()->set_top_k(40);
  r.mutable_sampling()->set_seed(3);
  auto v = ValidateGenerateRequest(r, limits_);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_THAT(v->prompt, ElementsAre(5, 6, 7));
  EXPECT_TRUE(v->stop_token_ids.empty());
  EXPECT_TRUE(v->ignore_eos);
  EXPECT_FLOAT_EQ(v->sampling.top_p, 0.9f);
  EXPECT_EQ(v->sampling.top_k, 40);
  EXPECT_EQ(v->sampling.seed, 3u);
}

TEST_F(RequestValidationTest, EmptyPrompt) {
  v1::GenerateRequest none;
  none.set_max_tokens(1);
  EXPECT_THAT(Error(none), HasSubstr("empty prompt"));
  EXPECT_THAT(Error(Text("")), HasSubstr("empty prompt"));
  EXPECT_THAT(Error(Ids({})), HasSubstr("empty prompt"));
}

TEST_F(RequestValidationTest, InvalidUtf8Text) {
  EXPECT_THAT(Error(Text("ok \xC3")), HasSubstr("not valid UTF-8 (byte offset 3)"));
  EXPECT_THAT(Error(Text("\xC0\xAF")), HasSubstr("not valid UTF-8"));          // overlong '/'
  EXPECT_THAT(Error(Text("\xED\xA0\x80")), HasSubstr("not valid UTF-8"));      // surrogate
  EXPECT_THAT(Error(Text("\xF4\x90\x80\x80")), HasSubstr("not valid UTF-8"));  // > U+10FFFF
  EXPECT_EQ(Error(Text("caf\xC3\xA9 \xF0\x9F\x99\x82", 1)), "OK");
}

TEST_F(RequestValidationTest, Utf8Checker) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ascii"));
  EXPECT_TRUE(IsValidUtf8("\xC2\x80"));           // U+0080
  EXPECT_TRUE(IsValidUtf8("\xE0\xA0\x80"));       // U+0800
  EXPECT_TRUE(IsValidUtf8("\xED\x9F\xBF"));       // U+D7FF
  EXPECT_TRUE(IsValidUtf8("\xEE\x80\x80"));       // U+E000
  EXPECT_TRUE(IsValidUtf8("\xF0\x90\x80\x80"));   // U+10000
  EXPECT_TRUE(IsValidUtf8("\xF4\x8F\xBF\xBF"));   // U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\x80"));              // lone continuation
  EXPECT_FALSE(IsValidUtf8("\xC1\xBF"));          // overlong 2-byte
  EXPECT_FALSE(IsValidUtf8("\xE0\x9F\xBF"));      // overlong 3-byte
  EXPECT_FALSE(IsValidUtf8("\xF0\x8F\xBF\xBF"));  // overlong 4-byte
  EXPECT_FALSE(IsValidUtf8("\xED\xBF\xBF"));      // surrogate U+DFFF
  EXPECT_FALSE(IsValidUtf8("\xF8\x88\x80\x80\x80"));
  EXPECT_FALSE(IsValidUtf8("\xFF"));
  EXPECT_FALSE(IsValidUtf8("\xE2\x82"));      // truncated
  EXPECT_FALSE(IsValidUtf8("\xE2\x28\xA1"));  // bad continuation
  size_t offset = 0;
  EXPECT_FALSE(IsValidUtf8("abc\xFF", &offset));
  EXPECT_EQ(offset, 3u);
}

TEST_F(RequestValidationTest, PromptTooLongForContext) {
  // Text gets BOS: 15 bytes + BOS = 16 tokens, no room left.
  EXPECT_THAT(Error(Text(std::string(15, 'a'), 1)), HasSubstr("leaves no room"));
  EXPECT_EQ(Error(Text(std::string(14, 'a'), 1)), "OK");
  EXPECT_THAT(Error(Ids({5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5}, 1)),
              HasSubstr("16 tokens leaves no room"));
}

TEST_F(RequestValidationTest, TokenIdsOutsideVocabulary) {
  EXPECT_THAT(Error(Ids({5, -1})), HasSubstr("token_ids[1] = -1 is outside the vocabulary"));
  EXPECT_THAT(Error(Ids({ByteTokenizer::kVocab})), HasSubstr("outside the vocabulary [0, 259)"));
  EXPECT_EQ(Error(Ids({0, ByteTokenizer::kVocab - 1})), "OK");
}

TEST_F(RequestValidationTest, MaxTokensRange) {
  EXPECT_THAT(Error(Ids({5, 6}, 0)), HasSubstr("max_tokens = 0 must be in [1, 14]"));
  EXPECT_THAT(Error(Ids({5, 6}, -3)), HasSubstr("max_tokens = -3"));
  EXPECT_THAT(Error(Ids({5, 6}, 15)), HasSubstr("max_tokens = 15 must be in [1, 14]"));
  EXPECT_EQ(Error(Ids({5, 6}, 14)), "OK");
}

TEST_F(RequestValidationTest, SamplingValues) {
  v1::GenerateRequest r = Ids({5});
  r.mutable_sampling()->set_temperature(-1.0f);
  EXPECT_THAT(Error(r), HasSubstr("sampling: "));
  EXPECT_THAT(Error(r), HasSubstr("temperature"));
  r.mutable_sampling()->set_temperature(std::numeric_limits<float>::quiet_NaN());
  EXPECT_THAT(Error(r), HasSubstr("temperature"));
  r.mutable_sampling()->set_temperature(1.0f);
  r.mutable_sampling()->set_top_p(1.5f);
  EXPECT_THAT(Error(r), HasSubstr("top_p"));
  r.mutable_sampling()->set_top_p(-0.5f);
  EXPECT_THAT(Error(r), HasSubstr("top_p"));
  r.mutable_sampling()->set_top_p(0.0f);
  r.mutable_sampling()->set_top_k(-2);
  EXPECT_THAT(Error(r), HasSubstr("top_k"));
}

TEST_F(RequestValidationTest, StopStrings) {
  v1::GenerateRequest r = Ids({5});
  r.mutable_stop()->add_stop_strings("x");
  r.mutable_stop()->add_stop_strings("");
  EXPECT_THAT(Error(r), HasSubstr("stop_strings[1] is empty"));
  v1::GenerateRequest many = Ids({5});
  for (int i = 0; i < 16; ++i) many.mutable_stop()->add_stop_strings("s");
  EXPECT_EQ(Error(many), "OK");
  many.mutable_stop()->add_stop_strings("s");
  EXPECT_THAT(Error(many), HasSubstr("17 stop strings; at most 16"));
  v1::GenerateRequest bad = Ids({5});
  bad.mutable_stop()->add_stop_strings("\xFF");
  EXPECT_THAT(Error(bad), HasSubstr("stop_strings[0] is not valid UTF-8"));
}

TEST_F(RequestValidationTest, StopTokenIds) {
  v1::GenerateRequest r = Ids({5});
  r.mutable_stop()->add_stop_token_ids(7);
  r.mutable_stop()->add_stop_token_ids(ByteTokenizer::kVocab);
  EXPECT_THAT(Error(r), HasSubstr("stop_token_ids[1] = 259 is outside the vocabulary"));
  v1::GenerateRequest negative = Ids({5});
  negative.mutable_stop()->add_stop_token_ids(-4);
  EXPECT_THAT(Error(negative), HasSubstr("stop_token_ids[0] = -4"));
  v1::GenerateRequest eos = Ids({5});
  eos.mutable_stop()->add_stop_token_ids(2);  // EOS given explicitly: not duplicated
  auto v = ValidateGenerateRequest(eos, limits_);
  ASSERT_TRUE(v.ok());
  EXPECT_THAT(v->stop_token_ids, ElementsAre(2, 1));  // and BOS added
}

}  // namespace
}  // namespace pdserve
