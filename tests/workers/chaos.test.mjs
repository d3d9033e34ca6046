// Chaos, short: bench/chaos.mjs's runChaos with a few clients for ~20 s against the mesh under
// workerd, through the official openai client, while station objects restart, shards answer
// 500 or stall and warden bytes are corrupted. No reply is lost or wrong (each against the
// single-process run of the same request), every kind of fault was injected and its effect
// observed, and the stations' sessions drain back.
import {test} from "node:test";
import assert from "node:assert/strict";
import {sharedModel} from "./helpers.mjs";
import {runChaos} from "../../bench/chaos.mjs";

const MODEL = "stories260K-pad256-llama-q4_k_m.gguf";

test("chaos (short): no reply lost or wrong under station restarts, shard 500s and stalls, corrupt warden bytes", {timeout: 240_000}, async (t) => {
  if (!sharedModel(t, MODEL)) return;
  const r = await runChaos({clients: 3, seconds: 20, seed: 7, model: MODEL, faultEveryMs: 1200});
  t.diagnostic(JSON.stringify({requests: r.requests, completed: r.completed, identical: r.identical, degraded: r.degraded,
                               failed: r.failed, faults: r.faults, observed: r.observed, errors: r.errors}));
  assert.equal(r.lost, 0, `lost replies: ${JSON.stringify(r.examples)}`);
  assert.equal(r.wrong, 0, `wrong replies: ${JSON.stringify(r.examples)}`);
  assert.ok(r.completed > 0, "some requests completed");
  assert.equal(r.completed + r.failed + r.lost, r.requests);
  for (const kind of ["station-restart", "shard-500", "shard-stall", "warden-corrupt"])
    assert.ok(r.faults[kind] > 0, `faults of kind ${kind} injected: ${JSON.stringify(r.faults)}`);
  // observed: the shard faults as abstains, the restarts as re-prefills or snapshot restores
  // (or as failures naming the station), the corruption as the station's hash rejects
  assert.ok(r.observed.abstains > 0, `abstains observed: ${JSON.stringify(r.observed)}`);
  assert.ok(r.observed.reprefills + r.observed.restores + Object.keys(r.errors).filter((e) => /st\d/.test(e)).length > 0,
            `restarts observed: ${JSON.stringify(r.observed)}`);
  assert.ok(r.observed.wardenRejects > 0, `warden rejects observed: ${JSON.stringify(r.observed)}`);
  // every failure names its cause
  for (const e of Object.keys(r.errors)) assert.match(e, /st\d|sh\d|shard|station|injected|decline|no answer|HTTP \d{3}/, e);
  assert.ok(r.drained, `sessions drained back: ${JSON.stringify(r.memory)}`);
});
