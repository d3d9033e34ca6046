// grammar.cpp — the GBNF parser (rules flattened to element lists, repetitions expanded
// into generated rules as llama.cpp does) and the stack-set matcher (see grammar.h).
#include "text/grammar.h"

#include <algorithm>
#include <map>

#include "kernels/common.h"

namespace knot {

namespace {

using E = GrammarElem;

bool end_of_seq(const E* p) { return p->type == E::End || p->type == E::Alt; }
bool is_word(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}
constexpr int kMaxRepeat = 10000;

}  // namespace

// ---- parser ------------------------------------------------------------------------------

struct GbnfParser {
  std::string_view s;
  size_t pos = 0;
  std::map<std::string, uint32_t> ids;
  std::vector<std::vector<E>> rules;
  std::vector<std::string> names;
  std::vector<bool> defined;
  std::vector<std::pair<uint32_t, size_t>> first_ref;  // per rule: (referencing rule, offset)
  std::string cur;                                     // rule being parsed
  uint32_t cur_id = 0;

  [[noreturn]] void error(const std::string& msg, size_t at) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < s.size(); i++) {
      if (s[i] == '\n') line++, col = 1;
      else col++;
    }
    usage_fail("grammar: line " + std::to_string(line) + ", column " + std::to_string(col) +
               (cur.empty() ? "" : " (rule '" + cur + "')") + ": " + msg);
  }
  [[noreturn]] void error(const std::string& msg) const { error(msg, pos); }

  bool eof() const { return pos >= s.size(); }
  char peek(size_t k = 0) const { return pos + k < s.size() ? s[pos + k] : '\0'; }

  uint32_t symbol(const std::string& name) {
    auto it = ids.find(name);
    if (it != ids.end()) return it->second;
    const uint32_t id = (uint32_t)rules.size();
    ids[name] = id;
    rules.emplace_back();
    names.push_back(name);
    defined.push_back(false);
    first_ref.push_back({UINT32_MAX, 0});
    generated.push_back(false);
    return id;
  }
  uint32_t fresh(const std::string& base) {
    for (int i = 1;; i++) {
      const std::string n = base + "~" + std::to_string(i);  // not a name the text can use
      if (!ids.count(n)) {
        const uint32_t id = symbol(n);
        defined[id] = true;
        generated[id] = true;
        return id;
      }
    }
  }

  void skip_space(bool newline_ok) {
    while (!eof()) {
      const char c = peek();
      if (c == ' ' || c == '\t') pos++;
      else if (c == '#') {
        while (!eof() && peek() != '\n') pos++;
      } else if (newline_ok && (c == '\n' || c == '\r')) pos++;
      else break;
    }
  }

  std::string parse_name() {
    const size_t b = pos;
    while (!eof() && is_word(peek())) pos++;
    if (pos == b) error(eof() ? "expected a rule name, got the end of the text" : std::string("expected a rule name, got '") + peek() + "'");
    return std::string(s.substr(b, pos - b));
  }

  uint32_t hex(int n) {
    uint32_t v = 0;
    for (int i = 0; i < n; i++) {
      const char c = peek();
      int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) error("expected " + std::to_string(n) + " hex digits in an escape");
      v = v * 16 + (uint32_t)d;
      pos++;
    }
    return v;
  }

  // One character of a literal or class: an escape or one UTF-8 sequence.
  uint32_t parse_char() {
    if (eof()) error("unexpected end of the text");
    const unsigned char c = (unsigned char)peek();
    if (c == '\\') {
      pos++;
      const char e = peek();
      pos++;
      switch (e) {
        case 'x': return hex(2);
        case 'u': return hex(4);
        case 'U': return hex(8);
        case 't': return '\t';
        case 'r': return '\r';
        case 'n': return '\n';
        case '\\': case '"': case '[': case ']': case '-': case '^': return (uint32_t)e;
        default: error(std::string("unknown escape '\\") + (e ? std::string(1, e) : std::string()) + "'", pos - 2);
      }
    }
    int n = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : -1;
    if (n < 0) error("invalid UTF-8");
    uint32_t v = n == 0 ? c : n == 1 ? c & 0x1F : n == 2 ? c & 0x0F : c & 0x07;
    pos++;
    for (int i = 0; i < n; i++) {
      if (eof() || ((unsigned char)peek() & 0xC0) != 0x80) error("invalid UTF-8");
      v = (v << 6) | ((unsigned char)peek() & 0x3F);
      pos++;
    }
    return v;
  }

  void parse_literal(std::vector<E>& out) {
    const size_t start = pos;
    pos++;  // "
    while (peek() != '"') {
      if (eof() || peek() == '\n') error("unterminated string literal", start);
      out.push_back({E::Char, parse_char()});
    }
    pos++;
  }

  void parse_class(std::vector<E>& out) {
    const size_t start = pos;
    pos++;  // [
    E::Type first = E::Char;
    if (peek() == '^') first = E::CharNot, pos++;
    bool any = false;
    while (peek() != ']') {
      if (eof() || peek() == '\n') error("unterminated character class", start);
      const uint32_t lo = parse_char();
      out.push_back({any ? E::CharAlt : first, lo});
      any = true;
      if (peek() == '-' && peek(1) != ']' && pos + 1 < s.size()) {
        pos++;
        const size_t at = pos;
        const uint32_t hi = parse_char();
        if (hi < lo) error("character range is reversed", at);
        out.push_back({E::CharUpper, hi});
      }
    }
    if (!any) error("empty character class", start);
    pos++;
  }

  int parse_count() {
    const size_t b = pos;
    long long v = 0;
    while (peek() >= '0' && peek() <= '9') {
      v = v * 10 + (peek() - '0');
      if (v > kMaxRepeat) error("repetition count is larger than " + std::to_string(kMaxRepeat), b);
      pos++;
    }
    if (pos == b) error("expected a number in {m,n}");
    return (int)v;
  }

  // Replaces out[start..] (the last item) by min copies and (max - min) optional ones
  // (max < 0: any number more), with generated rules as llama.cpp does.
  void repeat(std::vector<E>& out, size_t start, int min, int max) {
    std::vector<E> item(out.begin() + (long)start, out.end());
    out.resize(start);
    for (int i = 0; i < min; i++) out.insert(out.end(), item.begin(), item.end());
    if (max < 0) {  // R ::= item R |
      const uint32_t r = fresh(cur);
      std::vector<E> body = item;
      body.push_back({E::RuleRef, r});
      body.push_back({E::Alt, 0});
      body.push_back({E::End, 0});
      rules[r] = std::move(body);
      out.push_back({E::RuleRef, r});
      return;
    }
    uint32_t last = UINT32_MAX;  // R_i ::= item R_{i-1} |   (innermost first)
    for (int i = 0; i < max - min; i++) {
      const uint32_t r = fresh(cur);
      std::vector<E> body = item;
      if (last != UINT32_MAX) body.push_back({E::RuleRef, last});
      body.push_back({E::Alt, 0});
      body.push_back({E::End, 0});
      rules[r] = std::move(body);
      last = r;
    }
    if (last != UINT32_MAX) out.push_back({E::RuleRef, last});
  }

  void parse_sequence(std::vector<E>& out, bool nested) {
    size_t last = out.size();  // start of the last item
    bool have_item = false;
    while (!eof()) {
      const char c = peek();
      if (c == '"') {
        last = out.size(), have_item = true;
        parse_literal(out);
      } else if (c == '[') {
        last = out.size(), have_item = true;
        parse_class(out);
      } else if (c == '.') {
        last = out.size(), have_item = true;
        out.push_back({E::CharAny, 0});
        pos++;
      } else if (is_word(c)) {
        last = out.size(), have_item = true;
        const size_t at = pos;
        const std::string name = parse_name();
        const uint32_t id = symbol(name);
        if (first_ref[id].first == UINT32_MAX) first_ref[id] = {cur_id, at};
        out.push_back({E::RuleRef, id});
      } else if (c == '(') {
        const size_t open = pos;
        pos++;
        skip_space(true);
        last = out.size(), have_item = true;
        const uint32_t r = fresh(cur);
        std::vector<E> body = parse_alternates(true);
        if (peek() != ')') error("expected ')' to close the '(' at column " + std::to_string(col_of(open)));
        pos++;
        rules[r] = std::move(body);
        out.push_back({E::RuleRef, r});
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (!have_item) error(std::string("'") + c + "' has no item before it to repeat");
        pos++;
        int min = 0, max = -1;
        if (c == '+') min = 1;
        else if (c == '?') max = 1;
        else if (c == '{') {
          skip_space(false);
          min = parse_count();
          skip_space(false);
          if (peek() == ',') {
            pos++;
            skip_space(false);
            max = peek() == '}' ? -1 : parse_count();
          } else {
            max = min;
          }
          skip_space(false);
          if (peek() != '}') error("expected '}' to close {m,n}");
          pos++;
          if (max >= 0 && max < min) error("{" + std::to_string(min) + "," + std::to_string(max) + "}: max is below min");
        }
        repeat(out, last, min, max);
        have_item = false;  // x** is refused, as in llama.cpp
      } else {
        break;
      }
      skip_space(nested);
    }
  }

  size_t col_of(size_t at) const {
    size_t b = s.rfind('\n', at == 0 ? 0 : at - 1);
    return b == std::string_view::npos || at == 0 ? at + 1 : at - b;
  }

  std::vector<E> parse_alternates(bool nested) {
    std::vector<E> out;
    parse_sequence(out, nested);
    for (;;) {
      if (peek() == '|') {
        pos++;
        skip_space(true);
        out.push_back({E::Alt, 0});
        parse_sequence(out, nested);
        continue;
      }
      if (!nested) {  // a line starting with '|' continues the rule
        const size_t save = pos;
        skip_space(true);
        if (peek() == '|') continue;
        pos = save;
      }
      break;
    }
    out.push_back({E::End, 0});
    return out;
  }

  void parse_rule() {
    const size_t at = pos;
    cur.clear();
    const std::string name = parse_name();
    cur = name;
    cur_id = symbol(name);
    skip_space(false);
    if (s.substr(pos, 3) != "::=") error("expected '::=' after the rule name");
    pos += 3;
    skip_space(true);
    if (defined[cur_id]) error("rule '" + name + "' is defined twice", at);
    defined[cur_id] = true;  // before the body: a self-reference is a reference to it
    rules[cur_id] = parse_alternates(false);
    skip_space(false);
    if (!eof() && peek() != '\n' && peek() != '\r') error(std::string("unexpected '") + peek() + "'");
  }

  void check() {
    for (uint32_t id = 0; id < rules.size(); id++)
      if (!defined[id]) {
        cur = names[first_ref[id].first];
        error("rule '" + names[id] + "' is not defined", first_ref[id].second);
      }
    cur.clear();
    if (!ids.count("root")) usage_fail("grammar: no rule named 'root' (the start rule)");
    // Left recursion: r reaches itself through rules each at the start of an alternative
    // whose elements before it can all match nothing.
    const size_t n = rules.size();
    std::vector<bool> nullable(n, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; r++) {
        if (nullable[r]) continue;
        const E* p = rules[r].data();
        for (;;) {
          bool all = true;
          for (; !end_of_seq(p); p++) {
            if (p->type != E::RuleRef || !nullable[p->value]) all = false;
          }
          if (all) { nullable[r] = changed = true; break; }
          if (p->type == E::End) break;
          p++;
        }
      }
    }
    std::vector<std::vector<uint32_t>> edges(n);
    for (size_t r = 0; r < n; r++) {
      const E* p = rules[r].data();
      for (;;) {
        bool open = true;  // still at the (nullable) start of the alternative
        for (; !end_of_seq(p); p++) {
          if (!open) continue;
          if (p->type == E::RuleRef) {
            edges[r].push_back(p->value);
            open = nullable[p->value];
          } else if (p->type == E::Char || p->type == E::CharNot || p->type == E::CharAny) {
            open = false;
          }
        }
        if (p->type == E::End) break;
        p++;
      }
    }
    std::vector<int> mark(n, 0);  // 0 new, 1 on the path, 2 done
    std::vector<std::pair<uint32_t, size_t>> path;
    for (uint32_t r0 = 0; r0 < n; r0++) {
      if (mark[r0]) continue;
      path.push_back({r0, 0});
      mark[r0] = 1;
      while (!path.empty()) {
        auto& [r, i] = path.back();
        if (i == edges[r].size()) {
          mark[r] = 2;
          path.pop_back();
          continue;
        }
        const uint32_t t = edges[r][i++];
        if (mark[t] == 1) {
          // name a rule of the text on the cycle rather than a generated one
          std::string who = names[t];
          for (auto it = path.rbegin(); it != path.rend(); ++it) {
            if (!generated[it->first]) who = names[it->first];
            if (it->first == t) break;
          }
          usage_fail("grammar: rule '" + who + "' is left-recursive (it can reach itself before matching any character)");
        }
        if (mark[t] == 0) {
          mark[t] = 1;
          path.push_back({t, 0});
        }
      }
    }
  }
  std::vector<bool> generated;  // rules made by ( ) and repetitions

  std::shared_ptr<const Grammar> run() {
    skip_space(true);
    while (!eof()) {
      parse_rule();
      skip_space(true);
    }
    check();
    auto g = std::make_shared<Grammar>();
    g->rules_ = std::move(rules);
    g->names_ = std::move(names);
    g->root_ = ids.at("root");
    return g;
  }
};

std::shared_ptr<const Grammar> Grammar::parse(std::string_view gbnf) {
  GbnfParser p;
  p.s = gbnf;
  return p.run();
}

// ---- matcher -----------------------------------------------------------------------------

namespace {

// Does the character set at p contain cp? Sets `after` to the element past the set.
bool match_char(const E* p, uint32_t cp, const E*& after) {
  const bool positive = p->type == E::Char || p->type == E::CharAny;
  bool found = false;
  do {
    if (p->type == E::CharAny) {
      found = true;
      p++;
    } else if (p[1].type == E::CharUpper) {
      found = found || (p->value <= cp && cp <= p[1].value);
      p += 2;
    } else {
      found = found || p->value == cp;
      p++;
    }
  } while (p->type == E::CharAlt);
  after = p;
  return found == positive;
}

// Could a character in [lo, hi] match the set at p?
bool match_range(const E* p, uint32_t lo, uint32_t hi) {
  const bool positive = p->type == E::Char || p->type == E::CharAny;
  bool meets = false, covers = false;
  do {
    uint32_t a, b;
    if (p->type == E::CharAny) {
      a = 0, b = 0x10FFFF;
      p++;
    } else if (p[1].type == E::CharUpper) {
      a = p->value, b = p[1].value;
      p += 2;
    } else {
      a = b = p->value;
      p++;
    }
    meets = meets || (a <= hi && lo <= b);
    covers = covers || (a <= lo && hi <= b);
  } while (p->type == E::CharAlt);
  return positive ? meets : !covers;
}

// The smallest code point a UTF-8 sequence of len bytes encodes (shorter forms are overlong).
uint32_t min_of_len(int len) { return len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000; }

bool partial_ok(const std::vector<GrammarMatcher::Stack>& stacks, const GrammarMatcher::Partial& pt) {
  if (pt.n_remain <= 0) return pt.n_remain == 0;
  uint32_t lo = pt.value << (6 * pt.n_remain);
  const uint32_t hi = std::min<uint32_t>(lo | ((1u << (6 * pt.n_remain)) - 1), 0x10FFFF);
  lo = std::max(lo, min_of_len(pt.len));
  if (lo > hi) return false;
  // surrogates (U+D800..U+DFFF) are no characters: e.g. ED A0 can never be completed
  auto meets = [&](uint32_t a, uint32_t b) {
    if (a > b) return false;
    for (const auto& st : stacks)
      if (!st.empty() && match_range(st.back(), a, b)) return true;
    return false;
  };
  return meets(lo, std::min<uint32_t>(hi, 0xD7FF)) || meets(std::max<uint32_t>(lo, 0xE000), hi);
}

// One byte into a partial character; returns true and sets cp when a valid character
// completes. A byte that cannot be valid UTF-8 here sets n_remain = -1.
bool utf8_byte(GrammarMatcher::Partial& pt, uint8_t b, uint32_t& cp) {
  if (pt.n_remain == 0) {
    if (b < 0x80) { cp = b; return true; }
    if (b >= 0xC2 && b <= 0xDF) pt = {(uint32_t)(b & 0x1F), 1, 2};
    else if ((b & 0xF0) == 0xE0) pt = {(uint32_t)(b & 0x0F), 2, 3};
    else if (b >= 0xF0 && b <= 0xF4) pt = {(uint32_t)(b & 0x07), 3, 4};
    else pt.n_remain = -1;  // continuation byte, C0/C1 (overlong), F5..FF
    return false;
  }
  if (pt.n_remain < 0 || (b & 0xC0) != 0x80) {
    pt.n_remain = -1;
    return false;
  }
  pt.value = (pt.value << 6) | (b & 0x3F);
  if (--pt.n_remain == 0) {
    cp = pt.value;
    const int len = pt.len;
    pt = {};
    if (cp < min_of_len(len) || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      pt.n_remain = -1;  // overlong, out of range, or a surrogate
      return false;
    }
    return true;
  }
  return false;
}

}  // namespace

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> g) : g_(std::move(g)) {
  if (!g_) fail("grammar matcher: no grammar");
  reset();
}

void GrammarMatcher::reset() {
  st_ = {};
  const E* p = g_->rules()[g_->root()].data();
  for (;;) {
    Stack s;
    if (!end_of_seq(p)) s.push_back(p);
    advance_stack(s, st_.stacks);
    while (!end_of_seq(p)) p++;
    if (p->type == E::Alt) p++;
    else break;
  }
}

void GrammarMatcher::advance_stack(const Stack& stack, std::vector<Stack>& out) const {
  if (stack.empty() || stack.back()->type != E::RuleRef) {
    if (std::find(out.begin(), out.end(), stack) == out.end()) out.push_back(stack);
    return;
  }
  const E* pos = stack.back();
  const E* sub = g_->rules()[pos->value].data();
  for (;;) {
    Stack ns(stack.begin(), stack.end() - 1);
    if (!end_of_seq(pos + 1)) ns.push_back(pos + 1);
    if (!end_of_seq(sub)) ns.push_back(sub);
    advance_stack(ns, out);
    while (!end_of_seq(sub)) sub++;
    if (sub->type == E::Alt) sub++;
    else break;
  }
}

void GrammarMatcher::accept_char(const std::vector<Stack>& stacks, uint32_t cp, std::vector<Stack>& out) const {
  for (const Stack& st : stacks) {
    if (st.empty()) continue;
    const E* after = nullptr;
    if (!match_char(st.back(), cp, after)) continue;
    Stack ns(st.begin(), st.end() - 1);
    if (!end_of_seq(after)) ns.push_back(after);
    advance_stack(ns, out);
  }
}

bool GrammarMatcher::step_byte(const State& from, uint8_t byte, State& to) const {
  to.partial = from.partial;
  uint32_t cp = 0;
  if (utf8_byte(to.partial, byte, cp)) {
    to.stacks.clear();
    accept_char(from.stacks, cp, to.stacks);
    return !to.stacks.empty();
  }
  if (to.partial.n_remain < 0) return false;
  to.stacks = from.stacks;
  return partial_ok(to.stacks, to.partial);
}

bool GrammarMatcher::token_end_ok(const State& s) const { return partial_ok(s.stacks, s.partial); }

bool GrammarMatcher::can_accept(std::string_view bytes) const {
  const std::vector<Stack>* cur = &st_.stacks;
  std::vector<Stack> a, b;
  Partial pt = st_.partial;
  for (unsigned char c : bytes) {
    uint32_t cp = 0;
    if (utf8_byte(pt, c, cp)) {
      std::vector<Stack>* next = cur == &a ? &b : &a;
      next->clear();
      accept_char(*cur, cp, *next);
      if (next->empty()) return false;
      cur = next;
    } else if (pt.n_remain < 0) {
      return false;
    }
  }
  return partial_ok(*cur, pt);
}

bool GrammarMatcher::accept(std::string_view bytes) {
  State cur = st_, next;
  for (unsigned char c : bytes) {
    uint32_t cp = 0;
    if (utf8_byte(cur.partial, c, cp)) {
      next.stacks.clear();
      accept_char(cur.stacks, cp, next.stacks);
      if (next.stacks.empty()) return false;
      std::swap(cur.stacks, next.stacks);
    } else if (cur.partial.n_remain < 0) {
      return false;
    }
  }
  if (!partial_ok(cur.stacks, cur.partial)) return false;
  st_ = std::move(cur);
  return true;
}

bool GrammarMatcher::can_end() const {
  if (st_.partial.n_remain != 0) return false;
  for (const auto& s : st_.stacks)
    if (s.empty()) return true;
  return false;
}

bool GrammarMatcher::is_complete() const {
  if (st_.partial.n_remain != 0) return false;
  for (const auto& s : st_.stacks)
    if (!s.empty()) return false;
  return !st_.stacks.empty();
}

}  // namespace knot
