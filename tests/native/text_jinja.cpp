// text_jinja.cpp — the chat-template Jinja interpreter: Jinja2 semantics of each
// construct the real templates use (expected values are Python Jinja2's, with
// trim_blocks + lstrip_blocks as transformers sets them), and errors naming what is
// unsupported. The real Qwen3 / Llama-3 templates are compared with the reference
// renderer in text_real_vocab.cpp and tests/wasm/tokenizer-real.test.mjs.
#include <gtest/gtest.h>

#include "kernels/common.h"
#include "text/chat.h"
#include "text/jinja.h"

namespace {

using knot::jinja::Template;
using knot::jinja::Value;

std::string render(const std::string& src, const std::string& vars_json = "{}") {
  return Template(src).render(knot::jinja::from_json(vars_json, "vars"));
}

std::string error_of(const std::string& src, const std::string& vars_json = "{}") {
  try {
    render(src, vars_json);
  } catch (const knot::Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(TextJinja, TextAndOutput) {
  EXPECT_EQ(render("plain {text} 100% #"), "plain {text} 100% #");
  EXPECT_EQ(render("{{ 'a' + \"b\" ~ 1 }}"), "ab1");
  EXPECT_EQ(render("{{ x }}|{{ y }}", R"({"x": "v"})"), "v|");  // undefined prints nothing
  EXPECT_EQ(render("{{ none }} {{ true }} {{ 1.0 }} {{ 2.5e1 }} {{ [1, 'a'] }}"), "None True 1.0 25.0 [1, 'a']");
  EXPECT_EQ(render("{{ '\\n\\t\\'\\\\' }}"), "\n\t'\\");
  EXPECT_EQ(render("{# comment #}x{# another\nline #}"), "x");
}

TEST(TextJinja, WhitespaceControl) {
  EXPECT_EQ(render("a {{- ' b ' -}} c"), "a b c");
  EXPECT_EQ(render("a {%- if true -%} b {%- endif -%} c"), "abc");
  // trim_blocks: the newline after a block tag goes; lstrip_blocks: indentation before it
  EXPECT_EQ(render("  {% if true %}\n  x\n  {% endif %}\ny"), "  x\ny");
  EXPECT_EQ(render("{% for i in [1, 2] %}\n{{ i }}\n{% endfor %}\n"), "1\n2\n");
  EXPECT_EQ(render("x {% if true %}y{% endif %}"), "x y");  // not at line start: kept
  EXPECT_EQ(render("{{ 1 }}\n{{ 2 }}"), "1\n2");             // expressions never trim
  EXPECT_EQ(render("a\n  {#- c #}\nb"), "ab");
}

TEST(TextJinja, Conditionals) {
  const std::string t = "{% if x == 1 %}one{% elif x > 1 and not y %}big{% elif x is defined %}other{% else %}none{% endif %}";
  EXPECT_EQ(render(t, R"({"x": 1})"), "one");
  EXPECT_EQ(render(t, R"({"x": 5})"), "big");
  EXPECT_EQ(render(t, R"({"x": 5, "y": true})"), "other");
  EXPECT_EQ(render("{% if x %}a{% else %}none{% endif %}"), "none");
  EXPECT_NE(error_of("{{ x > 1 }}").find("cannot compare undefined"), std::string::npos);  // as Jinja2
  EXPECT_EQ(render("{{ 'a' if x else 'b' }}{{ 'c' if not x }}", R"({"x": 0})"), "bc");
  EXPECT_EQ(render("{{ 'x' in 'axb' }}{{ 2 in [1, 2] }}{{ 'k' in d }}{{ 3 not in [3] }}", R"({"d": {"k": 1}})"),
            "TrueTrueTrueFalse");
  EXPECT_EQ(render("{{ x is none }}{{ x is not none }}{{ s is string }}{{ f is false }}{{ n is number }}",
                   R"({"x": null, "s": "a", "f": false, "n": 2})"),
            "TrueFalseTrueTrueTrue");
}

TEST(TextJinja, LoopsAndScopes) {
  EXPECT_EQ(render("{% for m in ms %}{{ loop.index0 }}{{ loop.index }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
                   R"({"ms": ["a", "b"]})"),
            "01TrueFalse2;12FalseTrue2;");
  EXPECT_EQ(render("{% for x in xs if x > 1 %}{{ x }}{% else %}empty{% endfor %}", R"({"xs": [1, 2, 3]})"), "23");
  EXPECT_EQ(render("{% for x in [] %}{{ x }}{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}", R"({"d": {"b": 1, "a": 2}})"), "b=1,a=2,");
  EXPECT_EQ(render("{% for x in [1, 2, 3, 4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
            "13");
  // set inside a loop does not leak; a namespace carries state out
  EXPECT_EQ(render("{% set a = 1 %}{% for x in [5] %}{% set a = x %}{{ a }}{% endfor %}{{ a }}"), "51");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for x in [1, 2, 3] %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}"), "6");
  EXPECT_EQ(render("{% for m in ms[::-1] %}{{ m }}{% endfor %}|{{ ms[1:] }}|{{ ms[-1] }}|{{ ms[:-1] | length }}",
                   R"({"ms": ["a", "b", "c"]})"),
            "cba|['b', 'c']|c|2");
}

TEST(TextJinja, FiltersAndMethods) {
  EXPECT_EQ(render("{{ '  x  ' | trim }}|{{ ms | length - 1 }}|{{ 'Ab' | upper }}{{ 'Ab' | lower }}", R"({"ms": [1, 2]})"),
            "x|1|ABab");
  EXPECT_EQ(render("{{ 'a</t>b</t>c'.split('</t>')[-1] }}{{ '\\n\\nx\\n'.lstrip('\\n') }}{{ 'x\\n'.rstrip('\\n') }}|{{ ' p '.strip() }}"),
            "cx\nx|p");
  EXPECT_EQ(render("{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith('bc') }}{{ 'a-b'.replace('-', '+') }}{{ 'a b'.split() | length }}"),
            "TrueTruea+b2");
  EXPECT_EQ(render("{{ d | tojson }}", R"({"d": {"a": [1, 2.5, "\u00e9\n\"", null, true], "b": {}}})"),
            "{\"a\": [1, 2.5, \"\xC3\xA9\\n\\\"\", null, true], \"b\": {}}");
  EXPECT_EQ(render("{{ d | tojson(indent=2) }}", R"({"d": {"a": [1]}})"), "{\n  \"a\": [\n    1\n  ]\n}");
  EXPECT_EQ(render("{{ x | default('d') }}{{ [1, 2] | join('-') }}{{ ms | selectattr('r', 'equalto', 'u') | map(attribute='c') | join }}",
                   R"({"ms": [{"r": "u", "c": "1"}, {"r": "a", "c": "2"}, {"r": "u", "c": "3"}]})"),
            "d1-213");
  // select / reject (Llama-3.1's tool template: builtin_tools | reject('equalto', 'code_interpreter'))
  EXPECT_EQ(render("{{ b | reject('equalto', 'code_interpreter') | join(', ') }}|{{ b | select('equalto', 'wolfram') | list | length }}"
                   "|{{ [0, 1, '', 'a', none] | select | join('-') }}|{{ [1, none, 2] | reject('none') | join }}",
                   R"({"b": ["brave_search", "code_interpreter", "wolfram"]})"),
            "brave_search, wolfram|1|1-a|12");
  EXPECT_NE(error_of("{{ 3 | select }}").find("select of a"), std::string::npos);
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 * 3 + 1 }} {{ (1 + 2) * 3 }}"), "3 -4 2 3.5 7 9");
  EXPECT_EQ(render("{{ m['content'] | trim + '!' }}", R"({"m": {"content": " hi "}})"), "hi!");  // filter binds first
}

TEST(TextJinja, ErrorsNameTheConstruct) {
  EXPECT_NE(error_of("{% macro f() %}x{% endmacro %}").find("unsupported Jinja construct 'macro'"), std::string::npos);
  EXPECT_NE(error_of("{% filter upper %}x{% endfilter %}").find("'filter'"), std::string::npos);
  EXPECT_NE(error_of("{% include 'x' %}").find("'include'"), std::string::npos);
  EXPECT_NE(error_of("{{ x | frobnicate }}").find("unknown filter 'frobnicate'"), std::string::npos);
  EXPECT_NE(error_of("{{ x is frob }}").find("unknown test 'frob'"), std::string::npos);
  EXPECT_NE(error_of("{{ 'a'.frob() }}").find("unknown method 'frob'"), std::string::npos);
  EXPECT_NE(error_of("{{ strftime_now('%Y') }}").find("strftime_now"), std::string::npos);
  EXPECT_NE(error_of("\n\n{% if x %}").find("line 3"), std::string::npos);
  EXPECT_NE(error_of("{% if x %}").find("missing {% endif %}"), std::string::npos);
  EXPECT_NE(error_of("{{ 1 + }}").find("unexpected"), std::string::npos);
  EXPECT_NE(error_of("{{ 'abc }}").find("not closed"), std::string::npos);
  EXPECT_NE(error_of("{{ x.y }}").find("undefined"), std::string::npos);
  EXPECT_NE(error_of("{{ raise_exception('bad role') }}").find("bad role"), std::string::npos);
  EXPECT_NE(error_of("{{ 1 // 0 }}").find("division by zero"), std::string::npos);
  // deep nesting is an error, not a stack overflow
  EXPECT_NE(error_of("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}").find("nesting"), std::string::npos);
  // self-reference, runaway loops and growth are errors, not hangs or leaks
  EXPECT_NE(error_of("{% set ns = namespace(a=1) %}{% set ns.b = [ns] %}").find("cyclic"), std::string::npos);
  EXPECT_NE(error_of("{% for i in range(2000) %}{% for j in range(2000) %}{% endfor %}{% endfor %}").find("too long"),
            std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}")
                .find("too large"),
            std::string::npos);
  std::string deep_json = std::string(1000, '[') + std::string(1000, ']');
  EXPECT_THROW(knot::jinja::from_json(deep_json, "x"), knot::Error);
  std::string deep;
  for (int i = 0; i < 3000; i++) deep += "{% if true %}";
  EXPECT_NE(error_of(deep).find("nesting"), std::string::npos);
}

TEST(TextJinja, ChatApiJinjaPath) {
  knot::TokenizerData d;
  d.model = "gpt2";
  d.tokens = {"<|begin_of_text|>", "<|eot_id|>"};
  d.bos_id = 0;
  d.eos_id = 1;
  d.add_bos = true;
  d.chat_template =
      "{% for m in messages %}{% set c = '<h>' + m['role'] + '</h>\\n\\n' + m['content'] | trim + '<|eot_id|>' %}"
      "{% if loop.index0 == 0 %}{% set c = bos_token + c %}{% endif %}{{ c }}{% endfor %}"
      "{% if add_generation_prompt %}{{ '<h>assistant</h>\\n\\n' }}{% endif %}";
  const std::string msgs = R"([{"role": "user", "content": " Hi "}])";
  EXPECT_EQ(knot::render_jinja_chat(d, msgs, true), "<|begin_of_text|><h>user</h>\n\nHi<|eot_id|><h>assistant</h>\n\n");
  // the prompt form drops the BOS text: encode(add_bos) adds the token once
  EXPECT_EQ(knot::jinja_chat_prompt(d, msgs, false), "<h>user</h>\n\nHi<|eot_id|>");
  EXPECT_EQ(knot::apply_chat_template(d, {{"user", " Hi "}}, false, "jinja"), "<h>user</h>\n\nHi<|eot_id|>");
  EXPECT_EQ(knot::render_jinja_chat(d, msgs, false, R"({"add_generation_prompt": true})"),
            "<|begin_of_text|><h>user</h>\n\nHi<|eot_id|><h>assistant</h>\n\n");  // extra vars win
  d.chat_template.clear();
  EXPECT_THROW(knot::render_jinja_chat(d, msgs, true), knot::Error);
}

}  // namespace
