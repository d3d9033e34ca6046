// infer_deployment.cpp — the deployment description (core/infer/deployment.h) of hand-written
// plans: stations and slices become members, links fitted under 6 per holder (a chain of
// stations, shards behind hubs), each script's vars and bindings, the wrangler.jsonc files,
// and refusals that name the option or the layer. (tests/workers/renderings.test.mjs checks
// the same description against wrangler's and Miniflare's reading of it.)
#include <gtest/gtest.h>

#include <functional>

#include <nlohmann/json.hpp>

#include "infer/deployment.h"
#include "kernels/common.h"

using namespace knot;
using ojson = nlohmann::ordered_json;

namespace {

const ojson kModel = {{"name", "m.gguf"}, {"n_layer", 6}, {"n_embd", 64}, {"n_head", 8}, {"n_head_kv", 4}, {"n_ff", 128}, {"n_vocab", 600}};

ojson plan_of(int stations, int slices, int shards) {
  ojson p = {{"model", kModel}, {"context", 256}, {"chunk", 32}, {"stations", ojson::array()}, {"shards", ojson::array()}};
  for (int i = 0; i < stations; i++)
    for (int j = 0; j < slices; j++) {
      ojson s = {{"id", "s" + std::to_string(i) + "-" + std::to_string(j)}, {"layers", {i * 6 / stations, (i + 1) * 6 / stations}},
                 {"mode", "resident"}};
      if (slices > 1) s["slice"] = {j, slices}, s["heads"] = {j * 8 / slices, (j + 1) * 8 / slices}, s["ffn_cols"] = {j * 128 / slices, (j + 1) * 128 / slices};
      p["stations"].push_back(s);
    }
  for (int i = 0; i < shards; i++) p["shards"].push_back({{"id", "v" + std::to_string(i)}, {"vocab", {i * 600 / shards, (i + 1) * 600 / shards}}});
  return p;
}

const ojson& script(const ojson& d, const std::string& name) {
  for (const auto& s : d["scripts"])
    if (s["name"] == name) return s;
  throw std::runtime_error("no script " + name);
}

std::string error_of(const std::function<void()>& f) {
  try { f(); } catch (const Error& e) { return e.what(); }
  return "";
}

}  // namespace

TEST(Deployment, StationsAndShardsLinkedFromTheCoordinator) {
  const ojson t = topology_from_plan(plan_of(2, 1, 2), "m.knot");
  EXPECT_FALSE(t.contains("chain"));
  EXPECT_EQ(t["stations"][1]["role"], "exit");
  EXPECT_EQ(t["context"], 256);
  const ojson d = describe_deployment(t, DeployOptions{});
  ASSERT_EQ(d["scripts"].size(), 6u);  // coordinator, 2 stations, 2 shards, warden
  EXPECT_EQ(d["scripts"][0]["name"], "knot-coordinator");
  EXPECT_EQ(d["scripts"][5]["name"], "knot-warden");
  const auto& co = script(d, "knot-coordinator");
  std::vector<std::string> bindings;
  for (const auto& s : co["services"]) bindings.push_back(s["binding"].get<std::string>() + "->" + s["service"].get<std::string>());
  EXPECT_EQ(bindings, (std::vector<std::string>{"M_st0->knot-st0", "M_st1->knot-st1", "M_sh0->knot-sh0", "M_sh1->knot-sh1"}));
  EXPECT_EQ(co["vars"]["TOPOLOGY"], t);
  EXPECT_EQ(co["vars"]["LINK_MODE"], "ws");
  EXPECT_FALSE(co["vars"].contains("TIMEOUTS"));
  EXPECT_FALSE(co["vars"].contains("PREFIX_CACHE"));
  EXPECT_EQ(co["durable_objects"].dump(),
            R"([{"name":"SESSION","class_name":"SessionDO"},{"name":"PREFIXES","class_name":"PrefixDO"}])");
  EXPECT_EQ(co["migrations"].dump(), R"([{"tag":"v1","new_classes":["SessionDO"]},{"tag":"v2","new_classes":["PrefixDO"]}])");
  const auto& st = script(d, "knot-st1")["vars"]["STATION"];
  EXPECT_EQ(st.dump(), R"({"name":"st1","knot":"m.knot","layers":[3,6],"role":"exit","resident":true})");
  EXPECT_EQ(script(d, "knot-st1")["durable_objects"].size(), 1u);  // no warden unless asked
}

TEST(Deployment, ManyMembersChainAndShardsSitBehindHubs) {
  DeployOptions o;
  o.warden = true, o.ttl_ms = 300, o.timeouts = {{"stationMs", 1500}, {"shardMs", 400}}, o.test_hooks = true;
  const ojson t = topology_from_plan(plan_of(3, 2, 6), "m.knot");  // 6 members: a chain; 1 + 6 shards > 6 links
  EXPECT_EQ(t["chain"], true);
  EXPECT_EQ(t["shardGroups"].dump(), R"([["sh0"],["sh1"],["sh2","sh3"],["sh4"],["sh5"]])");
  const ojson d = describe_deployment(t, o);
  EXPECT_EQ(script(d, "knot-coordinator")["services"].size(), 6u);  // st0s0 + 5 hubs
  const auto& lead = script(d, "knot-st1s0");
  EXPECT_EQ(lead["vars"]["STATION"].dump(),
            R"({"name":"st1s0","knot":"m.knot","layers":[2,4],"heads":[0,4],"cols":[0,64],"role":"mid","resident":true,)"
            R"("next":"st2s0","followers":["st1s1"],"downstream":1,"linkTimeoutMs":1500,"ttlMs":300})");
  EXPECT_EQ(lead["services"].dump(), R"([{"binding":"L_st1s1","service":"knot-st1s1"},{"binding":"L_st2s0","service":"knot-st2s0"}])");
  EXPECT_EQ(lead["vars"]["TEST_HOOKS"], "1");
  EXPECT_EQ(lead["durable_objects"][1].dump(), R"({"name":"WARDEN","class_name":"LayerWardenDO","script_name":"knot-warden"})");
  const auto& hub = script(d, "knot-sh2");
  EXPECT_EQ(hub["vars"]["FOLLOWERS"].dump(), R"([{"name":"sh3","vocab":[300,400]}])");
  EXPECT_EQ(hub["vars"]["FOLLOWER_TIMEOUT_MS"], "300");
  EXPECT_EQ(hub["services"].dump(), R"([{"binding":"F_sh3","service":"knot-sh3"}])");
}

TEST(Deployment, WranglerFilesAndTheirFormat) {
  const auto files = wrangler_files(describe_deployment(topology_from_plan(plan_of(1, 1, 1), "m.knot"), DeployOptions{}), "/src/");
  ASSERT_EQ(files.size(), 4u);
  EXPECT_EQ(files[0].first, "wrangler.jsonc");
  EXPECT_EQ(files[1].first, "knot-st0.jsonc");
  EXPECT_EQ(files[3].first, "knot-warden.jsonc");
  EXPECT_NE(files[0].second.find("\"main\": \"/src/workers/coordinator/index.mjs\""), std::string::npos);
  EXPECT_NE(files[0].second.find("\"workers_dev\": true"), std::string::npos);
  EXPECT_NE(files[1].second.find("\"workers_dev\": false"), std::string::npos);
  EXPECT_EQ(files[1].second.rfind("// station st0: layers [0,6], exit\n", 0), 0u);
  EXPECT_EQ(format_json(ojson::parse(R"({"a":[0,2],"b":{},"c":[{"x":1}],"d":[]})")),
            "{\n  \"a\": [0, 2],\n  \"b\": {},\n  \"c\": [\n    {\n      \"x\": 1\n    }\n  ],\n  \"d\": []\n}");
}

TEST(Deployment, RefusalsNameTheOptionOrTheLayer) {
  EXPECT_EQ(error_of([] { deploy_options_from_json({{"ttl", 5}}); }), "deployment: unknown option ttl");
  EXPECT_EQ(error_of([] { deploy_options_from_json({{"linkMode", "udp"}}); }), "deployment: linkMode must be \"ws\" or \"http\", not \"udp\"");
  ojson p = plan_of(2, 1, 1);
  p["stations"][1]["layers"] = {4, 6};
  EXPECT_EQ(error_of([&] { topology_from_plan(p, "m.knot"); }), "topology: station layers [4,6] do not continue from layer 3");
  EXPECT_EQ(error_of([] { topology_from_plan(ojson{{"stations", ojson::array()}}, "m.knot"); }),
            "not a planner plan (needs model, stations, shards: the output of knot plan)");
  EXPECT_EQ(error_of([] { topology_from_plan(ojson{{"model", kModel}}, "m.knot"); }),
            "not a planner plan (needs model, stations, shards: the output of knot plan)");
  EXPECT_EQ(error_of([] { describe_deployment(ojson{{"knot", "m.knot"}, {"stations", ojson::array()}}, DeployOptions{}); }),
            "deployment: not a topology (needs knot, stations [{layers, role, members [{name}]}], shards [{name, vocab}])");
  EXPECT_EQ(knot_key_of("Model.GGUF"), "Model.knot");
  EXPECT_EQ(knot_key_of("m.knot"), "m.knot");
}

// replicas: every station member and shard rendered once per copy (its own script and Durable
// Object namespace), each chain within its copy, the coordinator bound to every copy's peers
TEST(Deployment, ReplicasAreScriptsOfTheirOwnEachChainWithinItsCopy) {
  ojson p = plan_of(3, 2, 6);
  p["replicas"] = 2;
  const ojson t = topology_from_plan(p, "m.knot");
  EXPECT_EQ(t["replicas"], 2);
  EXPECT_EQ(t["chain"], true);
  const ojson d = describe_deployment(t, DeployOptions{});
  ASSERT_EQ(d["scripts"].size(), 1u + 2 * (6 + 6) + 1u);
  std::vector<std::string> bound;
  for (const auto& s : script(d, "knot-coordinator")["services"]) bound.push_back(s["binding"].get<std::string>() + "->" + s["service"].get<std::string>());
  EXPECT_EQ(bound, (std::vector<std::string>{"M_st0s0->knot-st0s0", "M_sh0->knot-sh0", "M_sh1->knot-sh1", "M_sh2->knot-sh2", "M_sh4->knot-sh4",
                                             "M_sh5->knot-sh5", "M_st0s0r1->knot-st0s0r1", "M_sh0r1->knot-sh0r1", "M_sh1r1->knot-sh1r1",
                                             "M_sh2r1->knot-sh2r1", "M_sh4r1->knot-sh4r1", "M_sh5r1->knot-sh5r1"}));
  const auto& lead = script(d, "knot-st0s0r1");
  EXPECT_EQ(lead["vars"]["STATION"]["name"], "st0s0r1");
  EXPECT_EQ(lead["vars"]["STATION"]["next"], "st1s0r1");
  EXPECT_EQ(lead["vars"]["STATION"]["followers"].dump(), R"(["st0s1r1"])");
  EXPECT_EQ(lead["services"].dump(), R"([{"binding":"L_st0s1r1","service":"knot-st0s1r1"},{"binding":"L_st1s0r1","service":"knot-st1s0r1"}])");
  // the other copy's StationDO namespace: a session moved here on failover restores from its snapshot
  EXPECT_EQ(lead["durable_objects"].dump(),
            R"([{"name":"STATION_DO","class_name":"StationDO"},{"name":"COPY_st0s0","class_name":"StationDO","script_name":"knot-st0s0"}])");
  EXPECT_EQ(lead["vars"]["STATION"]["copies"].dump(), R"(["st0s0"])");
  EXPECT_EQ(script(d, "knot-st0s0")["vars"]["STATION"]["copies"].dump(), R"(["st0s0r1"])");
  const auto& hub = script(d, "knot-sh2r1");
  EXPECT_EQ(hub["services"].dump(), R"([{"binding":"F_sh3r1","service":"knot-sh3r1"}])");
  EXPECT_EQ(hub["vars"]["FOLLOWERS"][0]["name"], "sh3r1");
  EXPECT_EQ(script(d, "knot-coordinator")["vars"]["TOPOLOGY"], t);  // the topology names copy 0; the coordinator derives the rest
  ojson bad = t;
  bad["replicas"] = 0;
  EXPECT_NE(error_of([&] { describe_deployment(bad, DeployOptions{}); }).find("replicas must be an integer in [1, 16]"), std::string::npos);
}
