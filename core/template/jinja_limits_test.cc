// Render budgets (jinja_limits.h): the templates a review found to crash, hang, leak or exhaust
// memory each fail with the limit they exceed; every limit is hit exactly (a template at the
// limit renders, one step, byte, element or level over fails); real chat templates render as
// Jinja2 renders them, under the defaults, also for a long conversation. Run under ASan/LSan: a
// reference cycle left behind or a recursion through a deep value fails the suite.
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/template/jinja_template.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace pdserve::jinja {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<std::string> RenderWith(std::string_view source, const RenderLimits& limits,
                                       const nlohmann::json& context = nlohmann::json::object()) {
  absl::StatusOr<Template> t = Template::Parse(source);
  if (!t.ok()) return t.status();
  return t->Render(Value::FromJson(context).AsObject(), limits);
}

absl::StatusOr<std::string> Render(std::string_view source,
                                   const nlohmann::json& context = nlohmann::json::object()) {
  return RenderWith(source, RenderLimits(), context);
}

// Expects `result` to fail with InvalidArgument naming `limit`, e.g. "max_steps (14)".
void ExpectLimit(const absl::StatusOr<std::string>& result, const std::string& limit) {
  ASSERT_FALSE(result.ok()) << "rendered " << result->size() << " bytes";
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), HasSubstr("render limit " + limit + " exceeded"));
}

std::string ReadTemplate(const std::string& name) {
  std::ifstream in(absl::StrCat(PDSERVE_SOURCE_DIR, "/tests/fuzz/corpus/jinja/", name, ".jinja"));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// ---------------------------------------------------------------------------------------------
// The reproducers.

TEST(JinjaLimitsTest, NamespaceInsideItselfPrintsAsPythonDoes) {
  EXPECT_EQ(*Render("{% set ns = namespace(a=1) %}{% set ns.a = ns %}{{ ns }}"), "{'a': {...}}");
  EXPECT_EQ(*Render("{% set ns = namespace(l=[]) %}{% set ns.l = [1, ns] %}{{ ns.l }} {{ ns }}"),
            "[1, {'l': [...]}] {'l': [1, {...}]}");
  EXPECT_EQ(*Render("{% set ns = namespace() %}{% set ns.a = ns %}{{ ns ~ '' }}|{{ [ns] | join }}|"
                    "{{ ns | string }}"),
            "{'a': {...}}|{'a': {...}}|{'a': {...}}");
}

TEST(JinjaLimitsTest, NamespaceInsideItselfFailsToJsonAndComparesOnlyWithItself) {
  const std::string cycle = "{% set ns = namespace(a=1) %}{% set ns.a = ns %}";
  const absl::StatusOr<std::string> json = Render(cycle + "{{ ns | tojson }}");
  ASSERT_FALSE(json.ok());
  EXPECT_EQ(json.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(json.status().message(), HasSubstr("tojson: circular reference"));
  EXPECT_EQ(*Render(cycle + "{{ ns == ns }} {{ ns.a == ns }} {{ ns in [ns] }}"), "True True True");
  const std::string two =
      "{% set a = namespace() %}{% set b = namespace() %}{% set a.x = a %}{% set b.x = b %}";
  ExpectLimit(Render(two + "{{ a == b }}"), "max_depth (100)");
  ExpectLimit(Render(two + "{{ a in [b] }}"), "max_depth (100)");
  ExpectLimit(Render(two + "{{ [a] | selectattr('x', 'eq', b) | list }}"), "max_depth (100)");
}

// A function in the context owns a sentinel; the template puts it in a reference cycle (a
// namespace holding itself, a list holding it, and one of its own bound methods). The cycle must
// be freed when the render ends, also when the render fails after making it.
TEST(JinjaLimitsTest, ReferenceCyclesAreFreedWhenTheRenderEnds) {
  for (const char* source :
       {"{% set ns = namespace(f=probe) %}{% set ns.self = ns %}{{ ns.f() }}",
        "{% set ns = namespace(f=probe) %}{% set ns.l = [ns, [ns]] %}{{ ns.f() }}",
        "{% set ns = namespace(f=probe) %}{% set ns.get = ns.get %}{{ ns.get('f')() }}",
        "{% set a = namespace(f=probe) %}{% set b = namespace(a=a) %}{% set a.b = b %}{{ a.f() }}",
        "{% set ns = namespace(f=probe) %}{% set ns.self = ns %}{{ raise_exception('no') }}"}) {
    SCOPED_TRACE(source);
    auto sentinel = std::make_shared<int>(7);
    const std::weak_ptr<int> watch = sentinel;
    {
      Object context;
      context.Set("probe", Value(Function([sentinel](const Arguments&) -> absl::StatusOr<Value> {
                    return Value(static_cast<int64_t>(*sentinel));
                  })));
      sentinel.reset();
      const absl::StatusOr<Template> t = Template::Parse(source);
      ASSERT_TRUE(t.ok()) << t.status();
      const absl::StatusOr<std::string> out = t->Render(context);
      if (out.ok()) {
        EXPECT_EQ(*out, "7");
      }
    }
    EXPECT_TRUE(watch.expired()) << "the cycle outlived the render";
  }
}

TEST(JinjaLimitsTest, OnlyTheRendersOwnNamespacesChange) {
  Object outside;
  outside.is_namespace = true;
  Object context;
  context.Set("ns", Value(std::move(outside)));
  const absl::StatusOr<Template> t = Template::Parse("{% set ns.a = ns %}");
  ASSERT_TRUE(t.ok());
  const absl::StatusOr<std::string> out = t->Render(context);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("not a namespace() of this template"));
}

// Freeing a list nested 100,000 deep, or a chain of 100,000 namespaces, would take about as many
// nested destructor calls: more than the stack holds.
TEST(JinjaLimitsTest, DeepValuesAreFreedWithoutRecursion) {
  EXPECT_EQ(*Render("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}"
                    "{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l | length }}"),
            "1");
  EXPECT_EQ(*Render("{% set ns = namespace(head=none) %}{% for i in range(100000) %}"
                    "{% set ns.head = namespace(next=ns.head) %}{% endfor %}{{ ns.head is none }}"),
            "False");
  ExpectLimit(Render("{% set ns = namespace(l=[]) %}{% for i in range(1000) %}"
                     "{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l }}"),
              "max_depth (100)");
}

TEST(JinjaLimitsTest, NestedLoopsStop) {
  ExpectLimit(Render("{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}"
                     "{% endfor %}"),
              "max_items (100000)");
  ExpectLimit(Render("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}"
                     "{% endfor %}"),
              "max_steps (1000000)");
  RenderLimits limits;
  limits.max_steps = 100'000;
  ExpectLimit(
      RenderWith("{% set xs = range(100000) %}{% for i in xs %}{% for j in xs %}{% endfor %}"
                 "{% endfor %}",
                 limits),
      "max_steps (100000)");
}

TEST(JinjaLimitsTest, RepeatedDoublingStops) {
  // As in Jinja, a {% set %} in a loop body sets a variable of that iteration: this doubles once
  // per iteration, not 64 times.
  EXPECT_EQ(*Render("{% set s = 'x' %}{% for i in range(64) %}{% set s = s ~ s %}{% endfor %}"
                    "{{ s }}"),
            "x");
  // A namespace carries the value from one iteration to the next.
  ExpectLimit(Render("{% set ns = namespace(s='x') %}{% for i in range(64) %}"
                     "{% set ns.s = ns.s ~ ns.s %}{% endfor %}"),
              "max_string_bytes (8388608)");
  ExpectLimit(Render("{% set ns = namespace(s='x') %}{% for i in range(64) %}"
                     "{% set ns.s = ns.s + ns.s %}{% endfor %}"),
              "max_string_bytes (8388608)");
  ExpectLimit(Render("{% set ns = namespace(l=[1]) %}{% for i in range(64) %}"
                     "{% set ns.l = ns.l + ns.l %}{% endfor %}"),
              "max_items (100000)");
  std::string unrolled = "{% set s = 'x' %}";
  for (int i = 0; i < 64; ++i) unrolled += "{% set s = s ~ s %}";
  ExpectLimit(Render(unrolled), "max_string_bytes (8388608)");
  // Many strings, each under the limit, are bounded by the work (and memory) they take to build.
  ExpectLimit(Render("{% set ns = namespace(l=[]) %}{% set s = 'x' * 4000000 %}"
                     "{% for i in range(100) %}{% set ns.l = ns.l + [s ~ i] %}{% endfor %}"),
              "max_work_bytes (67108864)");
}

// Operations linear in their operands, repeated: bounded by the work charged for each.
TEST(JinjaLimitsTest, RepeatedScansOfLargeValuesStop) {
  const std::string big = "{% set s = 'ab' * 4000000 %}";
  for (const char* scan :
       {"'ba' in s", "s.count('ab')", "s.find('c')", "s.split('c')", "s == s ~ ''",
        "s.startswith('a') and s.strip() and s | length", "s[::-1] | length", "s[7999999]"}) {
    SCOPED_TRACE(scan);
    ExpectLimit(Render(absl::StrCat(big, "{% for i in range(100000) %}{% if ", scan,
                                    " %}{% endif %}{% endfor %}")),
                "max_work_bytes (67108864)");
  }
  // A needle that std::string::find would compare at every position of the text.
  EXPECT_EQ(*Render("{{ ('a' * 3000000) ~ 'b' in ('a' * 6000000) }}"), "False");
}

TEST(JinjaLimitsTest, TemplatesCannotRecurse) {
  for (const char* source : {"{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}",
                             "{% for x in xs recursive %}{{ loop(x) }}{% endfor %}",
                             "{% include 'self' %}", "{% call m() %}{% endcall %}"}) {
    SCOPED_TRACE(source);
    const absl::StatusOr<Template> t = Template::Parse(source);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(t.status().message(), HasSubstr("not supported"));
  }
}

// ---------------------------------------------------------------------------------------------
// Each limit, exactly.

TEST(JinjaLimitsTest, MaxStepsIsExact) {
  // {% for %}, range(...), `range`, 10, and one step per iteration.
  RenderLimits limits;
  limits.max_steps = 14;
  EXPECT_EQ(*RenderWith("{% for i in range(10) %}{% endfor %}", limits), "");
  ExpectLimit(RenderWith("{% for i in range(11) %}{% endfor %}", limits), "max_steps (14)");
  limits.max_steps = 13;
  ExpectLimit(RenderWith("{% for i in range(10) %}{% endfor %}", limits), "max_steps (13)");
  // Each iteration, the iteration, the text, the output and `i`: 4 + 4 * 10.
  limits.max_steps = 44;
  EXPECT_EQ(*RenderWith("{% for i in range(10) %}-{{ i }}{% endfor %}", limits),
            "-0-1-2-3-4-5-6-7-8-9");
  limits.max_steps = 43;
  ExpectLimit(RenderWith("{% for i in range(10) %}-{{ i }}{% endfor %}", limits), "max_steps (43)");
}

TEST(JinjaLimitsTest, MaxOutputBytesIsExact) {
  RenderLimits limits;
  limits.max_output_bytes = 10;
  EXPECT_EQ(*RenderWith("{{ 'x' * 10 }}", limits), "xxxxxxxxxx");
  EXPECT_EQ(*RenderWith("abcde{% for i in range(5) %}{{ i }}{% endfor %}", limits), "abcde01234");
  ExpectLimit(RenderWith("{{ 'x' * 11 }}", limits), "max_output_bytes (10)");
  ExpectLimit(RenderWith("abcde{% for i in range(6) %}{{ i }}{% endfor %}", limits),
              "max_output_bytes (10)");
  ExpectLimit(RenderWith("{{ [1, 2, 3, 4] }}", limits), "max_output_bytes (10)");  // 12 bytes
}

TEST(JinjaLimitsTest, MaxStringBytesIsExact) {
  const nlohmann::json context = {{"s", "abc"}, {"xs", {"abc", "de", "f"}}};
  // Each builds a string of exactly 6 bytes.
  for (const char* source :
       {"{{ s ~ 'def' }}", "{{ s + 'def' }}", "{{ s * 2 }}", "{{ xs | join }}",
        "{{ s | replace('b', 'bbbb') }}", "{{ [1, 2] | tojson }}", "{{ [1] | tojson(indent=1) }}",
        "{{ [1, 2] | string }}", "{{ [1, 2] ~ '' }}", "{{ ('abc' ~ s)[::-1] }}"}) {
    SCOPED_TRACE(source);
    RenderLimits limits;
    limits.max_string_bytes = 6;
    const absl::StatusOr<std::string> at = RenderWith(source, limits, context);
    ASSERT_TRUE(at.ok()) << at.status();
    EXPECT_EQ(at->size(), 6u);
    limits.max_string_bytes = 5;
    ExpectLimit(RenderWith(source, limits, context), "max_string_bytes (5)");
  }
}

TEST(JinjaLimitsTest, MaxItemsIsExact) {
  // Each builds a list or mapping of exactly 5 elements.
  for (const char* source :
       {"{{ range(5) | length }}", "{{ ([1, 2] + [3, 4, 5]) | length }}",
        "{{ 'a b c d e'.split() | length }}", "{{ 'a,b,c,d,e'.split(',') | length }}",
        "{{ 'abcde' | list | length }}", "{{ [1, 2, 3, 4, 5] | length }}",
        "{{ {'a': 1, 'b': 2, 'c': 3, 'd': 4, 'e': 5}.items() | list | length }}",
        "{% for c in 'abcde' %}{% endfor %}"}) {
    SCOPED_TRACE(source);
    RenderLimits limits;
    limits.max_items = 5;
    const absl::StatusOr<std::string> at = RenderWith(source, limits);
    ASSERT_TRUE(at.ok()) << at.status();
    limits.max_items = 4;
    ExpectLimit(RenderWith(source, limits), "max_items (4)");
  }
}

TEST(JinjaLimitsTest, MaxDepthIsExact) {
  // Printing, tojson and == each descend 3 levels.
  for (const char* source :
       {"{{ [[{'a': 1}]] }}", "{{ [[{'a': 1}]] | tojson }}", "{{ [[{'a': 1}]] == [[{'a': 1}]] }}",
        "{{ [[{'a': 1}]] in [0, [[{'a': 1}]]] }}", "{{ [[[1]]] ~ '' }}"}) {
    SCOPED_TRACE(source);
    RenderLimits limits;
    limits.max_depth = 3;
    const absl::StatusOr<std::string> at = RenderWith(source, limits);
    ASSERT_TRUE(at.ok()) << at.status();
    limits.max_depth = 2;
    ExpectLimit(RenderWith(source, limits), "max_depth (2)");
  }
}

TEST(JinjaLimitsTest, MaxWorkBytesIsExact) {
  // s ~ s builds 200 bytes (printing a string is output, not work); `'b' in t` scans both
  // strings (1 + 100); range(3) builds 3 elements; [1, 2] | string builds the list (2 elements),
  // visits its 2 elements and builds 6 bytes.
  const nlohmann::json context = {{"s", std::string(100, 'a')}, {"t", std::string(100, 'a')}};
  const struct {
    const char* source;
    int64_t work;
  } kCases[] = {{"{{ s ~ s }}", 200},
                {"{% if 'b' in t %}{% endif %}", 101},
                {"{% for i in range(3) %}{% endfor %}", 3 * kWorkBytesPerItem},
                {"{% set t = [1, 2] | string %}", 4 * kWorkBytesPerItem + 6}};
  for (const auto& [source, work] : kCases) {
    SCOPED_TRACE(source);
    RenderLimits limits;
    limits.max_work_bytes = work;
    const absl::StatusOr<std::string> at = RenderWith(source, limits, context);
    ASSERT_TRUE(at.ok()) << at.status();
    limits.max_work_bytes = work - 1;
    ExpectLimit(RenderWith(source, limits, context),
                absl::StrCat("max_work_bytes (", work - 1, ")"));
  }
}

// ---------------------------------------------------------------------------------------------
// Real chat templates, as Jinja2 renders them (tests/tokenizers/render_chat_jinja2.py).

TEST(JinjaLimitsTest, RealChatTemplatesRenderAsJinja2Does) {
  const nlohmann::json alpacas = nlohmann::json::parse(R"([
      {"role": "system", "content": "  Answer briefly.\n"},
      {"role": "user", "content": "Name a llama 🦙 fact.  "},
      {"role": "assistant", "content": "Llamas hum.\n"},
      {"role": "user", "content": "And alpacas?"}])");
  EXPECT_EQ(*Render(ReadTemplate("llama3_1"), {{"messages", alpacas},
                                               {"add_generation_prompt", true},
                                               {"bos_token", "<|begin_of_text|>"},
                                               {"eos_token", "<|eot_id|>"}}),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nAnswer "
            "briefly.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nName a llama 🦙 "
            "fact.<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nLlamas "
            "hum.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnd "
            "alpacas?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(*Render(ReadTemplate("mistral"), {{"messages", alpacas},
                                              {"add_generation_prompt", true},
                                              {"bos_token", "<s>"},
                                              {"eos_token", "</s>"}}),
            "<s> [INST]   Answer briefly.\n\n\nName a llama 🦙 fact.   [/INST] Llamas hum.\n</s> "
            "[INST] And alpacas? [/INST]");
  // nlohmann::json sorts keys, so this tool lists them sorted (as Jinja2 was given them).
  const nlohmann::json tools = nlohmann::json::parse(R"({
      "tools": [{"function": {"description": "The weather in a city.", "name": "get_weather",
                              "parameters": {"properties": {"city": {"type": "string"}},
                                             "required": ["city"], "type": "object"}},
                 "type": "function"}],
      "messages": [{"role": "system", "content": "Be brief."},
                   {"role": "user", "content": "Weather in Paris?"},
                   {"role": "assistant", "content": "", "tool_calls": [{"function":
                       {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
                   {"role": "tool", "content": "18C, sunny"},
                   {"role": "assistant",
                    "content": "<think>\nThe tool says 18C.\n</think>\n\nIt is 18C and sunny."}],
      "add_generation_prompt": false, "bos_token": "", "eos_token": "<|im_end|>"})");
  EXPECT_EQ(
      *Render(ReadTemplate("qwen3"), tools),
      "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions to assist "
      "with the user query.\n\nYou are provided with function signatures within <tools></tools> "
      "XML tags:\n<tools>\n{\"function\": {\"description\": \"The weather in a city.\", \"name\": "
      "\"get_weather\", \"parameters\": {\"properties\": {\"city\": {\"type\": \"string\"}}, "
      "\"required\": [\"city\"], \"type\": \"object\"}}, \"type\": \"function\"}\n</tools>\n\n"
      "For each function call, return a json object with function name and arguments within "
      "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
      "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\nWeather in "
      "Paris?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", "
      "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n"
      "<tool_response>\n18C, sunny\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n"
      "The tool says 18C.\n</think>\n\nIt is 18C and sunny.<|im_end|>\n");
}

// 2,000 turns and 4 MiB of text (a million tokens): well inside the defaults.
TEST(JinjaLimitsTest, DefaultsFitLongConversations) {
  for (const char* name : {"qwen3", "llama3_1", "mistral"}) {
    SCOPED_TRACE(name);
    nlohmann::json messages = nlohmann::json::array();
    size_t text = 0;
    for (int i = 0; i < 2000; ++i) {
      const bool user = i % 2 == 0;
      std::string content = user ? "question " : "<think>\nthinking\n</think>\n\nanswer ";
      content += std::string(2048 - content.size(), user ? 'q' : 'a');
      text += content.size();
      messages.push_back({{"role", user ? "user" : "assistant"}, {"content", content}});
    }
    const absl::StatusOr<std::string> prompt =
        Render(ReadTemplate(name), {{"messages", messages},
                                    {"add_generation_prompt", true},
                                    {"bos_token", "<s>"},
                                    {"eos_token", "</s>"}});
    ASSERT_TRUE(prompt.ok()) << prompt.status();
    EXPECT_GT(prompt->size(), text / 2);  // qwen3 drops the earlier turns' thinking
  }
}

}  // namespace
}  // namespace pdserve::jinja
