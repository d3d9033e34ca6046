// json_schema.cpp — JSON Schema -> GBNF (see json_schema.h for the supported subset).
#include "text/json_schema.h"

#include <map>
#include <set>
#include <vector>

#include "kernels/common.h"

namespace knot {

namespace {

using json = nlohmann::ordered_json;

const char* const kPrimitives[][2] = {
    {"space", R"(| " " | "\n" [ \t]{0,20})"},
    {"char", R"([^"\\\x7F\x00-\x1F] | [\\] (["\\/bfnrt] | "u" [0-9a-fA-F]{4}))"},
    {"string", R"("\"" char* "\"" space)"},
    {"integral-part", R"("0" | [1-9] [0-9]{0,15})"},
    {"number", R"("-"? integral-part ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})? space)"},
    {"integer", R"("-"? integral-part space)"},
    {"boolean", R"(("true" | "false") space)"},
    {"null", R"("null" space)"},
    {"value", R"(object | array | string | number | boolean | null)"},
    {"object", R"("{" space (string ":" space value ("," space string ":" space value)*)? "}" space)"},
    {"array", R"("[" space (value ("," space value)*)? "]" space)"},
};
// what each primitive uses
const std::map<std::string, std::vector<std::string>> kDeps = {
    {"string", {"char", "space"}},   {"number", {"integral-part", "space"}},
    {"integer", {"integral-part", "space"}}, {"boolean", {"space"}}, {"null", {"space"}},
    {"value", {"object", "array", "string", "number", "boolean", "null"}},
    {"object", {"space", "string", "value"}}, {"array", {"space", "value"}},
};

const std::set<std::string> kAnnotations = {"title",  "description", "default",  "examples",  "$schema", "$id",
                                            "$comment", "readOnly",  "writeOnly", "deprecated", "$defs", "definitions"};

// A GBNF string literal for bytes s.
std::string literal(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    if (c == '"') o += "\\\"";
    else if (c == '\\') o += "\\\\";
    else if (c == '\n') o += "\\n";
    else if (c == '\r') o += "\\r";
    else if (c == '\t') o += "\\t";
    else if (c < 0x20 || c == 0x7F) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02X", c);
      o += b;
    } else o += (char)c;
  }
  return o + "\"";
}

std::string pointer_token(const std::string& k) {  // RFC 6901 escaping
  std::string o;
  for (char c : k) o += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
  return o;
}

struct Compiler {
  json root;
  std::vector<std::pair<std::string, std::string>> rules;  // in order of creation
  std::set<std::string> names;
  std::set<std::string> prims;
  std::map<std::string, std::string> refs;  // "#/$defs/x" -> rule name

  [[noreturn]] static void refuse(const std::string& what, const std::string& path) {
    usage_fail("json schema: " + what + " (at " + (path.empty() || path[0] != '#' ? "#" + path : path) + ")");
  }

  std::string prim(const std::string& n) {
    if (prims.insert(n).second) {
      auto d = kDeps.find(n);
      if (d != kDeps.end())
        for (const auto& x : d->second) prim(x);
    }
    return n;
  }

  std::string new_rule(const std::string& hint) {
    std::string base;
    for (char c : hint) base += ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) ? c : '-';
    if (base.empty()) base = "r";
    std::string n = base;
    for (int i = 1; names.count(n) || prims.count(n) || is_prim_name(n); i++) n = base + std::to_string(i);
    names.insert(n);
    rules.push_back({n, ""});
    return n;
  }
  static bool is_prim_name(const std::string& n) {
    for (const auto& p : kPrimitives)
      if (n == p[0]) return true;
    return false;
  }
  void set_rule(const std::string& n, const std::string& body) {
    for (auto& r : rules)
      if (r.first == n) r.second = body;
  }

  static void check_keys(const json& s, const std::string& path, const std::set<std::string>& allowed) {
    for (const auto& [k, v] : s.items()) {
      (void)v;
      if (!kAnnotations.count(k) && !allowed.count(k)) refuse("\"" + k + "\" is not supported", path);
    }
  }

  static int count_of(const json& s, const char* key, const std::string& path) {
    if (!s.contains(key)) return -1;
    const json& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 10000)
      refuse(std::string("\"") + key + "\" must be an integer in [0, 10000]", path + "/" + key);
    return v.get<int>();
  }

  // item repeated [min, max] times (max < 0: unbounded), separated by sep
  static std::string repeated(const std::string& item, int min, int max, const std::string& sep) {
    if (max == 0) return "";
    const std::string more = "(" + sep + " " + item + ")";
    const std::string rest = max < 0 ? more + "*" : max - 1 > 0 ? more + "{" + std::to_string(min > 0 ? min - 1 : 0) + "," + std::to_string(max - 1) + "}" : "";
    const std::string one = item + (rest.empty() ? "" : " " + rest);
    return min > 0 ? one : "(" + one + ")?";
  }

  std::string resolve_ref(const std::string& ref, const std::string& path) {
    auto it = refs.find(ref);
    if (it != refs.end()) return it->second;
    std::string key;
    const char* prefixes[] = {"#/$defs/", "#/definitions/"};
    const json* target = nullptr;
    for (const char* p : prefixes) {
      const std::string pre = p;
      if (ref.compare(0, pre.size(), pre) == 0) {
        key = ref.substr(pre.size());
        const std::string section = pre.substr(2, pre.size() - 3);
        if (key.find('/') != std::string::npos) refuse("$ref \"" + ref + "\" is not supported (only #/$defs/NAME and #/definitions/NAME)", path);
        if (!root.is_object() || !root.contains(section) || !root[section].is_object() || !root[section].contains(key))
          refuse("$ref \"" + ref + "\" names no definition", path);
        target = &root[section][key];
      }
    }
    if (ref == "#") target = &root, key = "root-ref";
    if (!target) refuse("$ref \"" + ref + "\" is not supported (only #/$defs/NAME and #/definitions/NAME)", path);
    const std::string n = new_rule("def-" + key);
    refs[ref] = n;  // before visiting: a recursive $ref refers to the rule
    set_rule(n, visit(*target, ref.substr(1).empty() ? "#" : ref, n));
    return n;
  }

  // The GBNF expression for schema s at path (hint: a name for rules it creates).
  std::string visit(const json& s, const std::string& path, const std::string& hint) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) refuse("the schema false matches nothing", path);
      return prim("value");
    }
    if (!s.is_object()) refuse("a schema must be an object or a boolean, got " + s.dump(), path);
    if (s.contains("$ref")) {
      check_keys(s, path, {"$ref"});
      if (!s["$ref"].is_string()) refuse("\"$ref\" must be a string", path + "/$ref");
      return resolve_ref(s["$ref"].get<std::string>(), path);
    }
    for (const char* k : {"anyOf", "oneOf"})
      if (s.contains(k)) {
        check_keys(s, path, {k});
        const json& a = s[k];
        if (!a.is_array() || a.empty()) refuse(std::string("\"") + k + "\" must be a non-empty array", path + "/" + k);
        std::string alts;
        for (size_t i = 0; i < a.size(); i++)
          alts += (i ? " | " : "") + visit(a[i], path + "/" + k + "/" + std::to_string(i), hint + "-" + std::to_string(i));
        return "(" + alts + ")";
      }
    if (s.contains("allOf")) {
      check_keys(s, path, {"allOf"});
      const json& a = s["allOf"];
      if (!a.is_array() || a.size() != 1) refuse("\"allOf\" with other than one schema is not supported", path + "/allOf");
      return visit(a[0], path + "/allOf/0", hint);
    }
    if (s.contains("const")) {
      check_keys(s, path, {"const", "type"});
      return literal(s["const"].dump()) + " " + prim("space");
    }
    if (s.contains("enum")) {
      check_keys(s, path, {"enum", "type"});
      const json& e = s["enum"];
      if (!e.is_array() || e.empty()) refuse("\"enum\" must be a non-empty array", path + "/enum");
      std::string alts;
      for (size_t i = 0; i < e.size(); i++) alts += (i ? " | " : "") + literal(e[i].dump());
      return "(" + alts + ") " + prim("space");
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      const json& t = s["type"];
      if (t.is_string()) types.push_back(t.get<std::string>());
      else if (t.is_array() && !t.empty()) {
        for (size_t i = 0; i < t.size(); i++) {
          if (!t[i].is_string()) refuse("\"type\" must be a string or an array of strings", path + "/type/" + std::to_string(i));
          types.push_back(t[i].get<std::string>());
        }
      } else refuse("\"type\" must be a string or an array of strings", path + "/type");
    } else if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties")) {
      types.push_back("object");
    } else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
      types.push_back("array");
    } else if (s.contains("minLength") || s.contains("maxLength")) {
      types.push_back("string");
    } else {
      check_keys(s, path, {});
      return prim("value");
    }
    // keywords of the types given
    std::set<std::string> allowed = {"type"};
    for (const auto& t : types) {
      if (t == "string") allowed.insert({"minLength", "maxLength"});
      else if (t == "object") allowed.insert({"properties", "required", "additionalProperties"});
      else if (t == "array") allowed.insert({"items", "minItems", "maxItems"});
      else if (t != "number" && t != "integer" && t != "boolean" && t != "null")
        refuse("type \"" + t + "\" is not a JSON Schema type", path + "/type");
    }
    check_keys(s, path, allowed);
    std::string alts;
    for (const auto& t : types) {
      std::string e;
      if (t == "string") e = string_rule(s, path, hint);
      else if (t == "object") e = object_rule(s, path, hint);
      else if (t == "array") e = array_rule(s, path, hint);
      else e = prim(t);
      alts += (alts.empty() ? "" : " | ") + e;
    }
    return types.size() == 1 ? alts : "(" + alts + ")";
  }

  std::string string_rule(const json& s, const std::string& path, const std::string& hint) {
    const int lo = count_of(s, "minLength", path), hi = count_of(s, "maxLength", path);
    if (lo < 0 && hi < 0) return prim("string");
    if (hi >= 0 && lo > hi) refuse("\"minLength\" is above \"maxLength\"", path);
    prim("char"), prim("space");
    const std::string n = new_rule(hint);
    set_rule(n, "\"\\\"\" char{" + std::to_string(std::max(lo, 0)) + "," + (hi >= 0 ? std::to_string(hi) : "") + "} \"\\\"\" space");
    return n;
  }

  std::string array_rule(const json& s, const std::string& path, const std::string& hint) {
    const int lo = count_of(s, "minItems", path), hi = count_of(s, "maxItems", path);
    if (hi >= 0 && lo > hi) refuse("\"minItems\" is above \"maxItems\"", path);
    std::string item;
    const std::string n = new_rule(hint);
    if (!s.contains("items")) item = prim("value");
    else {
      if (s["items"].is_array()) refuse("\"items\" as an array (tuple form) is not supported", path + "/items");
      item = visit(s["items"], path + "/items", hint + "-item");
      if (item.find(' ') != std::string::npos) {
        const std::string r = new_rule(hint + "-item");
        set_rule(r, item);
        item = r;
      }
    }
    prim("space");
    const std::string body = repeated(item, std::max(lo, 0), hi, "\",\" space");
    set_rule(n, "\"[\" space " + (body.empty() ? "" : body + " ") + "\"]\" space");
    return n;
  }

  std::string object_rule(const json& s, const std::string& path, const std::string& hint) {
    if (s.contains("additionalProperties") && !s["additionalProperties"].is_boolean())
      refuse("\"additionalProperties\" with a schema is not supported (only false or true)", path + "/additionalProperties");
    if (!s.contains("properties")) {
      if (s.contains("required") && s["required"].is_array() && !s["required"].empty())
        refuse("\"required\" names properties not declared in \"properties\"", path + "/required");
      return prim("object");
    }
    const json& props = s["properties"];
    if (!props.is_object()) refuse("\"properties\" must be an object", path + "/properties");
    std::set<std::string> req;
    if (s.contains("required")) {
      const json& r = s["required"];
      if (!r.is_array()) refuse("\"required\" must be an array of strings", path + "/required");
      for (size_t i = 0; i < r.size(); i++) {
        if (!r[i].is_string()) refuse("\"required\" must be an array of strings", path + "/required/" + std::to_string(i));
        if (!props.contains(r[i].get<std::string>()))
          refuse("required property \"" + r[i].get<std::string>() + "\" is not declared in \"properties\"", path + "/required/" + std::to_string(i));
        req.insert(r[i].get<std::string>());
      }
    }
    prim("space");
    const std::string n = new_rule(hint);
    std::vector<std::pair<std::string, std::string>> required, optional;  // (name, kv expression)
    for (const auto& [k, v] : props.items()) {
      const std::string val = visit(v, path + "/properties/" + pointer_token(k), hint + "-" + k);
      const std::string kv = literal(json(k).dump()) + " space \":\" space " + val;
      (req.count(k) ? required : optional).push_back({k, kv});
    }
    std::string body = "\"{\" space";
    for (size_t i = 0; i < required.size(); i++) body += (i ? " \",\" space " : " ") + required[i].second;
    if (!optional.empty()) {
      if (!required.empty()) {
        for (const auto& o : optional) body += " (\",\" space " + o.second + ")?";
      } else {
        // the first optional property present has no comma before it: rest_i = kv_i
        // (, kv_j)? ... | rest_{i+1}
        std::string next;
        for (size_t i = optional.size(); i-- > 0;) {
          const std::string r = new_rule(n + "-rest");
          std::string alt = optional[i].second;
          for (size_t j = i + 1; j < optional.size(); j++) alt += " (\",\" space " + optional[j].second + ")?";
          set_rule(r, next.empty() ? alt : alt + " | " + next);
          next = r;
        }
        body += " " + next + "?";
      }
    }
    set_rule(n, body + " \"}\" space");
    return n;
  }

  std::string run(const json& schema) {
    root = schema;
    names.insert("root");
    const std::string top = visit(schema, "", "root");
    std::string out = "root ::= " + top + "\n";
    for (const auto& [n, b] : rules) out += n + " ::= " + b + "\n";
    for (const auto& p : kPrimitives)
      if (prims.count(p[0])) out += std::string(p[0]) + " ::= " + p[1] + "\n";
    return out;
  }
};

}  // namespace

std::string json_schema_to_gbnf(const json& schema) {
  Compiler c;
  return c.run(schema);
}

std::string json_schema_to_gbnf(std::string_view schema_text) {
  json j = json::parse(schema_text, nullptr, false);
  if (j.is_discarded()) usage_fail("json schema: the schema is not valid JSON");
  return json_schema_to_gbnf(j);
}

std::string json_object_gbnf() { return json_schema_to_gbnf(json{{"type", "object"}}); }

}  // namespace knot
