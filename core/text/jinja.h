// jinja.h — a small Jinja2 subset interpreter for chat templates (tokenizer.chat_template),
// rendering as Hugging Face's apply_chat_template does (trim_blocks, lstrip_blocks).
// Supported: text, {{ }}, {% if/elif/else %}, {% for x in xs [if c] %} (+ else, loop.*,
// break/continue), {% set x = e %}, {% set ns.a = e %}, {# #}, whitespace control (-);
// expressions: literals (str, int, float, bool, none, lists, dicts), names, .attr,
// [index], [a:b:c] slices, calls, filters (|), tests (is [not]), not/and/or, ==, !=, <,
// <=, >, >=, in, not in, + - * / // % ~, unary -, x if c else y; namespace(),
// raise_exception(); string methods (startswith, endswith, split, strip, lstrip, rstrip,
// upper, lower, replace, title, capitalize), dict methods (items, keys, values, get).
// Contract: anything else (macro, call, filter blocks, include, unknown filter / test /
// method) is a knot::Error naming the construct and its line; rendering never loops
// forever (loops run over finite lists) and never crashes on any template text.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace knot::jinja {

// A template value: JSON-like plus "undefined" (a missing variable or key).
struct Value {
  enum Kind { Undefined, None, Bool, Int, Float, Str, Array, Object, Func };
  Kind kind = Undefined;
  bool b = false;
  long long i = 0;
  double f = 0;
  std::string s;  // Str; Func: its name
  std::shared_ptr<std::vector<Value>> arr;                          // Array (shared: like Python lists)
  std::shared_ptr<std::vector<std::pair<std::string, Value>>> obj;  // Object, insertion order

  static Value none() { Value v; v.kind = None; return v; }
  static Value boolean(bool x) { Value v; v.kind = Bool; v.b = x; return v; }
  static Value integer(long long x) { Value v; v.kind = Int; v.i = x; return v; }
  static Value number(double x) { Value v; v.kind = Float; v.f = x; return v; }
  static Value str(std::string x) { Value v; v.kind = Str; v.s = std::move(x); return v; }
  static Value array() { Value v; v.kind = Array; v.arr = std::make_shared<std::vector<Value>>(); return v; }
  static Value object() {
    Value v;
    v.kind = Object;
    v.obj = std::make_shared<std::vector<std::pair<std::string, Value>>>();
    return v;
  }
  // Object: the value of key, or Undefined.
  Value get(const std::string& key) const;
  void set(const std::string& key, Value v);  // Object only
};

// Parses `source` once; render() evaluates it with the given global variables.
class Template {
 public:
  explicit Template(const std::string& source);  // throws knot::Error on a syntax error
  ~Template();
  Template(Template&&) noexcept;
  std::string render(const Value& globals) const;  // globals: an Object

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// JSON text -> Value (objects keep their key order); throws knot::Error naming `what`.
Value from_json(const std::string& json_text, const std::string& what);

}  // namespace knot::jinja
