// routes.mjs in one process (a clock of its own): back-off grows exponentially and is capped,
// an answer resets it; a new session's route takes the least loaded copy and routes around
// copies that are down (a chain as one). Under workerd: tests/workers/replicas.test.mjs.
import {test} from "node:test";
import assert from "node:assert/strict";
import {Health, pickRoute, routePhysical, RouteLinks} from "../../workers/coordinator/routes.mjs";
import {topologyFromCounts, withUrls} from "../../workers/lib/topology.mjs";
import {LinkError} from "../../workers/lib/link.mjs";

const C = {n_layer: 4, n_embd: 8, n_head: 2, n_head_kv: 1, n_ff: 16, n_vocab: 100};

test("back-off: base · 2^(n-1) after the n-th failure in a row, capped; an answer resets it", () => {
  let now = 0;
  const h = new Health({backoffMs: 100, backoffMaxMs: 500}, () => now);
  const spans = [];
  for (let i = 0; i < 5; i++) spans.push(h.fail("st0", "x").until - now);
  assert.deepEqual(spans, [100, 200, 400, 500, 500]);
  assert.equal(h.down("st0"), true);
  now += 499;
  assert.equal(h.down("st0"), true);
  now += 2;
  assert.equal(h.down("st0"), false, "up again once the back-off has passed");
  assert.equal(h.fail("st0").until - now, 500, "still the n-th failure in a row");
  h.ok("st0");
  assert.equal(h.down("st0"), false);
  assert.equal(h.fail("st0").until - now, 100, "an answer reset the count");
  assert.deepEqual(Object.keys(h.snapshot()), ["st0"]);
  assert.equal(new Health({}, () => now).merge(h.snapshot()).down("st0"), true, "the snapshot carries it");
});

test("pickRoute: least loaded copy, members that are down taken from another copy; a chain moves as one", () => {
  const t = topologyFromCounts(C, {knot: "m", stations: [2, 2], shards: 2, replicas: 3});
  const h = new Health({backoffMs: 1000}, () => 0);
  assert.deepEqual(pickRoute(t, h), {st0: 0, st1: 0, sh0: 0, sh1: 0}, "no load: copy 0");
  const load = new Map(routePhysical(t, {st0: 0, st1: 0, sh0: 0, sh1: 0}).map((p) => [p, 1]));
  assert.deepEqual(pickRoute(t, h, load), {st0: 1, st1: 1, sh0: 1, sh1: 1}, "copy 0 busy: copy 1");
  h.fail("st1r1");
  assert.deepEqual(pickRoute(t, h, load), {st0: 2, st1: 2, sh0: 2, sh1: 2}, "st1r1 down: the idle copy 2");
  const t2 = topologyFromCounts(C, {knot: "m", stations: [2, 2], shards: 2, replicas: 2});
  const h2 = new Health({backoffMs: 1000}, () => 0);
  h2.fail("st1");
  h2.fail("sh0r1");
  assert.deepEqual(pickRoute(t2, h2), {st0: 0, st1: 1, sh0: 0, sh1: 0}, "a member down in every copy's best: st1 from copy 1, sh0 stays");
  const c = topologyFromCounts(C, {knot: "m", stations: [2, 2], shards: 2, replicas: 2, chain: true});
  const hc = new Health({backoffMs: 1000}, () => 0);
  hc.fail("st1");
  const r = pickRoute(c, hc);
  assert.equal(r.st0, 1, "a chain with a member down in copy 0 runs in copy 1");
  assert.equal(r.st1, 1);
});

test("recover: a Worker station moves to the other copy to restore there, a URL member to replay; the copies left are listed for an end, a copy moved back to is not (and replays)", () => {
  let now = 0;
  const t = topologyFromCounts(C, {knot: "m.knot", stations: [2, 2], shards: 1, replicas: 2});
  const links = new RouteLinks(t, {sid: "s", health: new Health({backoffMs: 100, backoffMaxMs: 1000}, () => now), connect: (name) => ({name, close() {}})});
  links.open("st1");
  let r = links.recover(new LinkError("st1", 503, "st1: HTTP 503"));
  assert.deepEqual(r, {rebuilt: "restore", member: "st1", from: "st1", replica: "st1r1"});
  assert.deepEqual(links.left, [{physical: "st1", chain: false}]);
  now = 1000;  // st1's back-off is over; st1r1 fails: back to st1, which holds the session again,
  // rebuilt by replay (its own snapshot may predate a rewind made on st1r1)
  links.open("st1");
  r = links.recover(new LinkError("st1r1", 503, "st1r1: HTTP 503"));
  assert.deepEqual(r, {rebuilt: "replay", member: "st1", from: "st1r1", replica: "st1"});
  assert.deepEqual(links.left, [{physical: "st1r1", chain: false}]);
  const u = withUrls(C, t, {1: ["http://127.0.0.1:8001", "http://127.0.0.1:8002"]});
  const ul = new RouteLinks(u, {sid: "s", health: new Health({}, () => now), connect: (name) => ({name, close() {}})});
  ul.open("st1");
  assert.equal(ul.recover(new LinkError("st1", 0, "st1: Network connection lost")).rebuilt, "replay", "a native station keeps no snapshot");
});
