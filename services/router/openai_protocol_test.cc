#include "services/router/openai_protocol.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/router/plain_chat_template.h"

namespace pdserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const OpenAiLimits kLimits{"stories260K", 512, nullptr, absl::OkStatus()};

OpenAiRequest Parse(OpenAiEndpoint endpoint, const std::string& body) {
  OpenAiRequest request;
  auto error = ParseOpenAiRequest(endpoint, body, kLimits, &request);
  EXPECT_FALSE(error.has_value()) << body << " → " << error->message;
  return request;
}

OpenAiError ParseError(OpenAiEndpoint endpoint, const std::string& body) {
  OpenAiRequest request;
  auto error = ParseOpenAiRequest(endpoint, body, kLimits, &request);
  EXPECT_TRUE(error.has_value()) << body;
  return error.value_or(OpenAiError{});
}

constexpr OpenAiEndpoint kCompletions = OpenAiEndpoint::kCompletions;
constexpr OpenAiEndpoint kChat = OpenAiEndpoint::kChatCompletions;

TEST(OpenAiProtocolTest, CompletionWithEveryParameter) {
  const OpenAiRequest r = Parse(kCompletions, R"({
    "model": "stories260K", "prompt": "Once upon", "max_tokens": 20, "temperature": 0.5,
    "top_p": 0.9, "top_k": 40, "seed": 7, "stop": ["\n", "The end"], "stream": true,
    "stream_options": {"include_usage": true}, "n": 1, "echo": false, "logprobs": null,
    "best_of": 1, "suffix": null, "ignore_eos": true, "user": "someone", "unknown": [1]})");
  EXPECT_EQ(r.generate.text(), "Once upon");
  EXPECT_EQ(r.generate.max_tokens(), 20);
  EXPECT_FLOAT_EQ(r.generate.sampling().temperature(), 0.5f);
  EXPECT_FLOAT_EQ(r.generate.sampling().top_p(), 0.9f);
  EXPECT_EQ(r.generate.sampling().top_k(), 40);
  EXPECT_EQ(r.generate.sampling().seed(), 7u);
  EXPECT_THAT(r.generate.stop().stop_strings(), ElementsAre("\n", "The end"));
  EXPECT_TRUE(r.generate.stop().ignore_eos());
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
}

TEST(OpenAiProtocolTest, CompletionDefaults) {
  const OpenAiRequest r = Parse(kCompletions, R"({"prompt": "x"})");
  EXPECT_EQ(r.generate.max_tokens(), kDefaultCompletionMaxTokens);
  EXPECT_FLOAT_EQ(r.generate.sampling().temperature(), 1.0f);  // OpenAI's default
  EXPECT_FLOAT_EQ(r.generate.sampling().top_p(), 0.0f);        // unset on the wire
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.max_tokens_is_default);
  EXPECT_EQ(r.generate.stop().stop_strings_size(), 0);
}

TEST(OpenAiProtocolTest, PromptForms) {
  EXPECT_THAT(Parse(kCompletions, R"({"prompt": [1, 2, 3]})").generate.token_ids().ids(),
              ElementsAre(1, 2, 3));
  EXPECT_THAT(Parse(kCompletions, R"({"prompt": [[4, 5]]})").generate.token_ids().ids(),
              ElementsAre(4, 5));
  EXPECT_EQ(Parse(kCompletions, R"({"prompt": ["one"]})").generate.text(), "one");
  EXPECT_EQ(
      Parse(kCompletions, R"({"prompt": "x", "stop": "END"})").generate.stop().stop_strings(0),
      "END");

  OpenAiError e = ParseError(kCompletions, R"({"prompt": ["a", "b"]})");
  EXPECT_THAT(e.message, HasSubstr("batched prompts are not supported"));
  EXPECT_EQ(e.param, "prompt");
  EXPECT_THAT(ParseError(kCompletions, R"({"prompt": [[1], [2]]})").message, HasSubstr("batched"));
  EXPECT_EQ(ParseError(kCompletions, R"({"prompt": [1, "a"]})").param, "prompt[1]");
  EXPECT_EQ(ParseError(kCompletions, R"({"prompt": [-1]})").param, "prompt[0]");
  EXPECT_EQ(ParseError(kCompletions, R"({"prompt": []})").param, "prompt");
  EXPECT_EQ(ParseError(kCompletions, R"({"prompt": ""})").param, "prompt");
  EXPECT_EQ(ParseError(kCompletions, R"({"prompt": 5})").param, "prompt");
  EXPECT_EQ(ParseError(kCompletions, R"({"max_tokens": 5})").param, "prompt");
}

TEST(OpenAiProtocolTest, BadValuesNameTheParameter) {
  struct Case {
    const char* body;
    const char* param;
  };
  const Case cases[] = {
      {R"({"prompt": "x", "max_tokens": -1})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 0})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 513})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 1e300})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 99999999999999999999999})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 2.5})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": "16"})", "max_tokens"},
      {R"({"prompt": "x", "temperature": -0.1})", "temperature"},
      {R"({"prompt": "x", "temperature": 2.5})", "temperature"},
      {R"({"prompt": "x", "temperature": "hot"})", "temperature"},
      {R"({"prompt": "x", "top_p": 0})", "top_p"},
      {R"({"prompt": "x", "top_p": 1.5})", "top_p"},
      {R"({"prompt": "x", "top_k": -2})", "top_k"},
      {R"({"prompt": "x", "seed": 1.5})", "seed"},
      {R"({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]})", "stop"},
      {R"({"prompt": "x", "stop": [""]})", "stop"},
      {R"({"prompt": "x", "stop": 3})", "stop"},
      {R"({"prompt": "x", "stop": [3]})", "stop[0]"},
      {R"({"prompt": "x", "stream": "yes"})", "stream"},
      {R"({"prompt": "x", "stream_options": {"include_usage": true}})", "stream_options"},
      {R"({"prompt": "x", "stream": true, "stream_options": {"include_usage": 1}})",
       "stream_options.include_usage"},
      {R"({"prompt": "x", "n": 2})", "n"},
      {R"({"prompt": "x", "echo": true})", "echo"},
      {R"({"prompt": "x", "logprobs": 5})", "logprobs"},
      {R"({"prompt": "x", "best_of": 3})", "best_of"},
      {R"({"prompt": "x", "suffix": "end"})", "suffix"},
      {R"({"prompt": "x", "frequency_penalty": 0.5})", "frequency_penalty"},
      {R"({"prompt": "x", "ignore_eos": "no"})", "ignore_eos"},
      {R"({"prompt": "x", "model": 3})", "model"},
  };
  for (const Case& c : cases) {
    const OpenAiError e = ParseError(kCompletions, c.body);
    EXPECT_EQ(e.http_status, 400) << c.body;
    EXPECT_EQ(e.type, "invalid_request_error") << c.body;
    EXPECT_EQ(e.param, c.param) << c.body << " → " << e.message;
    EXPECT_THAT(e.message, HasSubstr(c.param)) << c.body;
  }
}

TEST(OpenAiProtocolTest, MalformedBodiesNeverThrow) {
  const std::string bodies[] = {
      "",
      "{",
      R"({"prompt": "abc)",
      "[1, 2]",
      "null",
      "42",
      "\"text\"",
      std::string("{\"prompt\": \"\xff\xfe\"}"),
      std::string("{\"prompt\": \"a\0b\"}", 16),
      std::string(100000, '['),
      R"({"messages": {}})",
  };
  for (const std::string& body : bodies) {
    for (OpenAiEndpoint endpoint : {kCompletions, kChat}) {
      const OpenAiError e = ParseError(endpoint, body);
      EXPECT_EQ(e.http_status, 400);
      EXPECT_FALSE(e.message.empty());
    }
  }
}

TEST(OpenAiProtocolTest, UnknownModelIs404) {
  const OpenAiError e = ParseError(kCompletions, R"({"model": "gpt-4", "prompt": "x"})");
  EXPECT_EQ(e.http_status, 404);
  EXPECT_EQ(e.code, "model_not_found");
  EXPECT_EQ(e.param, "model");
  EXPECT_THAT(e.message, HasSubstr("gpt-4"));
}

TEST(OpenAiProtocolTest, ChatMessagesUseTheTemplate) {
  const OpenAiRequest r = Parse(kChat, R"({"model": "stories260K", "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hello "}, {"type": "text", "text": "there"}]},
      {"role": "assistant", "content": null},
      {"role": "user", "content": "Go"}],
      "max_completion_tokens": 12, "temperature": 0})");
  EXPECT_EQ(r.generate.text(), "Be brief.\n\nUser: Hello there\nAssistant: \nUser: Go\nAssistant:");
  EXPECT_EQ(r.generate.max_tokens(), 12);
  EXPECT_FALSE(r.max_tokens_is_default);
  EXPECT_THAT(r.generate.stop().stop_strings(), ElementsAre(kPlainChatStopString));
}

TEST(OpenAiProtocolTest, ChatMessagesUseTheModelsOwnTemplate) {
  absl::StatusOr<ChatTemplate> chat = ChatTemplate::Create(
      "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{{ eos_token }}"
      "{% if m.role == 'assistant' and loop.last %}{{ raise_exception('ends with assistant') }}"
      "{% endif %}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}",
      "<s>", "</s>");
  ASSERT_TRUE(chat.ok()) << chat.status();
  OpenAiLimits limits = kLimits;
  limits.chat_template = &*chat;
  OpenAiRequest r;
  ASSERT_FALSE(ParseOpenAiRequest(kChat, R"({"messages": [{"role": "developer", "content": "Hi"},
      {"role": "user", "content": "Go"}], "stop": ["x"]})",
                                  limits, &r));
  EXPECT_EQ(r.generate.text(), "<s><|system|>Hi</s><|user|>Go</s><|assistant|>");
  EXPECT_TRUE(r.generate.text_has_special_tokens());
  EXPECT_THAT(r.generate.stop().stop_strings(), ElementsAre("x"));  // no plain-template stop

  std::optional<OpenAiError> refused = ParseOpenAiRequest(
      kChat, R"({"messages": [{"role": "assistant", "content": "Hi"}]})", limits, &r);
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->http_status, 400);
  EXPECT_EQ(refused->param, "messages");
  EXPECT_THAT(refused->message, HasSubstr("ends with assistant"));

  limits.chat_template = nullptr;
  limits.chat_template_error = absl::InvalidArgumentError("{% macro %} is not supported");
  refused =
      ParseOpenAiRequest(kChat, R"({"messages": [{"role": "user", "content": "Hi"}]})", limits, &r);
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->http_status, 500);
  EXPECT_THAT(refused->message, HasSubstr("macro"));
}

TEST(OpenAiProtocolTest, ChatWithoutMaxTokensAsksForTheContext) {
  const OpenAiRequest r = Parse(kChat, R"({"messages": [{"role": "user", "content": "x"}]})");
  EXPECT_TRUE(r.max_tokens_is_default);
  EXPECT_EQ(r.generate.max_tokens(), 511);
}

TEST(OpenAiProtocolTest, BadChatMessages) {
  EXPECT_EQ(ParseError(kChat, R"({"messages": []})").param, "messages");
  EXPECT_EQ(ParseError(kChat, R"({"messages": "hi"})").param, "messages");
  EXPECT_EQ(ParseError(kChat, R"({"prompt": "hi"})").param, "messages");
  EXPECT_EQ(ParseError(kChat, R"({"messages": [3]})").param, "messages[0]");
  EXPECT_EQ(ParseError(kChat, R"({"messages": [{"content": "x"}]})").param, "messages[0].role");
  EXPECT_EQ(ParseError(kChat, R"({"messages": [{"role": "tool", "content": "x"}]})").param,
            "messages[0].role");
  EXPECT_EQ(ParseError(kChat, R"({"messages": [{"role": "user"}]})").param, "messages[0].content");
  EXPECT_EQ(ParseError(kChat, R"({"messages": [{"role": "user", "content": 5}]})").param,
            "messages[0].content");
  EXPECT_EQ(
      ParseError(kChat, R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})")
          .param,
      "messages[0].content[0].type");
  EXPECT_EQ(ParseError(kChat, R"({"messages": [{"role": "user", "content": "x"}],
                                  "tools": [{"type": "function"}]})")
                .param,
            "tools");
  EXPECT_EQ(ParseError(kChat, R"({"messages": [{"role": "user", "content": "x"}],
                                  "max_tokens": -1})")
                .param,
            "max_tokens");
}

TEST(OpenAiProtocolTest, RouterErrorsMapToHttp) {
  struct Case {
    int grpc_code;
    int http;
  };
  for (const Case c : {Case{3, 400}, Case{8, 429}, Case{14, 503}, Case{4, 504}, Case{1, 499},
                       Case{13, 500}, Case{2, 500}}) {
    EXPECT_EQ(ErrorFromRouter(c.grpc_code, "m", kCompletions).http_status, c.http) << c.grpc_code;
  }
  EXPECT_EQ(ErrorFromRouter(3, "max_tokens = 600 must be in [1, 500]", kCompletions).param,
            "max_tokens");
  EXPECT_EQ(ErrorFromRouter(3, "prompt of 600 tokens leaves no room", kCompletions).param,
            "prompt");
  EXPECT_EQ(ErrorFromRouter(3, "prompt of 600 tokens leaves no room", kChat).param, "messages");
  EXPECT_EQ(ErrorFromRouter(3, "prompt token_ids[0] = 9999 is outside", kCompletions).param,
            "prompt");
  EXPECT_EQ(ErrorFromRouter(8, "busy", kCompletions).type, "rate_limit_error");
}

TEST(OpenAiProtocolTest, ResponseShapes) {
  ResponseIdentity identity{"cmpl-1", 1700000000, "stories260K"};
  v1::GenerateResponse::Final final;
  final.set_finish_reason(v1::FINISH_REASON_LENGTH);
  final.set_prompt_tokens(3);
  final.set_completion_tokens(4);
  EXPECT_EQ(DumpJson(CompletionResponse(kCompletions, identity, "abc", final)),
            R"({"id":"cmpl-1","object":"text_completion","created":1700000000,)"
            R"("model":"stories260K","choices":[{"index":0,"text":"abc","logprobs":null,)"
            R"("finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":4,)"
            R"("total_tokens":7,"prompt_tokens_details":{"cached_tokens":0}}})");
  final.set_finish_reason(v1::FINISH_REASON_STOP_STRING);
  const Json chat = CompletionResponse(kChat, identity, "hi", final);
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(chat["choices"][0]["message"]["content"], "hi");
  EXPECT_EQ(chat["choices"][0]["finish_reason"], "stop");

  const Json first = StreamChunk(kChat, identity, "", nullptr, /*first=*/true);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(DumpJson(first["choices"][0]["delta"]), R"({"role":"assistant","content":""})");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  const Json last = StreamChunk(kChat, identity, "", "stop", /*first=*/false);
  EXPECT_EQ(DumpJson(last["choices"][0]["delta"]), "{}");
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  const Json text = StreamChunk(kCompletions, identity, "de", nullptr, false);
  EXPECT_EQ(text["choices"][0]["text"], "de");
  const Json usage = UsageChunk(kCompletions, identity, final);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 7);
  EXPECT_EQ(SseEvent(Json{{"a", 1}}), "data: {\"a\":1}\n\n");
}

TEST(OpenAiProtocolTest, ErrorBodyIsOpenAiShaped) {
  OpenAiError error = InvalidRequest("max_tokens = -1 must be in [1, 512]", "max_tokens");
  EXPECT_EQ(DumpJson(ErrorBody(error)),
            R"({"error":{"message":"max_tokens = -1 must be in [1, 512]",)"
            R"("type":"invalid_request_error","param":"max_tokens","code":null}})");
}

TEST(OpenAiProtocolTest, IdsAreUniqueAndPrefixed) {
  const ResponseIdentity a = NewResponseIdentity(kCompletions, "m");
  const ResponseIdentity b = NewResponseIdentity(kChat, "m");
  EXPECT_THAT(a.id, ::testing::StartsWith("cmpl-"));
  EXPECT_THAT(b.id, ::testing::StartsWith("chatcmpl-"));
  EXPECT_NE(a.id, NewResponseIdentity(kCompletions, "m").id);
  EXPECT_GT(a.created, 1600000000);
}

TEST(OpenAiUsageTest, CountsTokensAndThePrefixCacheHits) {
  v1::GenerateResponse::Final final;
  final.set_prompt_tokens(100);
  final.set_completion_tokens(7);
  final.mutable_timings()->set_cached_prompt_tokens(96);
  const Json usage = UsageJson(final);
  EXPECT_EQ(usage["prompt_tokens"], 100);
  EXPECT_EQ(usage["completion_tokens"], 7);
  EXPECT_EQ(usage["total_tokens"], 107);
  EXPECT_EQ(usage["prompt_tokens_details"]["cached_tokens"], 96);
}

}  // namespace
}  // namespace pdserve
