// deployment.cpp — see deployment.h.
#include "infer/deployment.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include "kernels/common.h"

namespace knot {

using ojson = nlohmann::ordered_json;

namespace {

constexpr int kConnections = 6;  // simultaneous outgoing connections per holder (platform limit)
const char* const kCoordinator = "knot-coordinator";
const char* const kWarden = "knot-warden";

std::string script_name(const std::string& member) { return "knot-" + member; }

std::string range_text(const ojson& r) { return "[" + r[0].dump() + "," + r[1].dump() + "]"; }

// cut n into k near-equal parts (workers/lib/topology.mjs cuts, align 1): [0, ..., n]
std::vector<int64_t> cuts(int64_t n, int64_t k) {
  if (!(k >= 1 && k <= n)) fail("cannot cut " + std::to_string(n) + " into " + std::to_string(k) + " parts");
  std::vector<int64_t> out = {0};
  for (int64_t i = 1; i < k; i++) out.push_back((int64_t)std::floor((double)n * (double)i / (double)k + 0.5));
  out.push_back(n);
  return out;
}

size_t member_count(const ojson& t) {
  size_t n = 0;
  for (const auto& s : t["stations"]) n += s["members"].size();
  return n;
}

// workers/lib/topology.mjs fitLinks: chain the stations when their members alone take every
// link of the coordinator, then group the shards behind hubs in the links left.
void fit_links(ojson& t) {
  const size_t members = member_count(t);
  if (members >= (size_t)kConnections) t["chain"] = true;
  const size_t station_links = t.value("chain", false) ? 1 : members;
  const size_t nsh = t["shards"].size();
  if (station_links + nsh > (size_t)kConnections) {
    const int64_t groups = (int64_t)kConnections - (int64_t)station_links;
    if (groups < 1)
      fail("topology: " + std::to_string(members) + " station members leave no link for the shards under " +
           std::to_string(kConnections) + " connections (use a chain)");
    const auto gc = cuts((int64_t)nsh, groups);
    ojson sg = ojson::array();
    for (size_t i = 1; i < gc.size(); i++) {
      ojson g = ojson::array();
      for (int64_t j = gc[i - 1]; j < gc[i]; j++) g.push_back(t["shards"][(size_t)j]["name"]);
      sg.push_back(g);
    }
    t["shardGroups"] = sg;
  }
}

// workers/lib/topology.mjs validateTopology
void validate(const ojson& c, const ojson& t) {
  auto bad = [](const std::string& m) { fail("topology: " + m); };
  // the plan's chunk (the stations' scratch is sized for it) and the latency objective's prefill chunk
  const auto int_in = [](const ojson& v, int64_t hi) { return v.is_number_integer() && v.get<int64_t>() >= 1 && v.get<int64_t>() <= hi; };
  if (t.contains("chunk") && !int_in(t["chunk"], 65536)) bad("chunk must be an integer in [1, 65536], got " + t["chunk"].dump());
  const int64_t chunk_max = t.contains("chunk") ? t["chunk"].get<int64_t>() : 65536;
  if (t.contains("prefill_chunk") && !int_in(t["prefill_chunk"], chunk_max))
    bad("prefill_chunk must be an integer in [1, " + std::to_string(chunk_max) + "] (the chunk), got " + t["prefill_chunk"].dump());
  int64_t l = 0;
  for (const auto& s : t["stations"]) {
    const int64_t l0 = s["layers"][0], l1 = s["layers"][1];
    if (l0 != l || !(l1 > l0)) bad("station layers " + range_text(s["layers"]) + " do not continue from layer " + std::to_string(l));
    l = l1;
    const auto& ms = s["members"];
    if (ms.empty()) bad("station " + range_text(s["layers"]) + " has no members");
    if (ms.size() > 1) {
      const int64_t step = c["n_head"].get<int64_t>() / c["n_head_kv"].get<int64_t>();
      const std::pair<std::string, int64_t> parts[] = {{"heads", c["n_head"].get<int64_t>()}, {"cols", c["n_ff"].get<int64_t>()}};
      for (const auto& [key, total] : parts) {
        int64_t at = 0;
        for (const auto& m : ms) {
          if (!m.contains(key) || m[key][0].get<int64_t>() != at || !(m[key][1].get<int64_t>() > at))
            bad("station " + range_text(s["layers"]) + " member " + m["name"].get<std::string>() + ": " + key + " do not continue from " + std::to_string(at));
          if (key == "heads" && (m[key][0].get<int64_t>() % step || m[key][1].get<int64_t>() % step))
            fail("member " + m["name"].get<std::string>() + ": heads " + range_text(m[key]) + " split a KV group of " + std::to_string(step));
          at = m[key][1];
        }
        if (at != total) bad("station " + range_text(s["layers"]) + ": " + key + " end at " + std::to_string(at) + ", the model has " + std::to_string(total));
      }
    }
  }
  if (l != c["n_layer"].get<int64_t>()) bad("stations end at layer " + std::to_string(l) + ", the model has " + c["n_layer"].dump());
  int64_t v = 0;
  for (const auto& s : t["shards"]) {
    if (s["vocab"][0].get<int64_t>() != v || !(s["vocab"][1].get<int64_t>() > v))
      bad("shard " + s["name"].get<std::string>() + " " + range_text(s["vocab"]) + " does not continue from " + std::to_string(v));
    v = s["vocab"][1];
  }
  if (v != c["n_vocab"].get<int64_t>())
    bad("shards end at " + std::to_string(v) + ", the tokenizer has " + c["n_vocab"].dump() + " tokens (padding rows are owned by none)");
  std::set<std::string> names;
  size_t n = 0;
  for (const auto& s : t["stations"])
    for (const auto& m : s["members"]) names.insert(m["name"].get<std::string>()), n++;
  for (const auto& s : t["shards"]) names.insert(s["name"].get<std::string>()), n++;
  if (names.size() != n) bad("names are not unique");
  if (t.value("chain", false))
    for (const auto& s : t["stations"])
      if (s["members"].size() > (size_t)kConnections)
        bad("station " + range_text(s["layers"]) + ": a leader of " + std::to_string(s["members"].size()) + " members would hold " +
            std::to_string(s["members"].size()) + " links (limit " + std::to_string(kConnections) + ")");
}

struct StationLinks {
  std::string next;  // "" = none
  int64_t downstream = -1;
  std::vector<std::string> followers;
};

struct Links {
  std::vector<std::string> coordinator;
  std::vector<std::pair<std::string, StationLinks>> stations;  // member name -> links, in order
  const StationLinks& of(const std::string& name) const {
    for (const auto& [n, l] : stations)
      if (n == name) return l;
    fail("topology: no station member " + name);
  }
};

// workers/lib/topology.mjs links
Links links(const ojson& t) {
  Links out;
  std::vector<std::string> hubs;
  if (t.contains("shardGroups"))
    for (const auto& g : t["shardGroups"]) hubs.push_back(g[0]);
  else
    for (const auto& s : t["shards"]) hubs.push_back(s["name"]);
  const auto& st = t["stations"];
  if (!t.value("chain", false)) {
    for (const auto& s : st)
      for (const auto& m : s["members"]) {
        out.stations.push_back({m["name"], {}});
        out.coordinator.push_back(m["name"]);
      }
  } else {
    for (size_t i = 0; i < st.size(); i++) {
      const auto& ms = st[i]["members"];
      for (size_t j = 0; j < ms.size(); j++) {
        StationLinks l;
        if (j == 0) {
          if (i + 1 < st.size()) l.next = st[i + 1]["members"][0]["name"], l.downstream = (int64_t)(st.size() - 1 - i);
          for (size_t k = 1; k < ms.size(); k++) l.followers.push_back(ms[k]["name"]);
        }
        out.stations.push_back({ms[j]["name"], l});
      }
    }
    out.coordinator.push_back(st[0]["members"][0]["name"]);
  }
  out.coordinator.insert(out.coordinator.end(), hubs.begin(), hubs.end());
  return out;
}

// workers/lib/topology.mjs replicaName: replica r of a station member or shard ("st0", "st0r1", ...)
std::string replica_name(const std::string& name, int64_t r) { return r ? name + "r" + std::to_string(r) : name; }

int64_t replica_count(const ojson& t) {
  if (!t.contains("replicas")) return 1;
  const ojson& r = t["replicas"];
  if (!r.is_number_integer() || r.get<int64_t>() < 1 || r.get<int64_t>() > 16) fail("topology: replicas must be an integer in [1, 16], got " + r.dump());
  return r.get<int64_t>();
}

// replica r of a topology: every station member, shard and shard group renamed (replicaName)
ojson replica_topology(const ojson& t, int64_t r) {
  ojson c = t;
  for (auto& s : c["stations"])
    for (auto& m : s["members"]) m["name"] = replica_name(m["name"], r);
  for (auto& s : c["shards"]) s["name"] = replica_name(s["name"], r);
  if (c.contains("shardGroups"))
    for (auto& g : c["shardGroups"])
      for (auto& n : g) n = replica_name(n, r);
  return c;
}

// http[s]://host[:port] with an optional trailing slash (topology.mjs: /^https?:\/\/[^/\s]+\/?$/)
bool is_station_url(const ojson& u) {
  if (!u.is_string()) return false;
  std::string v = u;
  size_t at = v.rfind("https://", 0) == 0 ? 8 : v.rfind("http://", 0) == 0 ? 7 : 0;
  if (!at) return false;
  if (!v.empty() && v.back() == '/') v.pop_back();
  if (v.size() == at) return false;
  for (size_t i = at; i < v.size(); i++)
    if (v[i] == '/' || std::isspace((unsigned char)v[i])) return false;
  return true;
}

// the fields describe_deployment reads (validate / validateTopology checks the coverage)
void require_topology(const ojson& t) {
  const auto pair = [](const ojson& o, const char* k) { return o.is_object() && o.contains(k) && o[k].is_array() && o[k].size() == 2; };
  const auto text = [](const ojson& o, const char* k) { return o.is_object() && o.contains(k) && o[k].is_string(); };
  bool ok = text(t, "knot") && t.contains("stations") && t["stations"].is_array() && !t["stations"].empty() && t.contains("shards") &&
            t["shards"].is_array();
  if (ok)
    for (const auto& s : t["stations"]) {
      ok = ok && pair(s, "layers") && text(s, "role") && s.contains("members") && s["members"].is_array() && !s["members"].empty();
      if (ok)
        for (const auto& m : s["members"]) ok = ok && text(m, "name");
    }
  if (ok)
    for (const auto& s : t["shards"]) ok = ok && text(s, "name") && pair(s, "vocab");
  if (!ok) fail("deployment: not a topology (needs knot, stations [{layers, role, members [{name}]}], shards [{name, vocab}])");
  // members named by url (native fat stations, workers/lib/topology.mjs validateTopology)
  for (const auto& s : t["stations"])
    for (const auto& m : s["members"]) {
      const std::string name = m["name"];
      if (m.value("fat", false) && !m.contains("url") && t.value("chain", false))
        fail("topology: member " + name + ": a fat station cannot be in a chain (chain links are service bindings)");
      if (!m.contains("url")) continue;
      // with replicas R > 1: a list of R urls, one per copy (topology.mjs)
      const ojson& u = m["url"];
      const int64_t R = replica_count(t);
      if (u.is_array() ? (int64_t)u.size() != R : R > 1)
        fail("topology: member " + name + ": with replicas " + std::to_string(R) + " its url must be a list of " + std::to_string(R) +
             " urls (one per copy), got " + u.dump());
      std::string all;
      for (const auto& x : u.is_array() ? u : ojson::array({u})) {
        if (!is_station_url(x)) fail("topology: member " + name + ": url must be http[s]://host[:port], got " + x.dump());
        all += (all.empty() ? "" : ", ") + x.get<std::string>();
      }
      if (t.value("chain", false))
        fail("topology: member " + name + ": a URL member (" + all + ") cannot be in a chain (chain links are service bindings)");
    }
}

// a member outside the Workers: named by url, or a plan's fat station (its url set at deployment)
bool external_member(const ojson& m) { return m.contains("url") || m.value("fat", false); }
bool external(const ojson& t, const std::string& name) {
  for (const auto& s : t["stations"])
    for (const auto& m : s["members"])
      if (m["name"] == name) return external_member(m);
  return false;
}

ojson link_bindings(const std::string& prefix, const std::vector<std::string>& names) {
  ojson a = ojson::array();
  for (const auto& n : names) a.push_back({{"binding", prefix + "_" + n}, {"service", script_name(n)}});
  return a;
}

ojson make_script(const std::string& name, const std::string& main, const std::string& kind, const DeployOptions& o) {
  return {{"name", name}, {"main", main}, {"kind", kind}, {"workers_dev", kind == "coordinator"},
          {"vars", ojson::object()}, {"services", ojson::array()}, {"durable_objects", ojson::array()},
          {"r2_buckets", ojson::array({{{"binding", "MODELS"}, {"bucket_name", o.bucket}}})},
          {"kv_namespaces", ojson::array()}, {"migrations", ojson::array()}};
}

// sqlite: the classes keep their state in SQLite-backed storage (new_sqlite_classes; the
// station's KV snapshots use its SQL API), else the key-value backend (new_classes).
ojson migration(std::initializer_list<const char*> classes, bool sqlite = false) {
  ojson c = ojson::array();
  for (const char* x : classes) c.push_back(x);
  return ojson::array({{{"tag", "v1"}, {sqlite ? "new_sqlite_classes" : "new_classes", c}}});
}

std::string describe_script(const ojson& s) {
  const std::string kind = s["kind"];
  if (kind == "coordinator") return "the mesh's entry: coordinator Worker + per-session Durable Object + the prefix index";
  if (kind == "warden") return "layer and cobordism wardens (caches in front of R2)";
  if (kind == "station") {
    const auto& m = s["vars"]["STATION"];
    return "station " + m["name"].get<std::string>() + ": layers " + range_text(m["layers"]) +
           (m.contains("heads") ? " heads " + range_text(m["heads"]) + " ffn " + range_text(m["cols"]) : std::string()) + ", " +
           m["role"].get<std::string>();
  }
  const auto& sh = s["vars"]["SHARD"];
  std::string hub;
  if (s["vars"].contains("FOLLOWERS")) {
    hub = ", hub of ";
    bool first = true;
    for (const auto& f : s["vars"]["FOLLOWERS"]) hub += (first ? "" : ", ") + f["name"].get<std::string>(), first = false;
  }
  return "vocab shard " + sh["name"].get<std::string>() + ": tokens " + range_text(sh["vocab"]) + hub;
}

void format_into(const ojson& v, const std::string& indent, std::string& out) {
  const std::string inner = indent + "  ";
  if (v.is_array()) {
    const bool flat = std::all_of(v.begin(), v.end(), [](const ojson& x) { return !x.is_structured(); });
    out += "[";
    bool first = true;
    for (const auto& x : v) {
      out += first ? (flat ? "" : "\n" + inner) : (flat ? ", " : ",\n" + inner);
      first = false;
      format_into(x, inner, out);
    }
    if (!flat && !v.empty()) out += "\n" + indent;
    out += "]";
  } else if (v.is_object()) {
    if (v.empty()) { out += "{}"; return; }
    out += "{";
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      out += (first ? "\n" : ",\n") + inner + ojson(it.key()).dump() + ": ";
      first = false;
      format_into(it.value(), inner, out);
    }
    out += "\n" + indent + "}";
  } else {
    out += v.dump();
  }
}

}  // namespace

std::string knot_key_of(const std::string& model_name) {
  const size_t n = model_name.size();
  std::string tail = n >= 5 ? model_name.substr(n - 5) : "";
  std::transform(tail.begin(), tail.end(), tail.begin(), [](unsigned char ch) { return (char)std::tolower(ch); });
  return tail == ".gguf" ? model_name.substr(0, n - 5) + ".knot" : model_name;
}

DeployOptions deploy_options_from_json(const ojson& j) {
  DeployOptions o;
  if (!j.is_object()) fail("deployment: options must be a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const ojson& v = it.value();
    auto text = [&] {
      if (!v.is_string()) fail("deployment: " + k + " must be a string, got " + v.dump());
      return v.get<std::string>();
    };
    auto flag = [&] {
      if (!v.is_boolean()) fail("deployment: " + k + " must be true or false, got " + v.dump());
      return v.get<bool>();
    };
    auto count = [&] {
      if (!v.is_number_integer() || v.get<int64_t>() < 0) fail("deployment: " + k + " must be an integer >= 0, got " + v.dump());
      return v.get<int64_t>();
    };
    if (k == "bucket") o.bucket = text();
    else if (k == "compatibilityDate") o.compatibility_date = text();
    else if (k == "warden") o.warden = flag();
    else if (k == "linkMode") {
      o.link_mode = text();
      if (o.link_mode != "ws" && o.link_mode != "http") fail("deployment: linkMode must be \"ws\" or \"http\", not " + v.dump());
    } else if (k == "timeouts") {
      if (!v.is_object()) fail("deployment: timeouts must be an object, got " + v.dump());
      o.timeouts = v;
    } else if (k == "ttlMs") o.ttl_ms = count();
    else if (k == "wardenBudget") o.warden_budget = count();
    else if (k == "chatTemplate") o.chat_template = text();
    else if (k == "testHooks") o.test_hooks = flag();
    else if (k == "prefixCache") {
      if (!v.is_object()) fail("deployment: prefixCache must be an object, got " + v.dump());
      for (auto p = v.begin(); p != v.end(); ++p) {
        const std::string& f = p.key();
        const ojson& x = p.value();
        if (f == "kvTokens" || f == "ttlMs") {
          if (!x.is_number_integer() || x.get<int64_t>() < 0) fail("deployment: prefixCache." + f + " must be an integer >= 0, got " + x.dump());
        } else if (f == "similarity") {
          if (!x.is_number() || x.get<double>() < 0 || x.get<double>() > 1) fail("deployment: prefixCache.similarity must be a number in [0, 1], got " + x.dump());
        } else fail("deployment: unknown option prefixCache." + f);
      }
      o.prefix_cache = v;
    } else if (k == "draft") {
      // the coordinator's draft model (speculative decoding): its .knot key in the bucket and
      // the most tokens it drafts per pass; configuration, never a request's
      if (!v.is_object()) fail("deployment: draft must be an object {knot, n?}, got " + v.dump());
      for (auto p = v.begin(); p != v.end(); ++p) {
        const std::string& f = p.key();
        const ojson& x = p.value();
        if (f == "knot") {
          if (!x.is_string() || x.get<std::string>().empty()) fail("deployment: draft.knot must be the draft model's object key, got " + x.dump());
        } else if (f == "n") {
          if (!x.is_number_integer() || x.get<int64_t>() < 1 || x.get<int64_t>() > 64) fail("deployment: draft.n must be an integer in [1, 64], got " + x.dump());
        } else fail("deployment: unknown option draft." + f);
      }
      if (!v.contains("knot")) fail("deployment: draft needs knot (the draft model's object key)");
      o.draft = v;
    }
    else fail("deployment: unknown option " + k);
  }
  return o;
}

ojson topology_from_plan(const ojson& plan, const std::string& knot) {
  const auto array = [&](const char* k) { return plan.contains(k) && plan[k].is_array(); };
  if (!plan.is_object() || !plan.contains("model") || !plan["model"].is_object() || !array("stations") || !array("shards"))
    fail("not a planner plan (needs model, stations, shards: the output of knot plan)");
  const ojson& c = plan["model"];
  const int64_t n_layer = c["n_layer"];
  ojson stations = ojson::array();
  for (const auto& s : plan["stations"]) {
    const bool sliced = s.contains("slice");
    const bool same = !stations.empty() && stations.back()["layers"] == s["layers"] && sliced && s["slice"][0].get<int64_t>() > 0;
    if (!same) {
      const int64_t l0 = s["layers"][0], l1 = s["layers"][1];
      stations.push_back({{"layers", s["layers"]}, {"role", l1 == n_layer ? "exit" : l0 == 0 ? "entry" : "mid"},
                          {"resident", s.value("mode", "") != "fluid"}, {"members", ojson::array()}});
    }
    const std::string i = std::to_string(stations.size() - 1);
    ojson m = {{"name", sliced ? "st" + i + "s" + s["slice"][0].dump() : "st" + i}, {"id", s["id"]}};
    if (sliced) {
      if (s.contains("heads")) m["heads"] = s["heads"];
      if (s.contains("ffn_cols")) m["cols"] = s["ffn_cols"];
    }
    if (s.value("fat", false)) m["fat"] = true;
    stations.back()["members"].push_back(m);
  }
  ojson shards = ojson::array();
  for (size_t i = 0; i < plan["shards"].size(); i++)
    shards.push_back({{"name", "sh" + std::to_string(i)}, {"id", plan["shards"][i]["id"]}, {"vocab", plan["shards"][i]["vocab"]}});
  ojson t = {{"knot", knot}, {"n_embd", c["n_embd"]}, {"n_vocab", c["n_vocab"]}, {"stations", stations}, {"shards", shards}};
  if (plan.value("context", 0) != 0) t["context"] = plan["context"];
  if (plan.value("chunk", 0) != 0) t["chunk"] = plan["chunk"];
  if (plan.value("prefill_chunk", 0) != 0 && plan["prefill_chunk"] != plan.value("chunk", ojson(0))) t["prefill_chunk"] = plan["prefill_chunk"];
  if (plan.value("replicas", 1) > 1) t["replicas"] = plan["replicas"];
  fit_links(t);
  validate(c, t);
  return t;
}

ojson describe_deployment(const ojson& t, const DeployOptions& o) {
  require_topology(t);
  const std::string knot = t["knot"];
  ojson hooks = o.test_hooks ? ojson{{"TEST_HOOKS", "1"}} : ojson::object();
  ojson scripts = ojson::array();

  ojson co = make_script(kCoordinator, "workers/coordinator/index.mjs", "coordinator", o);
  co["vars"] = {{"TOPOLOGY", t}, {"LINK_MODE", o.link_mode}};
  if (!o.timeouts.empty()) co["vars"]["TIMEOUTS"] = o.timeouts;
  if (!o.prefix_cache.empty()) co["vars"]["PREFIX_CACHE"] = o.prefix_cache;
  if (!o.draft.empty()) co["vars"]["DRAFT"] = o.draft;
  co["vars"].update(hooks);
  if (!o.chat_template.empty()) co["vars"]["CHAT_TEMPLATE"] = o.chat_template;
  co["durable_objects"] = ojson::array({{{"name", "SESSION"}, {"class_name", "SessionDO"}},
                                        {{"name", "PREFIXES"}, {"class_name", "PrefixDO"}}});
  co["migrations"] = migration({"SessionDO"});
  co["migrations"].push_back({{"tag", "v2"}, {"new_classes", ojson::array({"PrefixDO"})}});
  scripts.push_back(co);

  // every replica's station members and shards are scripts of their own (their own Durable
  // Object namespaces: replicas fail independently); the coordinator binds them all
  const bool chain = t.value("chain", false);
  const int64_t nrep = replica_count(t);
  std::vector<std::string> bound;
  for (int64_t r = 0; r < nrep; r++) {
    const ojson tr = replica_topology(t, r);
    const Links l = links(tr);
    for (const auto& n : l.coordinator)
      if (!external(tr, n)) bound.push_back(n);  // a URL member is linked by its url (TOPOLOGY), not a binding
    for (size_t si = 0; si < tr["stations"].size(); si++)
      for (size_t mi = 0; mi < tr["stations"][si]["members"].size(); mi++) {
        const ojson& s = tr["stations"][si];
        const ojson& m = s["members"][mi];
        const std::string name = m["name"];
        if (external_member(m)) continue;  // a native fat station at its url: no script
        // the other copies of this member: their StationDO namespaces, so that a session moved
        // here on failover restores from the snapshot the failed copy persisted (docs/protocol.md)
        std::vector<std::string> copies;
        for (int64_t q = 0; q < nrep; q++)
          if (q != r) copies.push_back(replica_name(t["stations"][si]["members"][mi]["name"], q));
        const StationLinks& sl = l.of(name);
        ojson v = {{"name", name}, {"knot", knot}, {"layers", s["layers"]}};
        if (m.contains("heads")) v["heads"] = m["heads"];
        if (m.contains("cols")) v["cols"] = m["cols"];
        v["role"] = s["role"];
        v["resident"] = !(s.contains("resident") && s["resident"] == false);
        if (chain) {
          if (!sl.next.empty()) v["next"] = sl.next;
          v["followers"] = sl.followers;
          if (sl.downstream >= 0) v["downstream"] = sl.downstream;
        }
        if (o.timeouts.contains("stationMs") && o.timeouts["stationMs"] != 0) v["linkTimeoutMs"] = o.timeouts["stationMs"];
        if (o.ttl_ms) v["ttlMs"] = o.ttl_ms;
        if (!copies.empty()) v["copies"] = copies;
        ojson st = make_script(script_name(name), "workers/station/index.mjs", "station", o);
        st["vars"] = {{"STATION", v}};
        st["vars"].update(hooks);
        std::vector<std::string> peers = sl.followers;
        if (!sl.next.empty()) peers.push_back(sl.next);
        st["services"] = link_bindings("L", peers);
        st["durable_objects"] = ojson::array({{{"name", "STATION_DO"}, {"class_name", "StationDO"}}});
        for (const auto& c : copies)
          st["durable_objects"].push_back({{"name", "COPY_" + c}, {"class_name", "StationDO"}, {"script_name", script_name(c)}});
        if (o.warden) st["durable_objects"].push_back({{"name", "WARDEN"}, {"class_name", "LayerWardenDO"}, {"script_name", kWarden}});
        st["migrations"] = migration({"StationDO"}, /*sqlite=*/true);
        scripts.push_back(st);
      }

    const int64_t shard_ms = o.timeouts.contains("shardMs") ? o.timeouts["shardMs"].get<int64_t>() : 15000;
    for (const auto& s : tr["shards"]) {
      const std::string name = s["name"];
      std::vector<std::string> followers;
      if (tr.contains("shardGroups")) {
        for (const auto& g : tr["shardGroups"])
          if (g[0] == name)
            for (size_t i = 1; i < g.size(); i++) followers.push_back(g[i]);
      }
      ojson v = {{"name", name}, {"knot", knot}, {"vocab", s["vocab"]}};
      if (s.contains("softcap") && !s["softcap"].is_null()) v["softcap"] = s["softcap"];
      ojson sh = make_script(script_name(name), "workers/cobordism/index.mjs", "shard", o);
      sh["vars"] = {{"SHARD", v}};
      sh["vars"].update(hooks);
      if (!followers.empty()) {
        ojson fs = ojson::array();
        for (const auto& f : followers)
          for (const auto& x : tr["shards"])
            if (x["name"] == f) fs.push_back({{"name", f}, {"vocab", x["vocab"]}});
        sh["vars"]["FOLLOWERS"] = fs;
        sh["vars"]["FOLLOWER_TIMEOUT_MS"] = std::to_string(std::max<int64_t>(100, shard_ms - 100));
      }
      sh["services"] = link_bindings("F", followers);
      if (o.warden) sh["durable_objects"] = ojson::array({{{"name", "COB_WARDEN"}, {"class_name", "CobordismWardenDO"}, {"script_name", kWarden}}});
      scripts.push_back(sh);
    }
  }
  scripts[0]["services"] = link_bindings("M", bound);

  ojson wa = make_script(kWarden, "workers/warden/index.mjs", "warden", o);
  wa["vars"] = hooks;
  if (o.warden_budget) wa["vars"]["WARDEN_BUDGET"] = std::to_string(o.warden_budget);
  wa["durable_objects"] = ojson::array({{{"name", "LAYER_WARDEN"}, {"class_name", "LayerWardenDO"}},
                                        {{"name", "COB_WARDEN"}, {"class_name", "CobordismWardenDO"}}});
  wa["kv_namespaces"] = ojson::array({{{"binding", "ROWS_KV"}, {"id", "knot-rows"}}});
  wa["migrations"] = migration({"LayerWardenDO", "CobordismWardenDO"});
  scripts.push_back(wa);

  return {{"compatibility_date", o.compatibility_date}, {"compatibility_flags", ojson::array({"nodejs_compat"})}, {"scripts", scripts}};
}

std::string format_json(const ojson& v) {
  std::string out;
  format_into(v, "", out);
  return out;
}

std::vector<std::pair<std::string, std::string>> wrangler_files(const ojson& d, const std::string& main_prefix) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& s : d["scripts"]) {
    ojson c = {{"name", s["name"]}, {"main", main_prefix + s["main"].get<std::string>()},
               {"compatibility_date", d["compatibility_date"]}, {"compatibility_flags", d["compatibility_flags"]},
               {"workers_dev", s["workers_dev"]}, {"preview_urls", false}};
    for (const char* k : {"vars", "services"})
      if (!s[k].empty()) c[k] = s[k];
    if (!s["durable_objects"].empty()) c["durable_objects"] = {{"bindings", s["durable_objects"]}};
    for (const char* k : {"r2_buckets", "kv_namespaces", "migrations"})
      if (!s[k].empty()) c[k] = s[k];
    const std::string name = s["name"];
    out.push_back({name == kCoordinator ? "wrangler.jsonc" : name + ".jsonc",
                   "// " + describe_script(s) + "\n// Generated from a mesh topology by core/infer/deployment.cpp: do not edit.\n" +
                       format_json(c) + "\n"});
  }
  return out;
}

std::string deploy_request(const std::string& text) {
  const ojson r = ojson::parse(text, nullptr, false);
  if (r.is_discarded() || !r.is_object()) fail("deployment: the request is not a JSON object");
  ojson t;
  if (r.contains("plan"))
    t = topology_from_plan(r["plan"], r.contains("knot") ? r["knot"].get<std::string>() : knot_key_of(r["plan"]["model"].value("name", "model")));
  else if (r.contains("topology"))
    t = r["topology"];
  else
    fail("deployment: the request needs a topology or a plan");
  const ojson d = describe_deployment(t, deploy_options_from_json(r.value("options", ojson::object())));
  ojson files = ojson::array();
  for (const auto& [f, body] : wrangler_files(d, r.value("main_prefix", "")))
    files.push_back({{"file", f}, {"text", body}});
  return ojson{{"topology", t}, {"description", d}, {"files", files}}.dump();
}

}  // namespace knot
