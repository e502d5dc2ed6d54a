// The Jinja subset: each construct against what Jinja 3 (as Hugging Face configures it:
// trim_blocks, lstrip_blocks) renders. Real chat templates are checked against @lenml/tokenizers
// in tests/tokenizers.
#include "core/template/jinja_template.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace pdserve::jinja {
namespace {

std::string Render(std::string_view source,
                   const nlohmann::json& context = nlohmann::json::object()) {
  absl::StatusOr<Template> t = Template::Parse(source);
  if (!t.ok()) return "PARSE ERROR: " + std::string(t.status().message());
  absl::StatusOr<std::string> out = t->Render(Value::FromJson(context).AsObject());
  if (!out.ok()) return "RENDER ERROR: " + std::string(out.status().message());
  return *out;
}

TEST(JinjaTest, TextAndOutput) {
  EXPECT_EQ(Render("a {{ x }} b", {{"x", 1}}), "a 1 b");
  EXPECT_EQ(Render("{{ 'it''s' }}{{ \"q\\n\" }}"),
            "its"
            "q\n");
  EXPECT_EQ(Render("{{ none }} {{ true }} {{ 2.5 }} {{ 3.0 }} {{ [1, 'a'] }} {{ missing }}."),
            "None True 2.5 3.0 [1, 'a'] .");
  EXPECT_EQ(Render("{# comment #}x"), "x");
}

TEST(JinjaTest, WhitespaceControlAndBlockTrimming) {
  EXPECT_EQ(Render("a  {{- 'b' -}}  c"), "abc");
  EXPECT_EQ(Render("{% if true %}\nyes\n{% endif %}\nafter"), "yes\nafter");
  EXPECT_EQ(Render("line\n    {% if true %}x{% endif %}\n"), "line\nx");
  EXPECT_EQ(Render("  {%+ if true %}x{% endif %}"), "  x");
  EXPECT_EQ(Render("a\n{%- if true -%}\n\n  b{% endif %}"), "ab");
  EXPECT_EQ(Render("{{ 'x' }}\n{{ 'y' }}"), "x\ny");  // no trimming after expressions
}

TEST(JinjaTest, Conditionals) {
  const char* t = "{% if n > 2 %}big{% elif n == 2 %}two{% else %}small{% endif %}";
  EXPECT_EQ(Render(t, {{"n", 3}}), "big");
  EXPECT_EQ(Render(t, {{"n", 2}}), "two");
  EXPECT_EQ(Render(t, {{"n", 1}}), "small");
  EXPECT_EQ(Render("{{ 'y' if a and not b else 'n' }}", {{"a", 1}, {"b", 0}}), "y");
  EXPECT_EQ(Render("{{ a or 'default' }}", {{"a", ""}}), "default");
  EXPECT_EQ(Render("{{ 'x' if false }}."), ".");
}

TEST(JinjaTest, LoopsAndTheLoopVariable) {
  EXPECT_EQ(Render("{% for x in xs %}{{ loop.index }}{{ x }}{% if not loop.last %},{% endif %}"
                   "{% endfor %}",
                   {{"xs", {"a", "b", "c"}}}),
            "1a,2b,3c");
  EXPECT_EQ(Render("{% for x in xs if x > 1 %}{{ loop.index0 }}/{{ loop.length }}:{{ x }} "
                   "{% endfor %}",
                   {{"xs", {1, 2, 3}}}),
            "0/2:2 1/2:3 ");
  EXPECT_EQ(Render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(Render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
                   {{"d", {{"a", 1}, {"b", 2}}}}),
            "a=1;b=2;");
  EXPECT_EQ(Render("{% for x in range(10) %}{% if x == 3 %}{% break %}{% endif %}"
                   "{% if x is odd %}{% continue %}{% endif %}{{ x }}{% endfor %}"),
            "02");
  EXPECT_EQ(Render("{% for c in 'añb' %}[{{ c }}]{% endfor %}"), "[a][ñ][b]");
}

TEST(JinjaTest, ScopesAndNamespaces) {
  EXPECT_EQ(Render("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}"), "1");
  EXPECT_EQ(Render("{% set ns = namespace(x=1) %}{% for i in [1, 2] %}{% set ns.x = ns.x + i %}"
                   "{% endfor %}{{ ns.x }}"),
            "4");
  EXPECT_EQ(Render("{% set a, b = [1, 2] %}{{ b }}{{ a }}"), "21");
  EXPECT_NE(Render("{% set x = 1 %}{% set x.y = 2 %}").find("not a namespace"), std::string::npos);
}

TEST(JinjaTest, ExpressionsFollowPython) {
  EXPECT_EQ(
      Render("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 * 3 + 1 }}"),
      "3 -4 1 2 3.5 7");
  EXPECT_EQ(Render("{{ 'a' ~ 1 ~ none }} {{ 'ab' * 2 }} {{ [1] + [2] }}"), "a1None abab [1, 2]");
  EXPECT_EQ(Render("{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [3] }}"),
            "True True True False");
  EXPECT_EQ(Render("{{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1, 2] == [1, 2] }}"), "True True True");
  EXPECT_EQ(Render("{{ xs[0] }}{{ xs[-1] }}{{ xs[::-1] }}{{ xs[1:] }}{{ 'hello'[1:3] }}{{ xs[9] }}",
                   {{"xs", {1, 2, 3}}}),
            "13[3, 2, 1][2, 3]el");
  EXPECT_EQ(
      Render("{{ m.role }} {{ m['role'] }} {{ m.nope is defined }}", {{"m", {{"role", "user"}}}}),
      "user user False");
}

TEST(JinjaTest, FiltersTestsAndMethods) {
  EXPECT_EQ(Render("{{ '  x  ' | trim }}|{{ xs | length }}|{{ xs | join(', ') }}|{{ xs | first }}",
                   {{"xs", {"a", "b"}}}),
            "x|2|a, b|a");
  EXPECT_EQ(Render("{{ d | tojson }}", {{"d", {{"a", {1, "é\n"}}, {"b", nullptr}}}}),
            "{\"a\": [1, \"é\\n\"], \"b\": null}");
  EXPECT_EQ(Render("{{ d | tojson(indent=2) }}", {{"d", {{"a", {1}}}}}),
            "{\n  \"a\": [\n    1\n  ]\n}");
  EXPECT_EQ(Render("{{ missing | default('d') }} {{ '' | default('e', true) }} {{ 'Ab' | upper }}"),
            "d e AB");
  EXPECT_EQ(Render("{{ ' a b '.strip() }}|{{ 'x\\n\\n'.rstrip('\\n') }}|{{ 'a,b'.split(',') }}|"
                   "{{ 'abc'.startswith('ab') }}|{{ 'a<t>b'.split('<t>')[-1] }}"),
            "a b|x|['a', 'b']|True|b");
  EXPECT_EQ(Render("{{ x is string }} {{ x is not none }} {{ n is number }} {{ n is even }} "
                   "{{ d is mapping }} {{ u is undefined }}",
                   {{"x", "s"}, {"n", 4}, {"d", nlohmann::json::object()}}),
            "True True True True True True");
  EXPECT_EQ(Render("{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='c') | list }}",
                   {{"ms", {{{"role", "user"}, {"c", 1}}, {{"role", "bot"}, {"c", 2}}}}}),
            "[1]");
  EXPECT_EQ(
      Render("{{ d.get('a') }} {{ d.get('z', 0) }} {{ d.keys() | list }}", {{"d", {{"a", 1}}}}),
      "1 0 ['a']");
}

// Substring search (linear-time, with borders for repeated prefixes) and indexing strings by code
// point, against Python.
TEST(JinjaTest, StringSearchAndCodePointIndexing) {
  EXPECT_EQ(
      Render("{{ 'aab' in 'aaab' }} {{ 'abcabcabd'.find('abcabd') }} {{ 'aaaa'.count('aa') }} "
             "{{ 'aaa'.replace('aa', 'b') }} {{ 'a--b----c'.split('--') }} "
             "{{ 'abababc'.find('ababc') }} {{ 'abc' in 'ab' }}"),
      "True 3 2 ba ['a', 'b', '', 'c'] 2 False");
  EXPECT_EQ(Render("{{ s[1] }} {{ s[::-1] }} {{ s[1:3] }} {{ s[-1] }} {{ s[::2] }} {{ s[::-2] }} "
                   "{{ s[0] }} {{ s[5:] }}. {{ s[-9:2] }} {{ s | first }}{{ s | last }} "
                   "{{ s | reverse }} {{ s[4] is defined }}",
                   {{"s", "añbç"}}),
            "ñ çbña ñb ç ab çñ a . añ aç çbña False");
}

TEST(JinjaTest, ErrorsNameTheLineAndConstruct) {
  EXPECT_NE(Render("x\n{{ raise_exception('roles must alternate') }}").find("line 2"),
            std::string::npos);
  EXPECT_NE(Render("{{ raise_exception('roles must alternate') }}").find("roles must alternate"),
            std::string::npos);
  EXPECT_NE(Render("{{ x | frobnicate }}").find("filter 'frobnicate'"), std::string::npos);
  EXPECT_NE(Render("{{ x is frob }}").find("test 'frob'"), std::string::npos);
  EXPECT_NE(Render("{% macro m() %}{% endmacro %}").find("{% macro %} is not supported"),
            std::string::npos);
  EXPECT_NE(Render("{% if x %}never closed").find("endif"), std::string::npos);
  EXPECT_NE(Render("{{ 1 + }}").find("PARSE ERROR"), std::string::npos);
  EXPECT_NE(Render("{{ 'a' + 1 }}").find("unsupported operand"), std::string::npos);
  EXPECT_NE(Render("{{ missing.attr }}").find("undefined value has no attribute"),
            std::string::npos);
  EXPECT_NE(Render("{{ 'x' * 100000000 }}").find("render limit max_string_bytes"),
            std::string::npos);
  EXPECT_NE(Render("{{ 'unclosed }}").find("PARSE ERROR"), std::string::npos);
  EXPECT_NE(Render("{{ 1 / 0 }}").find("division by zero"), std::string::npos);
  EXPECT_NE(Render("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}")
                .find("nest too deeply"),
            std::string::npos);
  EXPECT_NE(Render("{{ " + std::string(5000, '-') + "1 }}").find("nest too deeply"),
            std::string::npos);
  std::string blocks;
  for (int i = 0; i < 1000; ++i) blocks += "{% if true %}";
  EXPECT_NE(Render(blocks).find("nest too deeply"), std::string::npos);
}

}  // namespace
}  // namespace pdserve::jinja
