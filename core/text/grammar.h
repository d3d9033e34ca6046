// grammar.h — GBNF grammars (llama.cpp's `grammar` syntax) and the incremental matcher
// that constrains generation to them, byte by byte.
//
// Syntax (as llama.cpp's GBNF):
//   name ::= alternative | alternative ...     one rule per definition; `root` is the start
//   "text"  a literal (escapes \n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH)
//   [a-z_] [^"\\]  a character class (ranges, negation); `.` any character
//   ( ... )  grouping;  x*  x+  x?  x{m}  x{m,}  x{m,n}  repetition of the last item
//   # comment to the end of the line.  A rule's body ends at a newline outside parentheses
//   (a line starting with `|` continues it).  Names: [A-Za-z0-9_-]+.
// Errors (knot::UsageError, so a CLI exits 2 and an HTTP layer answers 400) name the
// line and column, and the rule being parsed: "grammar: line 2, column 9 (rule 'value'):
// expected '::='". A reference to an undefined rule, a missing `root` and a left-recursive
// rule (which the matcher could not expand) are refused with the rule's name.
//
// Matching works on Unicode code points (the grammar's characters) over UTF-8 bytes: a
// token whose bytes end inside a character is accepted when some character the grammar
// allows next starts with those bytes. The state is the set of pushdown stacks llama.cpp's
// llama-grammar keeps: each stack lists what remains to match, top = next terminal.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace knot {

struct GrammarElem {
  enum Type : uint8_t {
    End,        // end of a rule
    Alt,        // start of another alternative
    RuleRef,    // value: rule id
    Char,       // value: code point; starts a character set
    CharNot,    // value: code point; starts a negated character set
    CharUpper,  // value: inclusive upper bound of the range started by the element before
    CharAlt,    // value: another code point of the set
    CharAny,    // any code point
  };
  Type type;
  uint32_t value;
};

class Grammar {
 public:
  // Throws knot::UsageError naming the line, column and rule.
  static std::shared_ptr<const Grammar> parse(std::string_view gbnf);

  // rules()[id]: alternatives, each a sequence of elements, separated by Alt, closed by End.
  const std::vector<std::vector<GrammarElem>>& rules() const { return rules_; }
  const std::string& rule_name(uint32_t id) const { return names_[id]; }
  uint32_t root() const { return root_; }

 private:
  std::vector<std::vector<GrammarElem>> rules_;
  std::vector<std::string> names_;
  uint32_t root_ = 0;
  friend struct GbnfParser;
};

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const Grammar> g);

  // Would these bytes continue the text matched so far? (The state is not changed.)
  bool can_accept(std::string_view bytes) const;
  // Advances over bytes; false (and the state unchanged) when they cannot continue it.
  bool accept(std::string_view bytes);
  // The text matched so far is a complete sentence of the grammar.
  bool can_end() const;
  // Complete, and nothing can follow.
  bool is_complete() const;
  // Back to the start (nothing matched).
  void reset();

  using Stack = std::vector<const GrammarElem*>;
  struct Partial {  // a UTF-8 character begun by the bytes so far
    uint32_t value = 0;
    int n_remain = 0;  // continuation bytes still expected (0: none; -1: invalid)
    int len = 0;       // bytes of the whole sequence
  };
  struct State {
    std::vector<Stack> stacks;
    Partial partial;
  };
  const State& state() const { return st_; }
  // One byte from state `from` into `to`; false when the byte cannot continue it (`to`
  // is then unspecified). `from` and `to` may not alias.
  bool step_byte(const State& from, uint8_t byte, State& to) const;
  // `s` can stand at the end of a token: its partial character can still be completed.
  bool token_end_ok(const State& s) const;

 private:
  void advance_stack(const Stack& stack, std::vector<Stack>& out) const;
  void accept_char(const std::vector<Stack>& stacks, uint32_t cp, std::vector<Stack>& out) const;

  std::shared_ptr<const Grammar> g_;
  State st_;
};

}  // namespace knot
