// Replicas under workerd: a topology with 2 copies of every station member and shard, each
// copy its own Worker script and Durable Object namespace. A copy that fails mid-generation
// (killed, 500, stalled, link dropped) is replaced by the other and the session rebuilt there;
// a failed copy backs off; routes spread load and follow the prefix (workers/coordinator/routes.mjs).
import {test} from "node:test";
import assert from "node:assert/strict";
import {sharedKnot, single, meshFor} from "./helpers.mjs";
import {replicaName} from "../../workers/lib/topology.mjs";

const MODEL = "stories260K-pad256-llama-q4_k_m.gguf";
const PROMPT = "Once upon a time";
const SETTINGS = [["greedy", {maxTokens: 16, temperature: 0}], ["seeded", {maxTokens: 16, temperature: 0.9, topK: 40, seed: 1234}]];

const log = async (mesh, name) => (await (await mesh.worker(`knot-${name}`)).fetch("http://x/debug/log")).json();
const stationStats = async (mesh, name) => (await (await mesh.worker(`knot-${name}`)).fetch("http://x/stats")).json();

// every shard copy slowed a little, so that a fault set at token n lands mid-generation
async function slowShards(mesh, f) {
  for (const s of mesh.topology.shards) for (let r = 0; r < 2; r++) await mesh.fault(replicaName(s.name, r), f);
}

// Generate; when token n arrives, act(route, sid) (the route: the route event's assignment).
async function generateWith(mesh, ids, options, n, act, what = "") {
  const events = [];
  let route = null, sid = null, acted = false;
  for await (const e of mesh.generate({ids, options})) {
    events.push(e);
    if (e.event === "route") ({route, sid} = e);
    if (e.type === "token" && e.telemetry.n === n && !acted) { acted = true; await act(route, sid); }
  }
  const summary = events.find((e) => e.type === "summary");
  assert.ok(summary, `${what}: ${JSON.stringify(events.find((e) => e.type === "error"))}`);
  assert.ok(acted && route);
  return {events, summary, route, failovers: events.filter((e) => e.event === "failover")};
}

test("a station copy killed, answering 500 or stalling mid-generation: the other copy takes over, same ids (greedy and seeded), telemetry names the failover", async (t) => {
  const bytes = await sharedKnot(t, MODEL);
  if (!bytes) return;
  const mesh = await meshFor(bytes, {stations: [2, 3], shards: 2, replicas: 2},
                             {testHooks: true, timeouts: {stationMs: 4000, backoffMs: 60_000}, prefixCache: {kvTokens: 0}});
  try {
    for (const [what, opts] of SETTINGS) {
      const want = await single(bytes, PROMPT, opts);
      const faults = [
        ["killed (session and snapshot lost)", async (mesh, name, sid) => {
          await (await mesh.worker(`knot-${name}`)).fetch(`http://x/debug/restart?sid=${sid}&wipe=1`).then((r) => r.arrayBuffer()).catch(() => {});
        }, /HTTP 409/, true],
        ["HTTP 500", (mesh, name) => mesh.fault(name, {status: 500}), /HTTP 500: injected fault/, false],
        ["stalled", (mesh, name) => mesh.fault(name, {hangMs: 600_000}), /no answer within 4000 ms/, false],
      ];
      for (const [how, inject, reason, lost] of faults) {
        await slowShards(mesh, {hangMs: 100});
        let failed = null;
        const r = await generateWith(mesh, want.promptIds, opts, 6, async (route, sid) => {
          failed = replicaName("st1", route.st1);
          await inject(mesh, failed, sid);
        }, `${what}, ${how}`);
        await slowShards(mesh, null);
        for (const s of ["st1", "st1r1"]) await mesh.fault(s, null);
        assert.deepEqual(r.summary.ids, want.ids, `${what}, ${how}: the single-process ids`);
        const fo = r.failovers.filter((e) => e.rebuilt !== "resend");
        const other = failed === "st1" ? "st1r1" : "st1";
        assert.deepEqual(fo.map((e) => [e.member, e.from, e.replica]), [["st1", failed, other], ...(lost ? [["st1", failed, other]] : [])],
                         `${what}, ${how}: ${JSON.stringify(r.failovers)}`);
        assert.equal(fo[0].rebuilt, "restore");
        assert.match(fo[0].reason, reason, `${what}, ${how}`);
        assert.equal(r.summary.failovers, 1);
        assert.equal(r.summary.restores, 1);
        const restored = r.events.filter((e) => e.event === "restored");
        if (lost) {
          // the killed copy's snapshot went with it: the new copy has none to read, the history is replayed
          assert.equal(fo[1].rebuilt, "replay");
          assert.match(fo[1].reason, /no snapshot to restore from: .*HTTP 409/);
          assert.equal(restored.length, 0);
          assert.equal(r.summary.reprefills, 1, "the token history replayed once");
        } else {
          // the failed copy's storage is still there: the new copy restored from it
          assert.equal(restored.length, 1, JSON.stringify(r.events.filter((e) => e.type === "telemetry")));
          assert.equal(restored[0].replica, other);
          assert.ok(restored[0].positions >= want.promptIds.length, `restored ${restored[0].positions} positions`);
          assert.equal(r.summary.reprefills, 0, "nothing replayed");
        }
      }
    }
  } finally { await mesh.close(); }
});

// Coverage of positions [0, below) by the prefill / decode frames of session sid in a station's frame log.
async function coverage(mesh, name, sid, below) {
  const n = new Array(below).fill(0);
  for (const f of (await stationStats(mesh, name)).stats.frameLog)
    if (f.sid === sid) for (let p = f.pos; p < Math.min(below, f.pos + f.rows); p++) n[p]++;
  return n;
}

test("a copy killed mid-generation (503, as the chaos run kills): the other copy restores from the snapshot the failed copy persisted — restored, not replayed, no stored position fed again, same ids", async (t) => {
  const bytes = await sharedKnot(t, MODEL);
  if (!bytes) return;
  const mesh = await meshFor(bytes, {stations: [2, 3], shards: 2, replicas: 2},
                             {testHooks: true, timeouts: {stationMs: 4000, backoffMs: 60_000}, prefixCache: {kvTokens: 0}});
  try {
    // greedy: blocks of one position and pages of one block, so the restore reads page after page
    for (const name of ["st1", "st1r1"])
      assert.ok((await (await mesh.worker(`knot-${name}`)).fetch("http://x/debug/snapshot", {method: "POST", body: JSON.stringify({blockBytes: 1, pageBytes: 1})})).ok);
    for (const [what, opts] of SETTINGS) {
      const want = await single(bytes, PROMPT, opts);
      await slowShards(mesh, {hangMs: 100});
      let failed = null, other = null, sid0 = null, before = null, served = 0;
      const r = await generateWith(mesh, want.promptIds, opts, 6, async (route, sid) => {
        failed = replicaName("st1", route.st1);
        other = replicaName("st1", 1 - route.st1);
        sid0 = sid;
        before = (await stationStats(mesh, other)).stats;
        served = (await stationStats(mesh, failed)).stats.copyPagesServed;
        await mesh.fault(failed, {status: 503});
      }, what);
      await slowShards(mesh, null);
      await mesh.fault(failed, null);
      assert.deepEqual(r.summary.ids, want.ids, `${what}: the single-process ids`);
      const fo = r.failovers;
      assert.deepEqual(fo.map((e) => [e.member, e.from, e.replica, e.rebuilt]), [["st1", failed, other, "restore"]], JSON.stringify(fo));
      const restored = r.events.filter((e) => e.event === "restored");
      assert.equal(restored.length, 1);
      const P = restored[0].positions;
      assert.ok(P >= want.promptIds.length + 4, `restored ${P} positions (the prompt and the tokens fed before the kill)`);
      assert.equal(r.summary.reprefills, 0, "not replayed");
      assert.equal(r.events.filter((e) => e.event === "reprefill").length, 0);
      // the new copy imported the failed copy's rows and computed none of them
      const after = (await stationStats(mesh, other)).stats;
      assert.equal(after.copyRestores - before.copyRestores, 1);
      assert.deepEqual(after.lastCopyRestore, {sid: sid0, from: failed, positions: P});
      const pages = (await stationStats(mesh, failed)).stats.copyPagesServed - served;
      assert.equal(pages, what === "greedy" ? P : 1, what === "greedy" ? "one position per block, one block per page: a page per position"
                                                                      : "default blocks and pages: the rows in one page");
      if (what === "greedy")
        for (const name of ["st1", "st1r1"]) await (await mesh.worker(`knot-${name}`)).fetch("http://x/debug/snapshot", {method: "POST", body: "{}"});
      assert.deepEqual(await coverage(mesh, other, sid0, P), new Array(P).fill(0), `${other} computed none of [0, ${P})`);
      // the station that did not move computed each stored position once: none fed again
      const st0 = replicaName("st0", r.route.st0);
      assert.deepEqual(await coverage(mesh, st0, sid0, P), new Array(P).fill(1), `${st0} computed each of [0, ${P}) once`);
    }
  } finally { await mesh.close(); }
});

test("the copy a failover left is told the session ended once it answers again: its sessions are back to baseline long before the TTL", async (t) => {
  const bytes = await sharedKnot(t, MODEL);
  if (!bytes) return;
  const opts = {maxTokens: 16, temperature: 0};
  const want = await single(bytes, PROMPT, opts);
  const ttlMs = 10 * 60_000;
  const mesh = await meshFor(bytes, {stations: [2, 3], shards: 2, replicas: 2},
                             {testHooks: true, ttlMs, timeouts: {stationMs: 4000, backoffMs: 500, backoffMaxMs: 2000}, prefixCache: {kvTokens: 0}});
  try {
    const base = {st1: (await stationStats(mesh, "st1")).stats.liveSessions, st1r1: (await stationStats(mesh, "st1r1")).stats.liveSessions};
    await slowShards(mesh, {hangMs: 100});
    let failed = null, sid0 = null;
    const r = await generateWith(mesh, want.promptIds, opts, 6, async (route, sid) => {
      failed = replicaName("st1", route.st1);
      sid0 = sid;
      await mesh.fault(failed, {status: 503});
    });
    await slowShards(mesh, null);
    assert.deepEqual(r.summary.ids, want.ids);
    assert.equal(r.failovers.filter((e) => e.rebuilt === "restore").length, 1);
    const held = async () => {
      const s = await (await (await mesh.worker(`knot-${failed}`)).fetch(`http://x/stats?sid=${encodeURIComponent(sid0)}`)).json();
      return {live: s.session.live.length, stored: s.session.stored.sessions, isolate: s.stats.liveSessions};
    };
    // still failing: the end sent when the generation ended was refused, the copy holds the session
    const during = await held();
    assert.deepEqual([during.live, during.stored], [1, 1], `${failed} holds the session while it fails: ${JSON.stringify(during)}`);
    const t0 = Date.now();
    await mesh.fault(failed, null);
    let now = during;
    while (Date.now() - t0 < 20_000 && (now.live || now.stored)) {
      await new Promise((ok) => setTimeout(ok, 200));
      now = await held();
    }
    assert.deepEqual(now, {live: 0, stored: 0, isolate: base[failed]}, `${failed} freed the session (KV and snapshot) after ${Date.now() - t0} ms (TTL ${ttlMs} ms)`);
    assert.ok(Date.now() - t0 < ttlMs / 10);
  } finally { await mesh.close(); }
});

test("a failed copy is not asked again during its back-off: the next sessions route around it", async (t) => {
  const bytes = await sharedKnot(t, MODEL);
  if (!bytes) return;
  const opts = {maxTokens: 8, temperature: 0};
  const want = await single(bytes, PROMPT, opts);
  const mesh = await meshFor(bytes, {stations: [2, 3], shards: 2, replicas: 2},
                             {testHooks: true, timeouts: {backoffMs: 60_000}, prefixCache: {kvTokens: 0}});
  try {
    let r = await mesh.run({ids: want.promptIds, options: opts});
    const first = r.telemetry.find((e) => e.event === "route").route;
    const name = replicaName("st0", first.st0);
    await mesh.fault(name, {status: 500});
    r = await mesh.run({ids: want.promptIds, options: opts});
    assert.deepEqual(r.summary.ids, want.ids);
    const fo = r.telemetry.filter((e) => e.event === "failover");
    assert.equal(fo.length, 1, JSON.stringify(fo));
    assert.equal(fo[0].from, name);
    const asked = (await log(mesh, name)).seen;
    assert.equal(asked, 1, `${name} was asked once (its first frame), then never in the session`);
    for (let i = 0; i < 3; i++) {
      r = await mesh.run({ids: [...want.promptIds, i + 2], options: opts});
      assert.equal(r.error, undefined);
      assert.notEqual(replicaName("st0", r.telemetry.find((e) => e.event === "route").route.st0), name, "routed around the failed copy");
      assert.equal(r.telemetry.filter((e) => e.event === "failover").length, 0);
    }
    assert.equal((await log(mesh, name)).seen, asked, `${name} not asked during its back-off`);
  } finally { await mesh.close(); }
});

test("a shard that hangs (one copy) is asked once, then skipped during its back-off, not waited for every token; with two copies the other answers", async (t) => {
  const bytes = await sharedKnot(t, MODEL);
  if (!bytes) return;
  const opts = {maxTokens: 12, temperature: 0};
  const want = await single(bytes, [1, 400, 130, 300, 200, 420], opts);
  let mesh = await meshFor(bytes, {stations: [5], shards: 2}, {testHooks: true, timeouts: {shardMs: 400, backoffMs: 60_000}});
  try {
    await mesh.fault("sh1", {hangMs: 600_000});
    const r = await mesh.run({ids: want.promptIds, options: opts});
    assert.equal(r.error, undefined, r.error?.error);
    assert.equal(r.summary.ids.length, opts.maxTokens);
    const ab = r.telemetry.filter((e) => e.event === "abstain" && e.phase === "lm-head");
    assert.equal(ab.length, opts.maxTokens, "the slice abstains at every token");
    assert.equal((await log(mesh, "sh1")).seen, 1, "sh1 asked once (the prompt's embed), then skipped");
    assert.match(ab.at(-1).reason, /backing off/);
  } finally { await mesh.close(); }
  mesh = await meshFor(bytes, {stations: [5], shards: 2, replicas: 2}, {testHooks: true, timeouts: {shardMs: 400, backoffMs: 60_000}});
  try {
    await mesh.fault("sh1", {hangMs: 600_000});
    const r = await mesh.run({ids: want.promptIds, options: opts});
    assert.deepEqual(r.summary.ids, want.ids, "the other copy answered: the exact ids");
    assert.equal(r.summary.abstains, 0);
    const fo = r.telemetry.filter((e) => e.event === "failover");
    assert.equal(fo.length, 1, JSON.stringify(fo));
    assert.deepEqual([fo[0].member, fo[0].from, fo[0].replica], ["sh1", "sh1", "sh1r1"]);
    assert.equal((await log(mesh, "sh1")).seen, 1, "sh1 asked once");
  } finally { await mesh.close(); }
});

test("every copy of a shard backing off: the one whose back-off ends first is asked (a trial), not refused; its answer ends the back-off mesh-wide", async (t) => {
  const bytes = await sharedKnot(t, MODEL);
  if (!bytes) return;
  const opts = {maxTokens: 8, temperature: 0};
  const want = await single(bytes, [1, 400, 130, 300, 200, 420], opts);
  const mesh = await meshFor(bytes, {stations: [5], shards: 2, replicas: 2},
                             {testHooks: true, timeouts: {shardMs: 400, backoffMs: 60_000}, prefixCache: {kvTokens: 0}});
  try {
    for (const s of ["sh1", "sh1r1"]) await mesh.fault(s, {status: 500});
    let r = await mesh.run({ids: want.promptIds, options: opts});
    const failed = r.error !== undefined || r.summary.abstains > 0;
    assert.ok(failed, "both copies failing: the request fails or the slice abstains");
    // the fault clears (a 1 ms hang only counts the frames each copy sees); both copies are
    // backing off for 60 s
    for (const s of ["sh1", "sh1r1"]) await mesh.fault(s, {hangMs: 1});
    const seen = async () => (await log(mesh, "sh1")).seen + (await log(mesh, "sh1r1")).seen;
    r = await mesh.run({ids: want.promptIds, options: opts});
    assert.equal(r.error, undefined, r.error?.error);
    assert.deepEqual(r.summary.ids, want.ids, "a copy was asked: the exact ids");
    assert.equal(r.summary.abstains, 0);
    assert.ok(await seen() > 0, "a copy of sh1 was asked during its back-off");
    // the trial's answer ended the back-off mesh-wide: the next session asks sh1's copies at once
    r = await mesh.run({ids: [...want.promptIds, 7], options: opts});
    assert.equal(r.error, undefined, r.error?.error);
    assert.equal(r.summary.abstains, 0);
    assert.equal(r.telemetry.filter((e) => e.event === "failover").length, 0, "no copy backing off any more");
  } finally { await mesh.close(); }
});

test("a dropped link: the frame is sent again on a fresh link (no replay, same ids)", async (t) => {
  const bytes = await sharedKnot(t, MODEL);
  if (!bytes) return;
  const opts = {maxTokens: 16, temperature: 0};
  const want = await single(bytes, PROMPT, opts);
  const mesh = await meshFor(bytes, {stations: [2, 3], shards: 2, replicas: 2}, {testHooks: true, prefixCache: {kvTokens: 0}});
  try {
    await slowShards(mesh, {hangMs: 100});
    const r = await generateWith(mesh, want.promptIds, opts, 6, async (route) => {
      await mesh.fault(replicaName("st1", route.st1), {drop: 1});
    });
    for (const s of ["st1", "st1r1"]) await mesh.fault(s, null);
    await slowShards(mesh, null);
    assert.deepEqual(r.summary.ids, want.ids);
    assert.equal(r.summary.reprefills, 0, "no replay");
    assert.ok(r.failovers.length >= 1 && r.failovers.every((e) => e.rebuilt === "resend" && e.from === e.replica), JSON.stringify(r.failovers));
    assert.match(r.failovers[0].reason, /link closed/);
  } finally { await mesh.close(); }
});

test("routes spread concurrent sessions across copies and a prompt that keeps a held prefix goes to the copy that holds it", async (t) => {
  const bytes = await sharedKnot(t, MODEL);
  if (!bytes) return;
  const opts = {maxTokens: 6, temperature: 0};
  const mesh = await meshFor(bytes, {stations: [2, 3], shards: 2, replicas: 2}, {testHooks: true});
  try {
    // both sessions are busy at once (the shards are held until released), so the second
    // acquire sees the first's load
    for (const s of mesh.topology.shards) for (let r = 0; r < 2; r++) await mesh.fault(replicaName(s.name, r), {gate: {after: 0, ms: 20_000}});
    const before = {st0: (await stationStats(mesh, "st0")).stats.frames, st0r1: (await stationStats(mesh, "st0r1")).stats.frames};
    const prompts = [[1, 400, 300, 20, 21, 22, 23, 24], [1, 401, 301, 30, 31, 32, 33, 34]];
    const runs = prompts.map((ids) => mesh.run({ids, options: opts}));
    // released once both sessions' first frames are held at every shard (at one copy or the
    // other): both routes are taken by then (a fixed 1.5 s sleep assumed it, on any load)
    for (let i = 0; i < 800; i++) {
      const held = await Promise.all(mesh.topology.shards.map(async (s) =>
        (await log(mesh, replicaName(s.name, 0))).seen + (await log(mesh, replicaName(s.name, 1))).seen));
      if (held.every((n) => n >= 2)) break;
      await new Promise((r) => setTimeout(r, 25));
    }
    for (const s of mesh.topology.shards) for (let r = 0; r < 2; r++) await mesh.fault(replicaName(s.name, r), null);
    for (const s of mesh.topology.shards) for (let r = 0; r < 2; r++) await (await mesh.worker(`knot-${replicaName(s.name, r)}`)).fetch("http://x/debug/release");
    const rs = await Promise.all(runs);
    const routes = rs.map((r) => r.telemetry.find((e) => e.event === "route").route.st0);
    assert.deepEqual([...routes].sort(), [0, 1], `one session per copy: ${routes}`);
    const after = {st0: (await stationStats(mesh, "st0")).stats.frames, st0r1: (await stationStats(mesh, "st0r1")).stats.frames};
    assert.ok(after.st0 > before.st0 && after.st0r1 > before.st0r1, `both copies computed: ${JSON.stringify({before, after})}`);
    // the prompt of the session on copy 1, continued: that copy holds its prefix
    const i1 = routes.indexOf(1);
    const held = [...prompts[i1], ...rs[i1].summary.ids];
    const r = await mesh.run({ids: [...held, 5, 6], options: opts});
    assert.equal(r.telemetry.find((e) => e.event === "route").route.st0, 1, "routed to the copy holding the prefix");
    assert.ok(r.summary.cachedTokens >= prompts[i1].length, `cached ${r.summary.cachedTokens}`);
  } finally { await mesh.close(); }
});

test("in a chain with 2 copies: a mid station killed or answering 500 moves the whole chain to the other copy, same ids", async (t) => {
  const bytes = await sharedKnot(t, MODEL);
  if (!bytes) return;
  const opts = {maxTokens: 16, temperature: 0};
  const want = await single(bytes, PROMPT, opts);
  const mesh = await meshFor(bytes, {stations: [1, 2, 2], shards: 2, replicas: 2, chain: true},
                             {testHooks: true, timeouts: {stationMs: 4000, backoffMs: 60_000}, prefixCache: {kvTokens: 0}});
  try {
    assert.equal(mesh.topology.chain, true);
    for (const [how, inject, reason, lost] of [
      ["killed", async (name, sid) => { await (await mesh.worker(`knot-${name}`)).fetch(`http://x/debug/restart?sid=${sid}&wipe=1`).then((r) => r.arrayBuffer()).catch(() => {}); }, /409/, true],
      ["HTTP 500", (name) => mesh.fault(name, {status: 500}), /HTTP 500/, false],
    ]) {
      await slowShards(mesh, {hangMs: 100});
      let failed = null, r1 = null;
      const r = await generateWith(mesh, want.promptIds, opts, 6, async (route, sid) => {
        r1 = route.st1;
        failed = replicaName("st1", r1);
        await inject(failed, sid);
      }, how);
      await slowShards(mesh, null);
      for (const s of ["st1", "st1r1"]) await mesh.fault(s, null);
      assert.deepEqual(r.summary.ids, want.ids, `${how}: the single-process ids`);
      const fo = r.failovers.filter((e) => e.rebuilt !== "resend");
      assert.deepEqual(fo.map((e) => e.rebuilt), lost ? ["restore", "replay"] : ["restore"], `${how}: ${JSON.stringify(r.failovers)}`);
      for (const e of fo) {
        assert.equal(e.member, "st0", "the chain's first leader names the route of the chain");
        assert.equal(e.replica, replicaName("st0", 1 - r1), "the whole chain moved to the other copy");
      }
      assert.match(fo[0].reason, reason);
      // every station of the new chain restored from its copy's snapshot, unless the killed one's was lost
      assert.equal(r.summary.reprefills, lost ? 1 : 0);
      assert.equal(r.events.filter((e) => e.event === "restored").length, lost ? 0 : 1);
    }
  } finally { await mesh.close(); }
});
