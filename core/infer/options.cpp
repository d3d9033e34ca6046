// options.cpp — the option table's machinery: the command-line parser, the usage text and
// the options-object reader over the rows of generate_options.cpp and cli_commands.cpp
// (see options.h for the contract).
#include "infer/options.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "infer/cli_commands.h"
#include "infer/generate_options.h"
#include "kernels/common.h"

namespace knot {

namespace {

using json = nlohmann::json;

std::string fmt_int(double x) { return std::to_string((long long)x); }

// "in [0, 1]", ">= 0", "> 0", "in (0, 1]": the range as messages state it.
std::string range_text(const OptionSpec& o) {
  const auto num = [&](double x) { return o.kind == OptKind::Int ? fmt_int(x) : format_g(x); };
  if (o.hi == kUnbounded) return std::string(o.lo_open ? "> " : ">= ") + num(o.lo);
  return std::string("in ") + (o.lo_open ? "(" : "[") + num(o.lo) + ", " + num(o.hi) + (o.hi_open ? ")" : "]");
}

// The range as usage text shows it: "0..1048576", ">= 0" for an int up to INT32_MAX,
// "2^53-1" for the JS-safe bound.
std::string usage_range(const OptionSpec& o) {
  if (o.kind == OptKind::Num) return range_text(o);
  if (o.hi == INT32_MAX) return ">= " + fmt_int(o.lo);
  return fmt_int(o.lo) + ".." + (o.hi == kMaxSafeInt ? "2^53-1" : fmt_int(o.hi));
}

bool in_range(const OptionSpec& o, double x) {
  return (o.lo_open ? x > o.lo : x >= o.lo) && (o.hi_open ? x < o.hi : x <= o.hi);
}

std::string kind_noun(OptKind k) { return k == OptKind::Int ? "an integer" : "a number"; }

[[noreturn]] void range_fail(const std::string& name, const OptionSpec& o, const std::string& got) {
  usage_fail(name + " must be " + kind_noun(o.kind) + " " + range_text(o) + ", got " + got);
}

bool is_int_text(const std::string& v) {  // -?[0-9]+
  size_t i = v.size() > 1 && v[0] == '-' ? 1 : 0;
  if (i >= v.size()) return false;
  for (; i < v.size(); i++)
    if (v[i] < '0' || v[i] > '9') return false;
  return true;
}

bool is_num_text(const std::string& v) {  // [+-]?(d+(.d*)?|.d+)([eE][+-]?d+)?
  size_t i = 0, n = v.size();
  auto digits = [&] {
    size_t s = i;
    while (i < n && v[i] >= '0' && v[i] <= '9') i++;
    return i - s;
  };
  if (i < n && (v[i] == '+' || v[i] == '-')) i++;
  size_t m = digits();
  if (i < n && v[i] == '.') i++, m += digits();
  if (m == 0) return false;
  if (i < n && (v[i] == 'e' || v[i] == 'E')) {
    i++;
    if (i < n && (v[i] == '+' || v[i] == '-')) i++;
    if (digits() == 0) return false;
  }
  return i == n;
}

// Command-line text of option o (as typed: `flag`) -> its JSON value.
json value_from_text(const OptionSpec& o, const std::string& flag, const std::string& v) {
  if (o.kind == OptKind::Int) return json(parse_int_option(flag, v, (long long)o.lo, (long long)o.hi));
  if (o.kind == OptKind::Num) {
    const double d = is_num_text(v) ? std::strtod(v.c_str(), nullptr) : NAN;
    if (!std::isfinite(d)) usage_fail("option " + flag + ": '" + v + "' is not a number");
    if (!in_range(o, d)) range_fail(flag, o, v);
    return json(d);
  }
  if (o.kind == OptKind::Ints) {
    json a = json::array();
    for (size_t b = 0;;) {
      const size_t e = std::min(v.find(',', b), v.size());
      std::string item = v.substr(b, e - b);
      item.erase(0, item.find_first_not_of(' '));
      item.erase(item.find_last_not_of(' ') + 1);
      a.push_back(parse_int_option(flag, item, (long long)o.lo, (long long)o.hi));
      if (e == v.size()) break;
      b = e + 1;
    }
    return a;
  }
  if (o.kind == OptKind::Text && o.lo > 0 && v.empty()) usage_fail(flag + " must not be empty");
  if (o.choices) {
    const std::string_view c = o.choices;
    bool ok = false;
    for (size_t b = 0; b <= c.size();) {
      const size_t e = std::min(c.find('|', b), c.size());
      ok |= c.substr(b, e - b) == v;
      b = e + 1;
    }
    if (!ok) {
      std::string list(c);
      for (char& ch : list)
        if (ch == '|') ch = '/';
      usage_fail(flag + " must be one of " + list + ", got '" + v + "'");
    }
  }
  return json(v);
}

// An options-object value under key -> checked against the same table.
void check_json_value(const OptionSpec& o, const json& v) {
  const std::string key = o.key;
  auto wrong = [&](const char* want) { usage_fail("option " + key + ": " + v.dump() + " is not " + want); };
  switch (o.kind) {
    case OptKind::Int:
      if (!v.is_number() || (v.is_number_float() && v.get<double>() != std::floor(v.get<double>())))
        wrong("an integer");
      if (!in_range(o, v.get<double>())) range_fail(key, o, v.dump());
      break;
    case OptKind::Num:
      if (!v.is_number()) wrong("a number");
      if (!in_range(o, v.get<double>())) range_fail(key, o, v.dump());
      break;
    case OptKind::List:
      if (!v.is_array()) wrong("an array of strings");
      for (const auto& s : v)
        if (!s.is_string()) wrong("an array of strings");
      break;
    case OptKind::Ints:
      if (!v.is_array()) wrong("an array of integers");
      for (const auto& x : v)
        if (!x.is_number_integer() || !in_range(o, x.get<double>())) range_fail(key, o, x.dump());
      break;
    case OptKind::Flag:
      if (json::parse(o.value).is_string() ? !v.is_string() : !v.is_boolean())
        wrong(json::parse(o.value).is_string() ? "a string" : "a boolean");
      break;
    case OptKind::Text:
      if (!v.is_string()) wrong("a string");
      break;
    case OptKind::Json:
      if (!v.is_string() && !v.is_object() && !v.is_boolean()) wrong("a string, an object or a boolean");
      break;
  }
}

std::string flags_text(const OptionSpec& o) {
  std::string s = o.alias ? std::string(o.alias) + ", " + o.flag : std::string(o.flag);
  return o.metavar ? s + " " + o.metavar : s;
}

std::string default_text(const OptionSpec& o) {
  if (o.default_text) return o.default_text;
  if (o.dflt) {
    const json d = json::parse(o.dflt);
    return d.is_string() ? d.get<std::string>() : d.dump();
  }
  if (!o.get) return {};
  const json d = o.get(RunOptions{});
  return d.is_number_float() ? format_g(d.get<double>()) : d.dump();
}

}  // namespace

std::string format_g(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", x);
  return b;
}

long long parse_int_option(const std::string& flag, const std::string& v, long long lo, long long hi) {
  if (!is_int_text(v)) usage_fail("option " + flag + ": '" + v + "' is not an integer");
  long long x = 0;
  auto r = std::from_chars(v.data(), v.data() + v.size(), x);
  if (r.ec != std::errc() || x < lo || x > hi)
    usage_fail(flag + " must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + v);
  return x;
}

const CommandSpec& command_spec(std::string_view name) {
  for (const CommandSpec* c : {&opt::generate_command(), &opt::serve_command(), &opt::mesh_command(), &opt::plan_command(),
                                 &opt::station_command()})
    if (name == c->name) return *c;
  fail("no option spec for command '" + std::string(name) + "'");
}

std::string usage_text(const CommandSpec& cmd, const std::string& prog) {
  size_t w = 19;  // the flags column: as wide as the widest, at least 19
  for (const OptionSpec* o : cmd.options) w = std::max(w, flags_text(*o).size());
  auto line = [&](const std::string& left, const std::string& right) {
    return "  " + left + std::string(w + 2 - left.size(), ' ') + right + "\n";
  };
  std::string out = "usage: " + prog + " " + cmd.name + " " + cmd.synopsis + "\n";
  if (cmd.about) out += cmd.about;
  out += line(cmd.positional, cmd.positional_help);
  for (const OptionSpec* o : cmd.options) {
    std::string h = o->help;
    if (o->kind == OptKind::Int || o->kind == OptKind::Num) {
      const std::string r = usage_range(*o);
      h += (r[0] >= '0' && r[0] <= '9' ? ", " : " ") + r;
    }
    const std::string d = default_text(*o);
    if (!d.empty()) h += " (default " + d + (o->note ? std::string(o->dflt ? "; " : ", ") + o->note : "") + ")";
    out += line(flags_text(*o), h);
  }
  return cmd.epilog ? out + cmd.epilog : out;
}

json parse_command_line(const CommandSpec& cmd, const std::vector<std::string>& args, const std::string& prog) {
  json options = json::object(), cli = json::object(), positional = json::array();
  std::vector<const char*> groups_given;
  for (size_t i = 0; i < args.size(); i++) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") return json{{"action", "help"}};
    const OptionSpec* o = nullptr;
    for (const OptionSpec* c : cmd.options)
      if (a == c->flag || (c->alias && a == c->alias)) o = c;
    if (!o) {
      if (a.size() > 1 && a[0] == '-')
        usage_fail("unknown option " + a + " (see " + prog + " " + cmd.name + " --help)");
      if (!positional.empty()) usage_fail("unexpected argument '" + a + "'");
      positional.push_back(a);
      continue;
    }
    if (o->group) {
      for (const char* g : groups_given)
        if (std::string_view(g) == o->group) {
          std::string flags;
          for (const OptionSpec* c : cmd.options)
            if (c->group && std::string_view(c->group) == o->group)
              flags += (flags.empty() ? "" : " or ") + std::string(c->alias ? c->alias : c->flag);
          usage_fail("give the " + std::string(o->group) + " once (" + flags + ")");
        }
      groups_given.push_back(o->group);
    }
    json& dst = o->set ? options : cli;
    if (o->kind == OptKind::Flag) {
      dst[o->key] = json::parse(o->value);
      continue;
    }
    if (i + 1 >= args.size()) usage_fail("option " + a + " needs a value");
    json v = value_from_text(*o, a, args[++i]);
    if (o->kind == OptKind::List) dst[o->key].push_back(std::move(v));
    else dst[o->key] = std::move(v);
  }
  if (positional.empty()) return json{{"action", "usage"}};
  // a group of which one is required and none was given: "no prompt: pass -p TEXT or ..."
  std::vector<std::string> missing;
  for (const OptionSpec* o : cmd.options) {
    if (!o->group) continue;
    bool given = false;
    for (const char* g : groups_given) given |= std::string_view(g) == o->group;
    if (given) continue;
    std::string flags;
    for (const OptionSpec* c : cmd.options)
      if (c->group && std::string_view(c->group) == o->group)
        flags += (flags.empty() ? "" : " or ") + std::string(c->alias ? c->alias : c->flag) + " " + c->metavar;
    usage_fail("no " + std::string(o->group) + ": pass " + flags);
  }
  for (const OptionSpec* o : cmd.options)
    if (o->dflt && !cli.contains(o->key)) cli[o->key] = json::parse(o->dflt);
  return json{{"action", "run"}, {"args", positional}, {"options", options}, {"cli", cli}};
}

void apply_options(const json& options, RunOptions& out) {
  if (!options.is_object()) usage_fail("options are not a JSON object: " + options.dump());
  for (const auto& [key, v] : options.items()) {
    const OptionSpec* o = nullptr;
    for (const OptionSpec* c : opt::session_option_rows())
      if (key == c->key) o = c;
    if (!o) {
      std::string known;
      for (const OptionSpec* c : opt::session_option_rows()) known += (known.empty() ? "" : ", ") + std::string(c->key);
      usage_fail("unknown option '" + key + "' (known: " + known + ")");
    }
    if (v.is_null()) continue;
    check_json_value(*o, v);
    o->set(out, v);
  }
}

}  // namespace knot
