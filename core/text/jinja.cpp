// jinja.cpp — chat-template Jinja subset: segmenter (whitespace control, trim_blocks,
// lstrip_blocks) -> expression lexer -> recursive-descent parser (Jinja2's precedence)
// -> tree-walking evaluator. See jinja.h for what is supported.
#include "text/jinja.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>

#include <nlohmann/json.hpp>

#include "kernels/common.h"

namespace knot::jinja {

namespace {

[[noreturn]] void err(int line, const std::string& msg) {
  fail("chat template: line " + std::to_string(line) + ": " + msg);
}

constexpr int kMaxDepth = 128;          // nesting of expressions and blocks
constexpr size_t kMaxOutput = 64 << 20;  // rendered bytes, and any one string
constexpr long long kMaxSteps = 2000000;   // expression evaluations + loop iterations
constexpr int kMaxValueDepth = 256;      // nesting of lists/dicts (JSON input, printing)

// ---- values --------------------------------------------------------------------------

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::Undefined: case Value::None: return false;
    case Value::Bool: return v.b;
    case Value::Int: return v.i != 0;
    case Value::Float: return v.f != 0;
    case Value::Str: return !v.s.empty();
    case Value::Array: return !v.arr->empty();
    case Value::Object: return !v.obj->empty();
    case Value::Func: return true;
  }
  return false;
}

const char* kind_name(const Value& v) {
  static const char* n[] = {"undefined", "none", "boolean", "integer", "float", "string", "list", "dict", "function"};
  return n[v.kind];
}

std::string py_float(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[64];
  for (int prec = 1; prec <= 17; prec++) {  // shortest text that reads back exactly, as Python's repr
    std::snprintf(buf, sizeof buf, "%.*g", prec, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  std::string s(buf);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

std::string repr(const Value& v, int depth = 0);

std::string to_str(const Value& v) {  // what {{ v }} prints (Python str())
  switch (v.kind) {
    case Value::Undefined: return "";
    case Value::None: return "None";
    case Value::Bool: return v.b ? "True" : "False";
    case Value::Int: return std::to_string(v.i);
    case Value::Float: return py_float(v.f);
    case Value::Str: return v.s;
    default: return repr(v);
  }
}

std::string repr(const Value& v, int depth) {  // Python repr() of lists and dicts
  if (depth > kMaxValueDepth) err(0, "value nested deeper than " + std::to_string(kMaxValueDepth));
  if (v.kind == Value::Str) {
    std::string o = "'";
    for (char c : v.s) {
      if (c == '\'' || c == '\\') o += '\\';
      if (c == '\n') { o += "\\n"; continue; }
      o += c;
    }
    return o + "'";
  }
  if (v.kind == Value::Array) {
    std::string o = "[";
    for (size_t k = 0; k < v.arr->size(); k++) o += (k ? ", " : "") + repr((*v.arr)[k], depth + 1);
    return o + "]";
  }
  if (v.kind == Value::Object) {
    std::string o = "{";
    for (size_t k = 0; k < v.obj->size(); k++)
      o += (k ? ", " : "") + repr(Value::str((*v.obj)[k].first)) + ": " + repr((*v.obj)[k].second, depth + 1);
    return o + "}";
  }
  if (v.kind == Value::Func) return "<function " + v.s + ">";
  return to_str(v);
}

// json.dumps(x, ensure_ascii=False[, indent]) as transformers' tojson filter.
void dump_json(const Value& v, std::string& o, int indent, int level, int line) {
  if (level > kMaxValueDepth) err(line, "tojson: value nested deeper than " + std::to_string(kMaxValueDepth));
  if (o.size() > kMaxOutput) err(line, "tojson: output too large");
  auto nl = [&](int lv) {
    if (indent < 0) return;
    o += '\n';
    o.append((size_t)(indent * lv), ' ');
  };
  switch (v.kind) {
    case Value::Undefined: err(line, "tojson of an undefined value");
    case Value::None: o += "null"; return;
    case Value::Bool: o += v.b ? "true" : "false"; return;
    case Value::Int: o += std::to_string(v.i); return;
    case Value::Float: o += py_float(v.f); return;
    case Value::Func: err(line, "tojson of a function");
    case Value::Str:
      o += '"';
      for (unsigned char c : v.s) {
        switch (c) {
          case '"': o += "\\\""; break;
          case '\\': o += "\\\\"; break;
          case '\n': o += "\\n"; break;
          case '\r': o += "\\r"; break;
          case '\t': o += "\\t"; break;
          case '\b': o += "\\b"; break;
          case '\f': o += "\\f"; break;
          default:
            if (c < 0x20) {
              char b[8];
              std::snprintf(b, sizeof b, "\\u%04x", c);
              o += b;
            } else {
              o += (char)c;
            }
        }
      }
      o += '"';
      return;
    case Value::Array:
      if (v.arr->empty()) { o += "[]"; return; }
      o += '[';
      for (size_t k = 0; k < v.arr->size(); k++) {
        if (k) o += indent < 0 ? ", " : ",";
        nl(level + 1);
        dump_json((*v.arr)[k], o, indent, level + 1, line);
      }
      nl(level);
      o += ']';
      return;
    case Value::Object:
      if (v.obj->empty()) { o += "{}"; return; }
      o += '{';
      for (size_t k = 0; k < v.obj->size(); k++) {
        if (k) o += indent < 0 ? ", " : ",";
        nl(level + 1);
        dump_json(Value::str((*v.obj)[k].first), o, indent, level + 1, line);
        o += ": ";
        dump_json((*v.obj)[k].second, o, indent, level + 1, line);
      }
      nl(level);
      o += '}';
      return;
  }
}

bool equal(const Value& a, const Value& b, int depth = 0) {
  if (depth > kMaxValueDepth) err(0, "comparison of values nested deeper than " + std::to_string(kMaxValueDepth));
  const bool an = a.kind == Value::Int || a.kind == Value::Float || a.kind == Value::Bool;
  const bool bn = b.kind == Value::Int || b.kind == Value::Float || b.kind == Value::Bool;
  if (an && bn) {
    auto num = [](const Value& v) { return v.kind == Value::Float ? v.f : v.kind == Value::Int ? (double)v.i : (double)v.b; };
    return num(a) == num(b);
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Undefined: case Value::None: return true;
    case Value::Str: return a.s == b.s;
    case Value::Array:
      if (a.arr->size() != b.arr->size()) return false;
      for (size_t k = 0; k < a.arr->size(); k++)
        if (!equal((*a.arr)[k], (*b.arr)[k], depth + 1)) return false;
      return true;
    case Value::Object:
      if (a.obj->size() != b.obj->size()) return false;
      for (const auto& [key, val] : *a.obj)
        if (!equal(val, b.get(key), depth + 1)) return false;
      return true;
    case Value::Func: return a.s == b.s;
    default: return false;
  }
}

// ---- segments and lexer --------------------------------------------------------------

struct Tok {
  enum Type { Name, Int, Float, Str, Op, End } type = End;
  std::string s;
  long long i = 0;
  double f = 0;
  int line = 0;
};

struct Segment {
  enum Kind { Text, Expr, Stmt } kind;
  std::string text;         // Text
  std::vector<Tok> toks;    // Expr / Stmt (ends with an End token)
  int line = 0;
};

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// Lexes one tag's content starting at src[p]; stops at the closer ("}}" or "%}", with an
// optional '-' before it). Returns the position after the closer, sets strip_after.
size_t lex_tag(const std::string& src, size_t p, const char* closer, int& line, std::vector<Tok>& out, bool& strip_after) {
  const int line0 = line;
  while (true) {
    while (p < src.size() && is_ws(src[p])) {
      if (src[p] == '\n') line++;
      p++;
    }
    if (p >= src.size()) err(line0, std::string("tag not closed (missing '") + closer + "')");
    if (src[p] == '-' && src.compare(p + 1, 2, closer) == 0) { strip_after = true; p += 3; break; }
    if (src.compare(p, 2, closer) == 0) { strip_after = false; p += 2; break; }
    if (src[p] == '+' && src.compare(p + 1, 2, closer) == 0) { strip_after = false; p += 3; break; }
    Tok t;
    t.line = line;
    const char c = src[p];
    if (std::isalpha((unsigned char)c) || c == '_') {
      size_t q = p;
      while (q < src.size() && (std::isalnum((unsigned char)src[q]) || src[q] == '_')) q++;
      t.type = Tok::Name;
      t.s = src.substr(p, q - p);
      p = q;
    } else if (std::isdigit((unsigned char)c)) {
      size_t q = p;
      while (q < src.size() && (std::isdigit((unsigned char)src[q]) || src[q] == '_')) q++;
      bool is_float = false;
      if (q + 1 < src.size() && src[q] == '.' && std::isdigit((unsigned char)src[q + 1])) {
        is_float = true;
        q++;
        while (q < src.size() && std::isdigit((unsigned char)src[q])) q++;
      }
      if (q < src.size() && (src[q] == 'e' || src[q] == 'E')) {
        size_t e = q + 1;
        if (e < src.size() && (src[e] == '+' || src[e] == '-')) e++;
        if (e < src.size() && std::isdigit((unsigned char)src[e])) {
          is_float = true;
          q = e;
          while (q < src.size() && std::isdigit((unsigned char)src[q])) q++;
        }
      }
      std::string num = src.substr(p, q - p);
      num.erase(std::remove(num.begin(), num.end(), '_'), num.end());
      if (is_float) {
        t.type = Tok::Float;
        t.f = std::strtod(num.c_str(), nullptr);
      } else {
        t.type = Tok::Int;
        auto r = std::from_chars(num.data(), num.data() + num.size(), t.i);
        if (r.ec != std::errc()) err(line, "integer literal out of range: " + num);
      }
      p = q;
    } else if (c == '\'' || c == '"') {
      t.type = Tok::Str;
      size_t q = p + 1;
      while (true) {
        if (q >= src.size()) err(line, "string literal not closed");
        const char d = src[q];
        if (d == c) { q++; break; }
        if (d == '\n') line++;
        if (d != '\\') { t.s += d; q++; continue; }
        if (q + 1 >= src.size()) err(line, "string literal not closed");
        const char e = src[q + 1];
        q += 2;
        switch (e) {
          case 'n': t.s += '\n'; break;
          case 't': t.s += '\t'; break;
          case 'r': t.s += '\r'; break;
          case 'b': t.s += '\b'; break;
          case 'f': t.s += '\f'; break;
          case '0': t.s += '\0'; break;
          case '\\': t.s += '\\'; break;
          case '\'': t.s += '\''; break;
          case '"': t.s += '"'; break;
          case '\n': line++; break;  // line continuation
          case 'x': case 'u': case 'U': {
            const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            if (q + n > src.size()) err(line, "bad \\" + std::string(1, e) + " escape");
            uint32_t cp = 0;
            for (size_t k = 0; k < n; k++) {
              const char h = src[q + k];
              const int d2 = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
              if (d2 < 0) err(line, "bad \\" + std::string(1, e) + " escape");
              cp = cp * 16 + (uint32_t)d2;
            }
            q += n;
            if (cp > 0x10FFFF) err(line, "escape past U+10FFFF");
            if (cp < 0x80) t.s += (char)cp;
            else if (cp < 0x800) { t.s += (char)(0xC0 | (cp >> 6)); t.s += (char)(0x80 | (cp & 0x3F)); }
            else if (cp < 0x10000) { t.s += (char)(0xE0 | (cp >> 12)); t.s += (char)(0x80 | ((cp >> 6) & 0x3F)); t.s += (char)(0x80 | (cp & 0x3F)); }
            else { t.s += (char)(0xF0 | (cp >> 18)); t.s += (char)(0x80 | ((cp >> 12) & 0x3F)); t.s += (char)(0x80 | ((cp >> 6) & 0x3F)); t.s += (char)(0x80 | (cp & 0x3F)); }
            break;
          }
          default: t.s += '\\'; t.s += e;  // Python keeps unknown escapes as they are
        }
      }
      p = q;
    } else {
      static const char* ops2[] = {"==", "!=", "<=", ">=", "//", "**"};
      t.type = Tok::Op;
      for (const char* o : ops2)
        if (src.compare(p, 2, o) == 0) t.s = o;
      if (t.s.empty()) {
        if (c == 0 || !std::strchr("+-*/%~<>=()[]{}.,:|", c)) err(line, std::string("unexpected character '") + c + "' in a tag");
        t.s = std::string(1, c);
      }
      p += t.s.size();
    }
    out.push_back(std::move(t));
  }
  Tok end;
  end.line = line;
  out.push_back(end);
  return p;
}

std::vector<Segment> segment(const std::string& src) {
  std::vector<Segment> segs;
  size_t p = 0;
  int line = 1;
  bool strip_next = false;     // previous tag ended with '-'
  bool trim_newline = false;   // previous tag was a block/comment (trim_blocks)
  bool at_line_start = true;   // the pending text starts at the beginning of a line
  while (p <= src.size()) {
    size_t q = p;
    while (true) {
      q = src.find('{', q);
      if (q == std::string::npos || (q + 1 < src.size() && src[q + 1] != 0 && std::strchr("{%#", src[q + 1]))) break;
      q++;
    }
    std::string text = src.substr(p, (q == std::string::npos ? src.size() : q) - p);
    if (trim_newline && !text.empty() && text[0] == '\n') { text.erase(0, 1); line++; at_line_start = true; }
    if (strip_next) {
      size_t k = 0;
      while (k < text.size() && is_ws(text[k])) { if (text[k] == '\n') { line++; at_line_start = true; } k++; }
      text.erase(0, k);
    }
    for (char c : text) if (c == '\n') line++;
    if (q == std::string::npos) {
      if (!text.empty()) segs.push_back({Segment::Text, text, {}, line});
      break;
    }
    const char kind = src[q + 1];
    size_t r = q + 2;
    bool strip_before = false, keep_ws = false;
    if (r < src.size() && src[r] == '-') { strip_before = true; r++; }
    else if (r < src.size() && src[r] == '+') { keep_ws = true; r++; }
    if (strip_before) {
      while (!text.empty() && is_ws(text.back())) text.pop_back();
    } else if (kind != '{' && !keep_ws) {  // lstrip_blocks
      const size_t nl = text.rfind('\n');
      const size_t from = nl == std::string::npos ? 0 : nl + 1;
      if ((nl != std::string::npos || at_line_start) &&
          std::all_of(text.begin() + (long)from, text.end(), [](char c) { return c == ' ' || c == '\t'; }))
        text.erase(from);
    }
    if (!text.empty()) segs.push_back({Segment::Text, text, {}, line});
    at_line_start = false;
    if (kind == '#') {
      const size_t e = src.find("#}", r);
      if (e == std::string::npos) err(line, "comment not closed (missing '#}')");
      for (size_t k = r; k < e; k++) if (src[k] == '\n') line++;
      strip_next = e > r && src[e - 1] == '-';
      trim_newline = true;
      p = e + 2;
      continue;
    }
    Segment s{kind == '{' ? Segment::Expr : Segment::Stmt, {}, {}, line};
    p = lex_tag(src, r, kind == '{' ? "}}" : "%}", line, s.toks, strip_next);
    trim_newline = kind == '%';
    segs.push_back(std::move(s));
  }
  return segs;
}

// ---- AST -----------------------------------------------------------------------------

struct Expr;
using ExprP = std::unique_ptr<Expr>;
struct Expr {
  enum Kind { Lit, Name, Attr, Index, Slice, Call, Filter, Test, Not, Neg, Bin, Cond, List, Dict } kind;
  int line = 0;
  Value lit;
  std::string name;  // Name, Attr, Call (method or function name), Filter, Test, Bin op
  bool negate = false;
  ExprP a, b, c, d;  // operands
  std::vector<ExprP> args;
  std::vector<std::pair<std::string, ExprP>> kwargs;
};

struct Node;
using Body = std::vector<std::unique_ptr<Node>>;
struct Node {
  enum Kind { Text, Output, If, For, Set, Break, Continue } kind;
  int line = 0;
  std::string text;                                  // Text
  ExprP expr;                                        // Output, For (iterable), Set (value)
  std::vector<std::pair<ExprP, Body>> branches;      // If (cond, body); else: cond null
  std::vector<std::string> vars;                     // For targets, Set: name [, attr]
  ExprP cond;                                        // For filter
  Body body, else_body;                              // For
};

// ---- parser --------------------------------------------------------------------------

class Parser {
 public:
  explicit Parser(std::vector<Segment> segs) : segs_(std::move(segs)) {}

  Body parse_all() {
    std::string end;
    Body b = parse_body({}, end);
    return b;
  }

 private:
  std::vector<Segment> segs_;
  size_t si_ = 0;                // segment index
  const std::vector<Tok>* t_ = nullptr;
  size_t ti_ = 0;                // token index in *t_
  int depth_ = 0;

  const Tok& cur() const { return (*t_)[ti_]; }
  bool is_op(const char* s) const { return cur().type == Tok::Op && cur().s == s; }
  bool is_name(const char* s) const { return cur().type == Tok::Name && cur().s == s; }
  void expect_op(const char* s) {
    if (!is_op(s)) err(cur().line, std::string("expected '") + s + "', found " + describe(cur()));
    ti_++;
  }
  std::string expect_name() {
    if (cur().type != Tok::Name) err(cur().line, "expected a name, found " + describe(cur()));
    return (*t_)[ti_++].s;
  }
  void expect_end() {
    if (cur().type != Tok::End) err(cur().line, "unexpected " + describe(cur()) + " at the end of a tag");
  }
  static std::string describe(const Tok& t) {
    switch (t.type) {
      case Tok::End: return "end of tag";
      case Tok::Str: return "string";
      case Tok::Int: case Tok::Float: return "number";
      default: return "'" + t.s + "'";
    }
  }
  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& q, int line) : p(q) {
      if (++p.depth_ > kMaxDepth) err(line, "nesting deeper than " + std::to_string(kMaxDepth));
    }
    ~DepthGuard() { p.depth_--; }
  };

  // Parses nodes until a {% stmt %} whose keyword is in `ends`; that keyword -> end.
  Body parse_body(const std::vector<std::string>& ends, std::string& end) {
    Body body;
    while (si_ < segs_.size()) {
      Segment& s = segs_[si_];
      if (s.kind == Segment::Text) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Text;
        n->text = s.text;
        body.push_back(std::move(n));
        si_++;
        continue;
      }
      t_ = &s.toks;
      ti_ = 0;
      if (s.kind == Segment::Expr) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Output;
        n->line = s.line;
        n->expr = expr();
        expect_end();
        body.push_back(std::move(n));
        si_++;
        continue;
      }
      const std::string kw = expect_name();
      if (std::find(ends.begin(), ends.end(), kw) != ends.end()) {
        end = kw;
        return body;  // the caller consumes the rest of this tag
      }
      si_++;
      body.push_back(statement(kw, s.line));
    }
    if (!ends.empty()) err(segs_.empty() ? 0 : segs_.back().line, "missing {% " + ends.back() + " %}");
    end.clear();
    return body;
  }

  std::unique_ptr<Node> statement(const std::string& kw, int line) {
    DepthGuard g(*this, line);
    auto n = std::make_unique<Node>();
    n->line = line;
    if (kw == "if") {
      n->kind = Node::If;
      ExprP c = expr();
      expect_end();
      while (true) {
        std::string end;
        Body b = parse_body({"elif", "else", "endif"}, end);
        n->branches.emplace_back(std::move(c), std::move(b));
        if (end == "endif") { expect_end(); si_++; break; }
        if (end == "else") {
          expect_end();
          si_++;
          std::string end2;
          Body eb = parse_body({"endif"}, end2);
          expect_end();
          si_++;
          n->branches.emplace_back(nullptr, std::move(eb));
          break;
        }
        c = expr();  // elif
        expect_end();
        si_++;
      }
    } else if (kw == "for") {
      n->kind = Node::For;
      n->vars.push_back(expect_name());
      while (is_op(",")) { ti_++; n->vars.push_back(expect_name()); }
      if (!is_name("in")) err(cur().line, "expected 'in' in for, found " + describe(cur()));
      ti_++;
      n->expr = or_expr();  // no conditional expression here: "if" starts the filter
      if (is_name("if")) { ti_++; n->cond = expr(); }
      if (is_name("recursive")) err(cur().line, "unsupported Jinja construct 'recursive' loop");
      expect_end();
      std::string end;
      n->body = parse_body({"else", "endfor"}, end);
      expect_end();
      si_++;
      if (end == "else") {
        n->else_body = parse_body({"endfor"}, end);
        expect_end();
        si_++;
      }
    } else if (kw == "set") {
      n->kind = Node::Set;
      n->vars.push_back(expect_name());
      if (is_op(".")) { ti_++; n->vars.push_back(expect_name()); }
      if (!is_op("=")) err(cur().line, "unsupported Jinja construct 'set' block (only {% set x = value %})");
      ti_++;
      n->expr = expr();
      expect_end();
    } else if (kw == "break" || kw == "continue") {
      n->kind = kw == "break" ? Node::Break : Node::Continue;
      expect_end();
    } else {
      err(line, "unsupported Jinja construct '" + kw + "'");
    }
    return n;
  }

  ExprP make(Expr::Kind k, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line;
    return e;
  }

  ExprP expr() {  // conditional: a if c else b
    DepthGuard g(*this, cur().line);
    ExprP a = or_expr();
    if (is_name("if")) {
      auto e = make(Expr::Cond, cur().line);
      ti_++;
      e->b = or_expr();
      if (is_name("else")) { ti_++; e->c = expr(); }
      e->a = std::move(a);
      return e;
    }
    return a;
  }
  ExprP bin(const std::string& op, ExprP l, ExprP r, int line) {
    auto e = make(Expr::Bin, line);
    e->name = op;
    e->a = std::move(l);
    e->b = std::move(r);
    return e;
  }
  ExprP or_expr() {
    ExprP l = and_expr();
    while (is_name("or")) { const int ln = cur().line; ti_++; l = bin("or", std::move(l), and_expr(), ln); }
    return l;
  }
  ExprP and_expr() {
    ExprP l = not_expr();
    while (is_name("and")) { const int ln = cur().line; ti_++; l = bin("and", std::move(l), not_expr(), ln); }
    return l;
  }
  ExprP not_expr() {
    if (is_name("not")) {
      DepthGuard g(*this, cur().line);
      auto e = make(Expr::Not, cur().line);
      ti_++;
      e->a = not_expr();
      return e;
    }
    return compare();
  }
  ExprP compare() {
    ExprP l = math1();
    while (true) {
      const int ln = cur().line;
      if (cur().type == Tok::Op && (cur().s == "==" || cur().s == "!=" || cur().s == "<" || cur().s == "<=" ||
                                    cur().s == ">" || cur().s == ">=")) {
        const std::string op = cur().s;
        ti_++;
        l = bin(op, std::move(l), math1(), ln);
      } else if (is_name("in")) {
        ti_++;
        l = bin("in", std::move(l), math1(), ln);
      } else if (is_name("not") && ti_ + 1 < t_->size() && (*t_)[ti_ + 1].type == Tok::Name && (*t_)[ti_ + 1].s == "in") {
        ti_ += 2;
        l = bin("not in", std::move(l), math1(), ln);
      } else {
        return l;
      }
    }
  }
  ExprP math1() {
    ExprP l = concat();
    while (is_op("+") || is_op("-")) {
      const std::string op = cur().s;
      const int ln = cur().line;
      ti_++;
      l = bin(op, std::move(l), concat(), ln);
    }
    return l;
  }
  ExprP concat() {
    ExprP l = math2();
    while (is_op("~")) { const int ln = cur().line; ti_++; l = bin("~", std::move(l), math2(), ln); }
    return l;
  }
  ExprP math2() {
    ExprP l = power();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string op = cur().s;
      const int ln = cur().line;
      ti_++;
      l = bin(op, std::move(l), power(), ln);
    }
    return l;
  }
  ExprP power() {
    ExprP l = unary();
    while (is_op("**")) { const int ln = cur().line; ti_++; l = bin("**", std::move(l), unary(), ln); }
    return l;
  }
  ExprP unary() {
    DepthGuard g(*this, cur().line);
    if (is_op("-") || is_op("+")) {
      const bool neg = cur().s == "-";
      auto e = make(Expr::Neg, cur().line);
      ti_++;
      e->a = unary();
      if (!neg) return std::move(e->a);
      return e;
    }
    ExprP e = postfix(primary());
    // filters and tests bind tighter than any binary operator
    while (true) {
      if (is_op("|")) {
        auto f = make(Expr::Filter, cur().line);
        ti_++;
        f->name = expect_name();
        f->a = std::move(e);
        if (is_op("(")) call_args(*f);
        e = postfix(std::move(f));
      } else if (is_name("is")) {
        auto t = make(Expr::Test, cur().line);
        ti_++;
        if (is_name("not")) { t->negate = true; ti_++; }
        if (cur().type == Tok::Name) t->name = expect_name();
        else err(cur().line, "expected a test name after 'is', found " + describe(cur()));
        t->a = std::move(e);
        if (is_op("(")) call_args(*t);
        else if (cur().type == Tok::Str || cur().type == Tok::Int || cur().type == Tok::Float)
          t->args.push_back(primary());  // "is divisibleby 3", "is sameas 'x'"
        e = std::move(t);
      } else {
        return e;
      }
    }
  }
  void call_args(Expr& e) {
    expect_op("(");
    while (!is_op(")")) {
      if (cur().type == Tok::Name && ti_ + 1 < t_->size() && (*t_)[ti_ + 1].type == Tok::Op && (*t_)[ti_ + 1].s == "=") {
        std::string k = expect_name();
        ti_++;
        e.kwargs.emplace_back(k, expr());
      } else {
        if (!e.kwargs.empty()) err(cur().line, "positional argument after a keyword argument");
        e.args.push_back(expr());
      }
      if (!is_op(",")) break;
      ti_++;
    }
    expect_op(")");
  }
  ExprP postfix(ExprP e) {
    while (true) {
      const int ln = cur().line;
      if (is_op(".")) {
        ti_++;
        auto a = make(Expr::Attr, ln);
        a->name = cur().type == Tok::Int ? std::to_string(cur().i) : expect_name();
        if (cur().type == Tok::Int) ti_++;
        a->a = std::move(e);
        e = std::move(a);
      } else if (is_op("[")) {
        ti_++;
        ExprP parts[3];
        int n = 0;
        bool slice = false;
        while (true) {
          if (!is_op(":") && !is_op("]")) parts[n] = expr();
          if (is_op(":")) {
            slice = true;
            if (++n > 2) err(ln, "a slice has at most three parts");
            ti_++;
            continue;
          }
          break;
        }
        expect_op("]");
        if (slice) {
          auto s = make(Expr::Slice, ln);
          s->a = std::move(e);
          s->b = std::move(parts[0]);
          s->c = std::move(parts[1]);
          s->d = std::move(parts[2]);
          e = std::move(s);
        } else {
          if (!parts[0]) err(ln, "empty subscript []");
          auto s = make(Expr::Index, ln);
          s->a = std::move(e);
          s->b = std::move(parts[0]);
          e = std::move(s);
        }
      } else if (is_op("(")) {
        auto c = make(Expr::Call, ln);
        c->a = std::move(e);
        call_args(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }
  ExprP primary() {
    DepthGuard g(*this, cur().line);
    const Tok& t = cur();
    auto lit = [&](Value v) {
      auto e = make(Expr::Lit, t.line);
      e->lit = std::move(v);
      ti_++;
      return e;
    };
    switch (t.type) {
      case Tok::Str: {
        std::string s = t.s;
        ti_++;
        while (cur().type == Tok::Str) s += (*t_)[ti_++].s;  // adjacent literals concatenate
        auto e = make(Expr::Lit, t.line);
        e->lit = Value::str(std::move(s));
        return e;
      }
      case Tok::Int: return lit(Value::integer(t.i));
      case Tok::Float: return lit(Value::number(t.f));
      case Tok::Name:
        if (t.s == "true" || t.s == "True") return lit(Value::boolean(true));
        if (t.s == "false" || t.s == "False") return lit(Value::boolean(false));
        if (t.s == "none" || t.s == "None") return lit(Value::none());
        {
          auto e = make(Expr::Name, t.line);
          e->name = t.s;
          ti_++;
          return e;
        }
      case Tok::Op:
        if (t.s == "(") {
          ti_++;
          ExprP e = expr();
          if (is_op(",")) err(t.line, "unsupported Jinja construct 'tuple'");
          expect_op(")");
          return e;
        }
        if (t.s == "[") {
          auto e = make(Expr::List, t.line);
          ti_++;
          while (!is_op("]")) {
            e->args.push_back(expr());
            if (!is_op(",")) break;
            ti_++;
          }
          expect_op("]");
          return e;
        }
        if (t.s == "{") {
          auto e = make(Expr::Dict, t.line);
          ti_++;
          while (!is_op("}")) {
            ExprP k = expr();
            expect_op(":");
            e->args.push_back(std::move(k));
            e->kwargs.emplace_back("", expr());
            if (!is_op(",")) break;
            ti_++;
          }
          expect_op("}");
          return e;
        }
        break;
      default:
        break;
    }
    err(t.line, "unexpected " + describe(t) + " in an expression");
  }
};

// ---- evaluator -----------------------------------------------------------------------

enum class Flow { Normal, Break, Continue };

struct Scope {
  std::vector<std::pair<std::string, Value>> vars;
  Value* find(const std::string& k) {
    for (auto& [n, v] : vars)
      if (n == k) return &v;
    return nullptr;
  }
  void set(const std::string& k, Value v) {
    if (Value* p = find(k)) *p = std::move(v);
    else vars.emplace_back(k, std::move(v));
  }
};

std::string strip_chars(const std::string& s, const std::string& chars, bool left, bool right) {
  size_t a = 0, b = s.size();
  if (left) while (a < b && chars.find(s[a]) != std::string::npos) a++;
  if (right) while (b > a && chars.find(s[b - 1]) != std::string::npos) b--;
  return s.substr(a, b - a);
}
const std::string kSpace = " \t\n\r\v\f";

class Evaluator {
 public:
  explicit Evaluator(const Value& globals) {
    scopes_.emplace_back();
    if (globals.kind == Value::Object)
      for (const auto& [k, v] : *globals.obj) scopes_.back().set(k, v);
  }

  void run(const Body& body, std::string& out) { exec(body, out); }

 private:
  std::vector<Scope> scopes_;
  int depth_ = 0;
  long long steps_ = 0;

  Value lookup(const std::string& k) {
    for (size_t i = scopes_.size(); i-- > 0;)
      if (Value* v = scopes_[i].find(k)) return *v;
    if (k == "namespace" || k == "raise_exception" || k == "range") {
      Value f;
      f.kind = Value::Func;
      f.s = k;
      return f;
    }
    return Value();
  }

  Flow exec(const Body& body, std::string& out) {
    if (++depth_ > kMaxDepth) err(body.empty() ? 0 : body[0]->line, "nesting deeper than " + std::to_string(kMaxDepth));
    struct Dec { int& d; ~Dec() { d--; } } dec{depth_};
    for (const auto& n : body) {
      Flow f = exec(*n, out);
      if (f != Flow::Normal) return f;
      if (out.size() > kMaxOutput) err(n->line, "output larger than " + std::to_string(kMaxOutput >> 20) + " MiB");
    }
    return Flow::Normal;
  }

  Flow exec(const Node& n, std::string& out) {
    switch (n.kind) {
      case Node::Text: out += n.text; return Flow::Normal;
      case Node::Output: out += to_str(eval(*n.expr)); return Flow::Normal;
      case Node::Break: return Flow::Break;
      case Node::Continue: return Flow::Continue;
      case Node::Set: {
        Value v = eval(*n.expr);
        if (n.vars.size() == 1) {
          scopes_.back().set(n.vars[0], std::move(v));
        } else {
          Value target = lookup(n.vars[0]);
          if (target.kind != Value::Object) err(n.line, "cannot set attribute '" + n.vars[1] + "' of " + kind_name(target) + " '" + n.vars[0] + "'");
          if (holds(v, target.obj.get(), 0)) err(n.line, "cyclic assignment: '" + n.vars[0] + "' would contain itself");
          target.set(n.vars[1], std::move(v));  // shared: a namespace() changes in place
        }
        return Flow::Normal;
      }
      case Node::If:
        for (const auto& [cond, body] : n.branches)
          if (!cond || truthy(eval(*cond))) return exec(body, out);
        return Flow::Normal;
      case Node::For: {
        Value seq = eval(*n.expr);
        std::vector<Value> items;
        if (seq.kind == Value::Array) items = *seq.arr;
        else if (seq.kind == Value::Object) for (const auto& kv : *seq.obj) items.push_back(Value::str(kv.first));
        else if (seq.kind == Value::Str) for (char c : seq.s) items.push_back(Value::str(std::string(1, c)));
        else if (seq.kind != Value::Undefined && seq.kind != Value::None)
          err(n.line, std::string("cannot loop over a ") + kind_name(seq));
        if (n.cond) {  // the filter sees the loop variable, not loop.*
          std::vector<Value> kept;
          for (const Value& it : items) {
            scopes_.emplace_back();
            bind(n, it);
            const bool keep = truthy(eval(*n.cond));
            scopes_.pop_back();
            if (keep) kept.push_back(it);
          }
          items.swap(kept);
        }
        if (items.empty()) return exec(n.else_body, out) == Flow::Break ? Flow::Normal : Flow::Normal;
        const long long len = (long long)items.size();
        for (long long k = 0; k < len; k++) {
          step(n.line);
          scopes_.emplace_back();
          Value loop = Value::object();
          loop.set("index0", Value::integer(k));
          loop.set("index", Value::integer(k + 1));
          loop.set("revindex0", Value::integer(len - 1 - k));
          loop.set("revindex", Value::integer(len - k));
          loop.set("first", Value::boolean(k == 0));
          loop.set("last", Value::boolean(k == len - 1));
          loop.set("length", Value::integer(len));
          loop.set("previtem", k > 0 ? items[(size_t)k - 1] : Value());
          loop.set("nextitem", k + 1 < len ? items[(size_t)k + 1] : Value());
          scopes_.back().set("loop", loop);
          bind(n, items[(size_t)k]);
          Flow f = exec(n.body, out);
          scopes_.pop_back();
          if (f == Flow::Break) break;
        }
        return Flow::Normal;
      }
    }
    return Flow::Normal;
  }

  // True when v is, or (within the depth limit) contains, the object o.
  static bool holds(const Value& v, const void* o, int depth) {
    if (depth > kMaxValueDepth) return true;
    if (v.kind == Value::Object) {
      if (v.obj.get() == o) return true;
      for (const auto& kv : *v.obj)
        if (holds(kv.second, o, depth + 1)) return true;
    } else if (v.kind == Value::Array) {
      for (const Value& x : *v.arr)
        if (holds(x, o, depth + 1)) return true;
    }
    return false;
  }

  void step(int line) {
    if (++steps_ > kMaxSteps) err(line, "template runs too long (more than " + std::to_string(kMaxSteps) + " steps)");
  }

  void bind(const Node& n, const Value& it) {
    if (n.vars.size() == 1) { scopes_.back().set(n.vars[0], it); return; }
    if (it.kind != Value::Array || it.arr->size() != n.vars.size())
      err(n.line, "cannot unpack a " + std::string(kind_name(it)) + " into " + std::to_string(n.vars.size()) + " loop variables");
    for (size_t k = 0; k < n.vars.size(); k++) scopes_.back().set(n.vars[k], (*it.arr)[k]);
  }

  static long long as_int(const Value& v, int line, const char* what) {
    if (v.kind == Value::Int) return v.i;
    if (v.kind == Value::Bool) return v.b;
    err(line, std::string(what) + " must be an integer, got " + kind_name(v));
  }

  Value attr(const Value& o, const std::string& name, int line) {
    if (o.kind == Value::Undefined) err(line, "'" + name + "' of an undefined value");
    if (o.kind == Value::Object) return o.get(name);
    return Value();  // Jinja: a missing attribute is undefined
  }

  Value index(const Value& o, const Value& k, int line) {
    if (o.kind == Value::Undefined) err(line, "subscript of an undefined value");
    if (o.kind == Value::Object) {
      if (k.kind != Value::Str) return Value();
      return o.get(k.s);
    }
    if (o.kind == Value::Array || o.kind == Value::Str) {
      if (k.kind != Value::Int) err(line, std::string("list index must be an integer, got ") + kind_name(k));
      const long long n = o.kind == Value::Array ? (long long)o.arr->size() : (long long)o.s.size();
      long long i = k.i < 0 ? k.i + n : k.i;
      if (i < 0 || i >= n) return Value();  // undefined, as Jinja
      return o.kind == Value::Array ? (*o.arr)[(size_t)i] : Value::str(std::string(1, o.s[(size_t)i]));
    }
    return Value();
  }

  Value slice(const Value& o, const Expr& e) {
    if (o.kind != Value::Array && o.kind != Value::Str) err(e.line, std::string("cannot slice a ") + kind_name(o));
    const long long n = o.kind == Value::Array ? (long long)o.arr->size() : (long long)o.s.size();
    long long step = e.d ? as_int(eval(*e.d), e.line, "slice step") : 1;
    if (step == 0) err(e.line, "slice step cannot be zero");
    auto bound = [&](const ExprP& x, long long dflt) {
      if (!x) return dflt;
      Value v = eval(*x);
      if (v.kind == Value::None) return dflt;
      long long i = as_int(v, e.line, "slice index");
      if (i < 0) i += n;
      if (step > 0) return std::clamp(i, 0LL, n);
      return std::clamp(i, -1LL, n - 1);
    };
    const long long a = bound(e.b, step > 0 ? 0 : n - 1), b = bound(e.c, step > 0 ? n : -1);
    Value r = o.kind == Value::Array ? Value::array() : Value::str("");
    for (long long i = a; step > 0 ? i < b : i > b; i += step) {
      if (o.kind == Value::Array) r.arr->push_back((*o.arr)[(size_t)i]);
      else r.s += o.s[(size_t)i];
    }
    return r;
  }

  Value arg(const Expr& e, size_t pos, const char* kw, Value dflt = Value()) {
    if (pos < e.args.size()) return eval(*e.args[pos]);
    for (const auto& [k, v] : e.kwargs)
      if (k == kw) return eval(*v);
    return dflt;
  }

  static std::string need_str(const Value& v, int line, const std::string& what) {
    if (v.kind != Value::Str) err(line, what + " needs a string, got " + kind_name(v));
    return v.s;
  }

  Value call(const Expr& e) {
    const Expr& fn = *e.a;
    if (fn.kind == Expr::Attr) return method(eval(*fn.a), fn.name, e);
    Value f = eval(fn);
    if (f.kind != Value::Func) err(e.line, std::string("cannot call a ") + kind_name(f) + (fn.kind == Expr::Name ? " '" + fn.name + "'" : ""));
    if (f.s == "namespace") {
      Value ns = Value::object();
      for (const auto& [k, v] : e.kwargs) ns.set(k, eval(*v));
      return ns;
    }
    if (f.s == "raise_exception") fail("chat template raised an exception: " + to_str(arg(e, 0, "message")));
    if (f.s == "range") {
      long long a = 0, b = as_int(arg(e, 0, "stop"), e.line, "range()"), step = 1;
      if (e.args.size() >= 2) { a = b; b = as_int(eval(*e.args[1]), e.line, "range()"); }
      if (e.args.size() >= 3) step = as_int(eval(*e.args[2]), e.line, "range()");
      if (step == 0) err(e.line, "range() step cannot be zero");
      Value r = Value::array();
      for (long long i = a; step > 0 ? i < b : i > b; i += step) {
        if (r.arr->size() >= 1000000) err(e.line, "range() longer than 1000000");
        r.arr->push_back(Value::integer(i));
      }
      return r;
    }
    err(e.line, "unknown function '" + f.s + "'");
  }

  Value method(const Value& o, const std::string& m, const Expr& e) {
    const int ln = e.line;
    if (o.kind == Value::Str) {
      const std::string& s = o.s;
      if (m == "startswith" || m == "endswith") {
        const std::string x = need_str(arg(e, 0, "prefix"), ln, m + "()");
        if (x.size() > s.size()) return Value::boolean(false);
        return Value::boolean(m == "startswith" ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0);
      }
      if (m == "strip" || m == "lstrip" || m == "rstrip") {
        Value c = arg(e, 0, "chars");
        const std::string chars = c.kind == Value::Str ? c.s : kSpace;
        return Value::str(strip_chars(s, chars, m != "rstrip", m != "lstrip"));
      }
      if (m == "split") {
        Value sep = arg(e, 0, "sep");
        const long long maxsplit = e.args.size() > 1 || !e.kwargs.empty() ? as_int(arg(e, 1, "maxsplit", Value::integer(-1)), ln, "maxsplit") : -1;
        Value r = Value::array();
        if (sep.kind == Value::None || sep.kind == Value::Undefined) {
          size_t i = 0;
          long long n = 0;
          while (true) {
            while (i < s.size() && kSpace.find(s[i]) != std::string::npos) i++;
            if (i >= s.size()) break;
            if (maxsplit >= 0 && n == maxsplit) { r.arr->push_back(Value::str(strip_chars(s.substr(i), kSpace, false, true))); break; }
            size_t j = i;
            while (j < s.size() && kSpace.find(s[j]) == std::string::npos) j++;
            r.arr->push_back(Value::str(s.substr(i, j - i)));
            n++;
            i = j;
          }
          return r;
        }
        const std::string d = need_str(sep, ln, "split()");
        if (d.empty()) err(ln, "split(): empty separator");
        size_t i = 0;
        long long n = 0;
        while (true) {
          const size_t j = s.find(d, i);
          if (j == std::string::npos || (maxsplit >= 0 && n == maxsplit)) { r.arr->push_back(Value::str(s.substr(i))); break; }
          r.arr->push_back(Value::str(s.substr(i, j - i)));
          i = j + d.size();
          n++;
        }
        return r;
      }
      if (m == "upper" || m == "lower") {
        std::string r = s;
        for (char& c : r) c = (char)(m == "upper" ? std::toupper((unsigned char)c) : std::tolower((unsigned char)c));
        return Value::str(r);
      }
      if (m == "title" || m == "capitalize") return filter_str(m, s);
      if (m == "replace") {
        const std::string a = need_str(arg(e, 0, "old"), ln, "replace()"), b = need_str(arg(e, 1, "new"), ln, "replace()");
        return Value::str(replace_all(s, a, b, ln));
      }
      if (m == "format") err(ln, "unsupported Jinja construct 'str.format'");
    }
    if (o.kind == Value::Object) {
      if (m == "items" || m == "keys" || m == "values") {
        Value r = Value::array();
        for (const auto& [k, v] : *o.obj) {
          if (m == "keys") r.arr->push_back(Value::str(k));
          else if (m == "values") r.arr->push_back(v);
          else {
            Value p = Value::array();
            p.arr->push_back(Value::str(k));
            p.arr->push_back(v);
            r.arr->push_back(p);
          }
        }
        return r;
      }
      if (m == "get") {
        Value v = o.get(need_str(arg(e, 0, "key"), ln, "get()"));
        return v.kind == Value::Undefined ? arg(e, 1, "default", Value::none()) : v;
      }
      Value f = o.get(m);
      if (f.kind == Value::Undefined) err(ln, "dict has no method '" + m + "'");
    }
    if (o.kind == Value::Undefined) err(ln, "'" + m + "()' called on an undefined value");
    err(ln, std::string("unknown method '") + m + "' of a " + kind_name(o));
  }

  static std::string replace_all(const std::string& s, const std::string& a, const std::string& b, int line) {
    if (a.empty()) err(line, "replace(): empty search string");
    std::string r;
    size_t i = 0;
    while (true) {
      const size_t j = s.find(a, i);
      if (j == std::string::npos) { r.append(s, i); break; }
      r.append(s, i, j - i);
      r += b;
      i = j + a.size();
      if (r.size() > kMaxOutput) err(line, "replace() result too large");
    }
    return r;
  }

  static Value filter_str(const std::string& m, const std::string& s) {
    std::string r = s;
    if (m == "capitalize") {
      for (char& c : r) c = (char)std::tolower((unsigned char)c);
      if (!r.empty()) r[0] = (char)std::toupper((unsigned char)r[0]);
    } else {  // title
      bool start = true;
      for (char& c : r) {
        const bool alpha = std::isalpha((unsigned char)c);
        c = (char)(alpha ? (start ? std::toupper((unsigned char)c) : std::tolower((unsigned char)c)) : c);
        start = !alpha;
      }
    }
    return Value::str(r);
  }

  Value filter(const Expr& e) {
    Value v = eval(*e.a);
    const std::string& f = e.name;
    const int ln = e.line;
    if (f == "length" || f == "count") {
      if (v.kind == Value::Str) return Value::integer((long long)v.s.size());
      if (v.kind == Value::Array) return Value::integer((long long)v.arr->size());
      if (v.kind == Value::Object) return Value::integer((long long)v.obj->size());
      if (v.kind == Value::Undefined) return Value::integer(0);
      err(ln, std::string("length of a ") + kind_name(v));
    }
    if (f == "trim") {
      Value c = arg(e, 0, "chars");
      return Value::str(strip_chars(to_str(v), c.kind == Value::Str ? c.s : kSpace, true, true));
    }
    if (f == "tojson") {
      Value ind = arg(e, 0, "indent");
      std::string o;
      dump_json(v, o, ind.kind == Value::Int ? (int)std::clamp(ind.i, 0LL, 64LL) : -1, 0, ln);
      return Value::str(o);
    }
    if (f == "string") return Value::str(to_str(v));
    if (f == "upper" || f == "lower") {
      std::string r = to_str(v);
      for (char& c : r) c = (char)(f == "upper" ? std::toupper((unsigned char)c) : std::tolower((unsigned char)c));
      return Value::str(r);
    }
    if (f == "capitalize" || f == "title") return filter_str(f, to_str(v));
    if (f == "first" || f == "last") {
      if (v.kind == Value::Array) return v.arr->empty() ? Value() : (f == "first" ? v.arr->front() : v.arr->back());
      if (v.kind == Value::Str) return v.s.empty() ? Value() : Value::str(std::string(1, f == "first" ? v.s.front() : v.s.back()));
      err(ln, f + " of a " + kind_name(v));
    }
    if (f == "join") {
      const Value sep = arg(e, 0, "d", Value::str(""));
      if (v.kind != Value::Array) err(ln, std::string("join of a ") + kind_name(v));
      std::string r;
      for (size_t k = 0; k < v.arr->size(); k++) {
        r += (k ? to_str(sep) : "") + to_str((*v.arr)[k]);
        if (r.size() > kMaxOutput) err(ln, "join result too large");
      }
      return Value::str(r);
    }
    if (f == "default" || f == "d") {
      const bool boolean = truthy(arg(e, 1, "boolean", Value::boolean(false)));
      if (v.kind == Value::Undefined || (boolean && !truthy(v))) return arg(e, 0, "default_value", Value::str(""));
      return v;
    }
    if (f == "list") {
      if (v.kind == Value::Array) return v;
      Value r = Value::array();
      if (v.kind == Value::Str) for (char c : v.s) r.arr->push_back(Value::str(std::string(1, c)));
      else if (v.kind == Value::Object) for (const auto& kv : *v.obj) r.arr->push_back(Value::str(kv.first));
      else err(ln, std::string("list of a ") + kind_name(v));
      return r;
    }
    if (f == "reverse") {
      if (v.kind == Value::Str) { std::string r(v.s.rbegin(), v.s.rend()); return Value::str(r); }
      if (v.kind != Value::Array) err(ln, std::string("reverse of a ") + kind_name(v));
      Value r = Value::array();
      r.arr->assign(v.arr->rbegin(), v.arr->rend());
      return r;
    }
    if (f == "items") {
      if (v.kind != Value::Object) err(ln, std::string("items of a ") + kind_name(v));
      Expr dummy;
      dummy.kind = Expr::Call;
      dummy.line = ln;
      return method(v, "items", dummy);
    }
    if (f == "replace") {
      return Value::str(replace_all(to_str(v), need_str(arg(e, 0, "old"), ln, "replace"), need_str(arg(e, 1, "new"), ln, "replace"), ln));
    }
    if (f == "int") {
      if (v.kind == Value::Int) return v;
      if (v.kind == Value::Float) return Value::integer((long long)v.f);
      if (v.kind == Value::Bool) return Value::integer(v.b);
      if (v.kind == Value::Str) {
        long long x = 0;
        auto r = std::from_chars(v.s.data(), v.s.data() + v.s.size(), x);
        return Value::integer(r.ec == std::errc() ? x : 0);
      }
      return Value::integer(0);
    }
    if (f == "abs") {
      if (v.kind == Value::Int) return Value::integer(v.i < 0 ? -v.i : v.i);
      if (v.kind == Value::Float) return Value::number(std::fabs(v.f));
      err(ln, std::string("abs of a ") + kind_name(v));
    }
    if (f == "selectattr" || f == "rejectattr") {
      if (v.kind != Value::Array) err(ln, f + " of a " + kind_name(v));
      const std::string a = need_str(arg(e, 0, "attr"), ln, f);
      Value r = Value::array();
      for (const Value& it : *v.arr) {
        Value x = attr(it, a, ln);
        bool ok;
        if (e.args.size() < 2) ok = truthy(x);
        else {
          std::vector<Value> targs;
          for (size_t k = 2; k < e.args.size(); k++) targs.push_back(eval(*e.args[k]));
          ok = test(need_str(eval(*e.args[1]), ln, f), x, targs, ln);
        }
        if (ok == (f == "selectattr")) r.arr->push_back(it);
      }
      return r;
    }
    if (f == "select" || f == "reject") {  // select(test, args...): the items passing the test (truthy without one)
      if (v.kind != Value::Array) err(ln, f + " of a " + kind_name(v));
      Value r = Value::array();
      for (const Value& it : *v.arr) {
        bool ok;
        if (e.args.empty()) ok = truthy(it);
        else {
          std::vector<Value> targs;
          for (size_t k = 1; k < e.args.size(); k++) targs.push_back(eval(*e.args[k]));
          ok = test(need_str(eval(*e.args[0]), ln, f), it, targs, ln);
        }
        if (ok == (f == "select")) r.arr->push_back(it);
      }
      return r;
    }
    if (f == "map") {
      if (v.kind != Value::Array) err(ln, std::string("map of a ") + kind_name(v));
      Value a;
      for (const auto& [k, x] : e.kwargs)
        if (k == "attribute") a = eval(*x);
      if (a.kind != Value::Str) err(ln, "unsupported Jinja construct 'map' without attribute=");
      Value r = Value::array();
      for (const Value& it : *v.arr) r.arr->push_back(attr(it, a.s, ln));
      return r;
    }
    err(ln, "unknown filter '" + f + "'");
  }

  bool test(const std::string& t, const Value& v, const std::vector<Value>& args, int ln) {
    if (t == "defined") return v.kind != Value::Undefined;
    if (t == "undefined") return v.kind == Value::Undefined;
    if (t == "none") return v.kind == Value::None;
    if (t == "boolean") return v.kind == Value::Bool;
    if (t == "true") return v.kind == Value::Bool && v.b;
    if (t == "false") return v.kind == Value::Bool && !v.b;
    if (t == "string") return v.kind == Value::Str;
    if (t == "number") return v.kind == Value::Int || v.kind == Value::Float;
    if (t == "integer") return v.kind == Value::Int;
    if (t == "float") return v.kind == Value::Float;
    if (t == "mapping") return v.kind == Value::Object;
    if (t == "sequence" || t == "iterable") return v.kind == Value::Array || v.kind == Value::Str || v.kind == Value::Object;
    if (t == "callable") return v.kind == Value::Func;
    if (t == "odd" || t == "even") {
      const long long x = as_int(v, ln, t.c_str());
      return (x % 2 != 0) == (t == "odd");
    }
    if (t == "divisibleby") {
      const long long d = as_int(args.empty() ? Value() : args[0], ln, "divisibleby");
      return d != 0 && as_int(v, ln, "divisibleby") % d == 0;
    }
    if (t == "eq" || t == "equalto" || t == "==" || t == "sameas") return !args.empty() && equal(v, args[0]);
    if (t == "ne" || t == "!=") return args.empty() || !equal(v, args[0]);
    if (t == "in") return !args.empty() && contains(args[0], v, ln);
    err(ln, "unknown test '" + t + "'");
  }

  bool contains(const Value& hay, const Value& needle, int ln) {
    if (hay.kind == Value::Str) return hay.s.find(need_str(needle, ln, "'in' on a string")) != std::string::npos;
    if (hay.kind == Value::Array) {
      for (const Value& x : *hay.arr)
        if (equal(x, needle)) return true;
      return false;
    }
    if (hay.kind == Value::Object) return needle.kind == Value::Str && hay.get(needle.s).kind != Value::Undefined;
    if (hay.kind == Value::Undefined) return false;
    err(ln, std::string("'in' on a ") + kind_name(hay));
  }

  static double num(const Value& v) { return v.kind == Value::Float ? v.f : v.kind == Value::Int ? (double)v.i : (double)v.b; }
  static bool is_num(const Value& v) { return v.kind == Value::Int || v.kind == Value::Float || v.kind == Value::Bool; }

  Value binary(const Expr& e) {
    const std::string& op = e.name;
    if (op == "and") { Value l = eval(*e.a); return truthy(l) ? eval(*e.b) : l; }
    if (op == "or") { Value l = eval(*e.a); return truthy(l) ? l : eval(*e.b); }
    const Value l = eval(*e.a), r = eval(*e.b);
    const int ln = e.line;
    if (op == "==") return Value::boolean(equal(l, r));
    if (op == "!=") return Value::boolean(!equal(l, r));
    if (op == "in") return Value::boolean(contains(r, l, ln));
    if (op == "not in") return Value::boolean(!contains(r, l, ln));
    if (op == "~") {
      std::string a = to_str(l), b = to_str(r);
      if (a.size() + b.size() > kMaxOutput) err(ln, "string too large");
      return Value::str(a + b);
    }
    if (op == "<" || op == "<=" || op == ">" || op == ">=") {
      int c;
      if (is_num(l) && is_num(r)) c = num(l) < num(r) ? -1 : num(l) > num(r) ? 1 : 0;
      else if (l.kind == Value::Str && r.kind == Value::Str) c = l.s.compare(r.s);
      else err(ln, std::string("cannot compare ") + kind_name(l) + " with " + kind_name(r));
      return Value::boolean(op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0);
    }
    if (op == "+") {
      if (l.kind == Value::Str && r.kind == Value::Str) {
        if (l.s.size() + r.s.size() > kMaxOutput) err(ln, "string too large");
        return Value::str(l.s + r.s);
      }
      if (l.kind == Value::Array && r.kind == Value::Array) {
        Value o = Value::array();
        *o.arr = *l.arr;
        o.arr->insert(o.arr->end(), r.arr->begin(), r.arr->end());
        return o;
      }
    }
    if (is_num(l) && is_num(r)) {
      const bool ints = l.kind != Value::Float && r.kind != Value::Float;
      const long long a = ints ? (long long)num(l) : 0, b = ints ? (long long)num(r) : 0;
      if (op == "+") return ints ? Value::integer((long long)((unsigned long long)a + (unsigned long long)b)) : Value::number(num(l) + num(r));
      if (op == "-") return ints ? Value::integer((long long)((unsigned long long)a - (unsigned long long)b)) : Value::number(num(l) - num(r));
      if (op == "*") return ints ? Value::integer((long long)((unsigned long long)a * (unsigned long long)b)) : Value::number(num(l) * num(r));
      if (op == "/") {
        if (num(r) == 0) err(ln, "division by zero");
        return Value::number(num(l) / num(r));
      }
      if (op == "//" || op == "%") {
        if (num(r) == 0) err(ln, "division by zero");
        if (ints) {
          if (a == INT64_MIN && b == -1) err(ln, "integer overflow");
          long long q = a / b, m = a % b;
          if (m != 0 && ((m < 0) != (b < 0))) { q--; m += b; }  // Python floors
          return Value::integer(op == "//" ? q : m);
        }
        const double q = std::floor(num(l) / num(r));
        return Value::number(op == "//" ? q : num(l) - q * num(r));
      }
      if (op == "**") return Value::number(std::pow(num(l), num(r)));
    }
    if (l.kind == Value::Undefined || r.kind == Value::Undefined) err(ln, "'" + op + "' on an undefined value");
    err(ln, "unsupported operand types for " + op + ": " + kind_name(l) + " and " + kind_name(r));
  }

  Value eval(const Expr& e) {
    step(e.line);
    if (++depth_ > 4 * kMaxDepth) err(e.line, "expression nesting too deep");
    struct Dec { int& d; ~Dec() { d--; } } dec{depth_};
    switch (e.kind) {
      case Expr::Lit: return e.lit;
      case Expr::Name: return lookup(e.name);
      case Expr::Attr: return attr(eval(*e.a), e.name, e.line);
      case Expr::Index: return index(eval(*e.a), eval(*e.b), e.line);
      case Expr::Slice: return slice(eval(*e.a), e);
      case Expr::Call: return call(e);
      case Expr::Filter: return filter(e);
      case Expr::Test: {
        std::vector<Value> args;
        for (const auto& x : e.args) args.push_back(eval(*x));
        return Value::boolean(test(e.name, eval(*e.a), args, e.line) != e.negate);
      }
      case Expr::Not: return Value::boolean(!truthy(eval(*e.a)));
      case Expr::Neg: {
        Value v = eval(*e.a);
        if (v.kind == Value::Int) return Value::integer((long long)(0ULL - (unsigned long long)v.i));
        if (v.kind == Value::Float) return Value::number(-v.f);
        err(e.line, std::string("unary minus of a ") + kind_name(v));
      }
      case Expr::Bin: return binary(e);
      case Expr::Cond: return truthy(eval(*e.b)) ? eval(*e.a) : (e.c ? eval(*e.c) : Value());
      case Expr::List: {
        Value r = Value::array();
        for (const auto& x : e.args) r.arr->push_back(eval(*x));
        return r;
      }
      case Expr::Dict: {
        Value r = Value::object();
        for (size_t k = 0; k < e.args.size(); k++) r.set(need_str(eval(*e.args[k]), e.line, "dict key"), eval(*e.kwargs[k].second));
        return r;
      }
    }
    return Value();
  }
};

Value from_nlohmann(const nlohmann::ordered_json& j, int depth = 0) {
  if (depth > kMaxValueDepth) fail("JSON nested deeper than " + std::to_string(kMaxValueDepth));
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::integer(j.get<long long>());
    case nlohmann::ordered_json::value_t::number_unsigned: return Value::integer((long long)j.get<unsigned long long>());
    case nlohmann::ordered_json::value_t::number_float: return Value::number(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::str(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      Value r = Value::array();
      for (const auto& x : j) r.arr->push_back(from_nlohmann(x, depth + 1));
      return r;
    }
    case nlohmann::ordered_json::value_t::object: {
      Value r = Value::object();
      for (auto it = j.begin(); it != j.end(); ++it) r.set(it.key(), from_nlohmann(it.value(), depth + 1));
      return r;
    }
    default: return Value();
  }
}

}  // namespace

Value Value::get(const std::string& key) const {
  if (kind != Object) return Value();
  for (const auto& [k, v] : *obj)
    if (k == key) return v;
  return Value();
}

void Value::set(const std::string& key, Value v) {
  for (auto& [k, x] : *obj)
    if (k == key) { x = std::move(v); return; }
  obj->emplace_back(key, std::move(v));
}

struct Template::Impl {
  Body body;
};

Template::Template(const std::string& source) : impl_(std::make_unique<Impl>()) {
  impl_->body = Parser(segment(source)).parse_all();
}
Template::~Template() = default;
Template::Template(Template&&) noexcept = default;

std::string Template::render(const Value& globals) const {
  std::string out;
  Evaluator(globals).run(impl_->body, out);
  return out;
}

Value from_json(const std::string& json_text, const std::string& what) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(json_text, nullptr, false);
  if (j.is_discarded()) fail(what + ": not valid JSON");
  return from_nlohmann(j);
}

}  // namespace knot::jinja
