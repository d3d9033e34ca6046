// text_grammar.cpp — GBNF parsing (errors name line, column and rule), the matcher's
// accept/reject of byte strings (UTF-8 split anywhere), and JSON Schema -> GBNF for every
// supported feature plus named refusals for unsupported ones.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "kernels/common.h"
#include "text/grammar.h"
#include "text/json_schema.h"

using knot::Grammar;
using knot::GrammarMatcher;

namespace {

std::string parse_error(const std::string& gbnf) {
  try {
    Grammar::parse(gbnf);
  } catch (const knot::UsageError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception type: ") + e.what();
  }
  return "(no error)";
}

// Whole string is a sentence of the grammar.
bool full(const std::shared_ptr<const Grammar>& g, const std::string& s) {
  GrammarMatcher m(g);
  return m.accept(s) && m.can_end();
}
// s can start a sentence (more may follow).
bool prefix(const std::shared_ptr<const Grammar>& g, const std::string& s) {
  GrammarMatcher m(g);
  return m.can_accept(s);
}

std::shared_ptr<const Grammar> schema(const std::string& text) {
  return Grammar::parse(knot::json_schema_to_gbnf(std::string_view(text)));
}

std::string schema_error(const std::string& text) {
  try {
    knot::json_schema_to_gbnf(std::string_view(text));
  } catch (const knot::UsageError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(GbnfParse, ErrorsNameLineColumnAndRule) {
  EXPECT_EQ(parse_error("root ::= \"a\"\nvalue = \"b\"\n"),
            "grammar: line 2, column 7 (rule 'value'): expected '::=' after the rule name");
  EXPECT_EQ(parse_error("root ::= \"abc\n"), "grammar: line 1, column 10 (rule 'root'): unterminated string literal");
  EXPECT_EQ(parse_error("root ::= item\nitem ::= [a-z\n"),
            "grammar: line 2, column 10 (rule 'item'): unterminated character class");
  EXPECT_EQ(parse_error("root ::= \"x\" value\n"), "grammar: line 1, column 14 (rule 'root'): rule 'value' is not defined");
  EXPECT_EQ(parse_error("start ::= \"x\"\n"), "grammar: no rule named 'root' (the start rule)");
  EXPECT_EQ(parse_error("root ::= * \"a\"\n"), "grammar: line 1, column 10 (rule 'root'): '*' has no item before it to repeat");
  EXPECT_EQ(parse_error("root ::= (\"a\" | \"b\"\n"),
            "grammar: line 2, column 1 (rule 'root'): expected ')' to close the '(' at column 10");
  EXPECT_EQ(parse_error("root ::= [z-a]\n"), "grammar: line 1, column 13 (rule 'root'): character range is reversed");
  EXPECT_EQ(parse_error("root ::= \"a\"{3,2}\n"), "grammar: line 1, column 18 (rule 'root'): {3,2}: max is below min");
  EXPECT_EQ(parse_error("root ::= \"a\"\nroot ::= \"b\"\n"), "grammar: line 2, column 1 (rule 'root'): rule 'root' is defined twice");
  EXPECT_EQ(parse_error("root ::= \"\\q\"\n"), "grammar: line 1, column 11 (rule 'root'): unknown escape '\\q'");
  EXPECT_EQ(parse_error("root ::= expr\nexpr ::= expr \"+\" term | term\nterm ::= [0-9]\n"),
            "grammar: rule 'expr' is left-recursive (it can reach itself before matching any character)");
  // through a nullable prefix and a group
  EXPECT_EQ(parse_error("root ::= a\na ::= \"x\"? (b \"y\")\nb ::= a | \"z\"\n"),
            "grammar: rule 'a' is left-recursive (it can reach itself before matching any character)");
  EXPECT_EQ(parse_error("root ::= \"a\" }\n"), "grammar: line 1, column 14 (rule 'root'): unexpected '}'");
}

TEST(GbnfMatch, LiteralsClassesAndAlternatives) {
  auto g = Grammar::parse("root ::= \"yes\" | \"no\" | [0-9] [a-fA-F_]\n");
  EXPECT_TRUE(full(g, "yes"));
  EXPECT_TRUE(full(g, "no"));
  EXPECT_TRUE(full(g, "7F"));
  EXPECT_TRUE(full(g, "0_"));
  EXPECT_FALSE(full(g, "ye"));  // a prefix, not a sentence
  EXPECT_TRUE(prefix(g, "ye"));
  EXPECT_FALSE(prefix(g, "yess"));
  EXPECT_FALSE(full(g, "7g"));
  EXPECT_FALSE(prefix(g, "x"));
  EXPECT_FALSE(full(g, ""));
}

TEST(GbnfMatch, NegationAnyAndEscapes) {
  auto g = Grammar::parse(R"(root ::= "\"" [^"\\]* "\"" . "\x41\u00e9\n"
)");
  EXPECT_TRUE(full(g, "\"abc\"!A\xC3\xA9\n"));
  EXPECT_TRUE(full(g, "\"\"\xE2\x82\xAC" "A\xC3\xA9\n"));  // any: a 3-byte character
  EXPECT_FALSE(prefix(g, "\"a\\"));                       // backslash excluded
  EXPECT_FALSE(full(g, "\"a\"!A\xC3\xA9"));               // newline missing
}

TEST(GbnfMatch, RepetitionsAndGroups) {
  auto g = Grammar::parse(
      "# a comment line\n"
      "root ::= \"a\"{2,3} (\"b\" | \"c\")+ \"d\"? x{2} y{1,}   # trailing comment\n"
      "x ::= [xy]\n"
      "y ::=\n  \"z\"\n  | \"w\"\n");
  EXPECT_TRUE(full(g, "aabxyz"));
  EXPECT_TRUE(full(g, "aaabcbdxxzwz"));
  EXPECT_FALSE(full(g, "abxyz"));     // a{2,3}: one is too few
  EXPECT_FALSE(prefix(g, "aaaa"));    // four is too many
  EXPECT_FALSE(full(g, "aadxyz"));    // (b|c)+ needs one
  EXPECT_FALSE(full(g, "aabxz"));     // x{2}
  EXPECT_FALSE(full(g, "aabxy"));     // y{1,}
  EXPECT_FALSE(full(g, "aabddxyz"));  // d? once at most
  auto zero = Grammar::parse("root ::= \"a\"{0} \"b\"\n");
  EXPECT_TRUE(full(zero, "b"));
  EXPECT_EQ(parse_error("root ::= \"a\"{0} \"b\"{,2}\n"),
            "grammar: line 1, column 21 (rule 'root'): expected a number in {m,n}");
}

TEST(GbnfMatch, Utf8SplitAcrossPieces) {
  auto g = Grammar::parse("root ::= [a-z\\u00e0-\\u00ff]+ \"\\u20ac\"\n");
  GrammarMatcher m(g);
  EXPECT_TRUE(m.accept("ab\xC3"));  // ends inside 'é' (C3 A9): some allowed character starts so
  EXPECT_FALSE(m.can_end());
  EXPECT_FALSE(m.can_accept("z"));  // an ASCII byte cannot continue a 2-byte character
  EXPECT_TRUE(m.accept("\xA9"));
  EXPECT_TRUE(m.accept("\xE2"));
  EXPECT_FALSE(m.can_accept("\xC3"));  // not a continuation byte
  EXPECT_TRUE(m.accept("\x82\xAC"));
  EXPECT_TRUE(m.can_end());
  EXPECT_TRUE(m.is_complete());  // the euro sign ends it
  GrammarMatcher n(g);
  EXPECT_FALSE(n.can_accept("\xC4"));      // U+0100.. is outside [a-z\u00e0-\u00ff]
  EXPECT_FALSE(n.can_accept("\xFF"));      // never valid UTF-8
  EXPECT_FALSE(n.can_accept("\xC3\xA9\xA9"));  // stray continuation byte
}

// A lead byte pair whose every completion is a surrogate (ED A0..BF) is refused at once: a
// token ending there could never be continued (a byte-level vocabulary sampled into it).
TEST(GbnfMatch, SurrogatePrefixesAreRefused) {
  GrammarMatcher m(Grammar::parse("root ::= [^\"]* \"\\\"\"\n"));
  EXPECT_TRUE(m.can_accept("\xED"));          // ED 80..9F: U+D000..U+D7FF
  EXPECT_TRUE(m.can_accept("\xED\x9F"));
  EXPECT_FALSE(m.can_accept("\xED\xA0"));      // U+D800..: surrogates only
  EXPECT_FALSE(m.can_accept("\xED\xAE"));
  EXPECT_TRUE(m.can_accept("\xEE\x80"));      // U+E000..
}

TEST(GbnfMatch, CompleteAndReset) {
  auto g = Grammar::parse("root ::= \"ok\" \"!\"?\n");
  GrammarMatcher m(g);
  EXPECT_TRUE(m.accept("ok"));
  EXPECT_TRUE(m.can_end());
  EXPECT_FALSE(m.is_complete());  // "!" may follow
  EXPECT_FALSE(m.accept("?"));
  EXPECT_TRUE(m.can_end());       // a refused piece leaves the state as it was
  EXPECT_TRUE(m.accept("!"));
  EXPECT_TRUE(m.is_complete());
  m.reset();
  EXPECT_FALSE(m.can_end());
  EXPECT_TRUE(m.can_accept("o"));
}

// ---- JSON Schema -------------------------------------------------------------------------

TEST(JsonSchema, Primitives) {
  auto s = schema(R"({"type": "string"})");
  EXPECT_TRUE(full(s, R"("hi \"there\" \u00e9\n")"));
  EXPECT_FALSE(prefix(s, "\"a\nb"));  // raw control character
  auto n = schema(R"({"type": "number"})");
  for (const char* ok : {"0", "-1.5", "3e10", "12.25E-3", "1 "}) EXPECT_TRUE(full(n, ok)) << ok;
  for (const char* bad : {"01", "1.", ".5", "+1", "1e"}) EXPECT_FALSE(full(n, bad)) << bad;
  auto i = schema(R"({"type": "integer"})");
  EXPECT_TRUE(full(i, "-42"));
  EXPECT_FALSE(full(i, "4.2"));
  auto b = schema(R"({"type": "boolean"})");
  EXPECT_TRUE(full(b, "true"));
  EXPECT_TRUE(full(b, "false"));
  EXPECT_FALSE(full(b, "null"));
  auto z = schema(R"({"type": "null"})");
  EXPECT_TRUE(full(z, "null"));
  auto two = schema(R"({"type": ["integer", "null"]})");
  EXPECT_TRUE(full(two, "7"));
  EXPECT_TRUE(full(two, "null"));
  EXPECT_FALSE(full(two, "\"7\""));
}

TEST(JsonSchema, StringLength) {
  auto s = schema(R"({"type": "string", "minLength": 2, "maxLength": 3})");
  EXPECT_FALSE(full(s, R"("a")"));
  EXPECT_TRUE(full(s, R"("ab")"));
  EXPECT_TRUE(full(s, R"("a\nb")"));  // an escape is one character
  EXPECT_FALSE(full(s, R"("abcd")"));
}

TEST(JsonSchema, EnumAndConst) {
  auto e = schema(R"({"enum": ["red", "green", 3, null, {"a": [1]}]})");
  for (const char* ok : {"\"red\"", "\"green\"", "3", "null", "{\"a\":[1]}"}) EXPECT_TRUE(full(e, ok)) << ok;
  EXPECT_FALSE(full(e, "\"blue\""));
  EXPECT_FALSE(full(e, "4"));
  auto c = schema(R"({"const": "v1"})");
  EXPECT_TRUE(full(c, "\"v1\""));
  EXPECT_FALSE(full(c, "\"v2\""));
}

TEST(JsonSchema, ObjectsRequiredOptionalNested) {
  auto o = schema(R"({"type": "object", "properties": {
      "name": {"type": "string"}, "age": {"type": "integer"},
      "tags": {"type": "array", "items": {"type": "string"}},
      "address": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                  "additionalProperties": false}},
    "required": ["name", "age"], "additionalProperties": false})");
  EXPECT_TRUE(full(o, R"({"name": "a", "age": 3})"));
  EXPECT_TRUE(full(o, R"({"name":"a","age":3,"tags":["x"],"address":{"city":"b"}})"));
  EXPECT_TRUE(full(o, R"({"name":"a","age":3,"address":{"city":"b"}})"));  // tags left out
  EXPECT_TRUE(full(o, "{\n  \"name\": \"a\",\n  \"age\": 3\n}"));
  EXPECT_FALSE(full(o, R"({"name": "a"})"));                 // age required
  EXPECT_FALSE(full(o, R"({"age": 3, "name": "a"})"));       // declaration order
  EXPECT_FALSE(prefix(o, R"({"name":"a","age":3,"extra")"));  // no other property
  EXPECT_FALSE(full(o, R"({"name":"a","age":3,"address":{}})"));
  // no required property: every subset in order, without a leading comma
  auto opt = schema(R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"},
                        "c": {"type": "integer"}}})");
  for (const char* ok : {"{}", R"({"a":1})", R"({"b":1})", R"({"c":1})", R"({"a":1,"c":2})", R"({"b":1,"c":2})",
                         R"({"a":1,"b":2,"c":3})"})
    EXPECT_TRUE(full(opt, ok)) << ok;
  EXPECT_FALSE(prefix(opt, R"({,)"));
  EXPECT_FALSE(prefix(opt, R"({"b":1,"a")"));
  // an object without properties: any object
  auto any = schema(R"({"type": "object"})");
  EXPECT_TRUE(full(any, R"({"x": [1, {"y": null}], "z": "w"})"));
  EXPECT_FALSE(full(any, "[]"));
}

TEST(JsonSchema, ArraysWithBounds) {
  auto a = schema(R"({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3})");
  EXPECT_FALSE(full(a, "[]"));
  EXPECT_TRUE(full(a, "[1]"));
  EXPECT_TRUE(full(a, "[1, 2, 3]"));
  EXPECT_FALSE(prefix(a, "[1,2,3,"));
  EXPECT_FALSE(full(a, "[1,\"2\"]"));
  auto e = schema(R"({"type": "array", "maxItems": 0})");
  EXPECT_TRUE(full(e, "[]"));
  EXPECT_FALSE(prefix(e, "[1"));
  auto u = schema(R"({"type": "array"})");
  EXPECT_TRUE(full(u, R"([1, "a", [true], {}])"));
}

TEST(JsonSchema, RefsAnyOfOneOfAllOf) {
  auto r = schema(R"({"$defs": {"node": {"type": "object", "properties": {
        "v": {"type": "integer"}, "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
        "required": ["v", "next"]}},
      "$ref": "#/$defs/node"})");
  EXPECT_TRUE(full(r, R"({"v": 1, "next": {"v": 2, "next": null}})"));
  EXPECT_FALSE(full(r, R"({"v": 1, "next": {"v": 2}})"));
  auto d = schema(R"({"definitions": {"c": {"enum": ["a", "b"]}}, "type": "array",
                      "items": {"oneOf": [{"$ref": "#/definitions/c"}, {"type": "boolean"}]}})");
  EXPECT_TRUE(full(d, R"(["a", true, "b"])"));
  EXPECT_FALSE(full(d, R"(["c"])"));
  auto all = schema(R"({"allOf": [{"type": "integer"}], "title": "n", "description": "ignored"})");
  EXPECT_TRUE(full(all, "5"));
  auto t = schema("true");
  EXPECT_TRUE(full(t, "[null]"));
}

TEST(JsonSchema, UnsupportedIsNamedWithItsPath) {
  EXPECT_EQ(schema_error(R"({"type": "object", "properties": {"name": {"type": "string", "pattern": "^a"}}})"),
            "json schema: \"pattern\" is not supported (at #/properties/name)");
  EXPECT_EQ(schema_error(R"({"type": "integer", "minimum": 0})"), "json schema: \"minimum\" is not supported (at #)");
  EXPECT_EQ(schema_error(R"({"type": "array", "items": [{"type": "string"}]})"),
            "json schema: \"items\" as an array (tuple form) is not supported (at #/items)");
  EXPECT_EQ(schema_error(R"({"type": "object", "properties": {}, "additionalProperties": {"type": "string"}})"),
            "json schema: \"additionalProperties\" with a schema is not supported (only false or true) (at #/additionalProperties)");
  EXPECT_EQ(schema_error(R"({"$ref": "https://example.com/s.json"})"),
            "json schema: $ref \"https://example.com/s.json\" is not supported (only #/$defs/NAME and #/definitions/NAME) (at #)");
  EXPECT_EQ(schema_error(R"({"$ref": "#/$defs/missing"})"), "json schema: $ref \"#/$defs/missing\" names no definition (at #)");
  EXPECT_EQ(schema_error(R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})"),
            "json schema: required property \"b\" is not declared in \"properties\" (at #/required/0)");
  EXPECT_EQ(schema_error(R"({"type": "string", "format": "date-time"})"), "json schema: \"format\" is not supported (at #)");
  EXPECT_EQ(schema_error(R"({"type": "array", "items": {"type": "string", "uniqueItems": true}})"),
            "json schema: \"uniqueItems\" is not supported (at #/items)");
  EXPECT_EQ(schema_error(R"({"type": "text"})"), "json schema: type \"text\" is not a JSON Schema type (at #/type)");
  EXPECT_EQ(schema_error(R"({"allOf": [{"type": "string"}, {"maxLength": 3}]})"),
            "json schema: \"allOf\" with other than one schema is not supported (at #/allOf)");
  EXPECT_EQ(schema_error("{\"type\": "), "json schema: the schema is not valid JSON");
}

TEST(JsonSchema, DeclarationOrderFromText) {
  // the text form keeps the schema's property order (a std::map json would sort them)
  auto o = schema(R"({"type": "object", "properties": {"zeta": {"type": "integer"}, "alpha": {"type": "integer"}},
                      "required": ["zeta", "alpha"]})");
  EXPECT_TRUE(full(o, R"({"zeta": 1, "alpha": 2})"));
  EXPECT_FALSE(full(o, R"({"alpha": 2, "zeta": 1})"));
}
