// Fluid stations under concurrent sessions (docs/memory.md): every session of an isolate
// shares the one set of tensors, so one session's phase must never evict what another's is
// about to run on, nor switch the byte source under another's load. Real workerd, real model.
// Without the station's phase lock these sessions fail (a phase's tensors evicted by another
// session: "missing tensor ... not loaded") or hold two phases at once.
import {test} from "node:test";
import assert from "node:assert/strict";
import * as kw from "../../bindings/knotwork.mjs";
import {openParts} from "../../bindings/mesh.mjs";
import {sharedKnot, single, meshFor} from "./helpers.mjs";

const MODEL = "stories260K-pad256-llama-q4_k_m.gguf";
const PROMPTS = ["Once upon a time", "The cat", "Lily and Tom", "One day"];
const opts = (i) => ({maxTokens: 8, temperature: 0.8, seed: i + 1});

async function largestPhaseBytes(bytes, layers) {
  const parts = await openParts(kw.bytesSource(bytes, "m.knot"));
  try {
    let max = 0;
    for (const l of layers) for (const ph of ["attn", "ffn_gate", "ffn_up", "ffn_down"]) {
      const names = parts.arch.phases[ph].filter((x) => x.per_layer && !/norm/.test(x.name)).map((x) => `blk_${l}_${x.name}`);
      max = Math.max(max, names.reduce((a, n) => a + (parts.entries.get(n)?.size ?? 0), 0));
    }
    return max;
  } finally { parts.close(); }
}

for (const warden of [false, true]) {
  test(`4 concurrent sessions through fluid stations${warden ? " loading through a layer warden" : ""}: each identical to its single-session run, one phase held per isolate`, async (t) => {
    const bytes = await sharedKnot(t, MODEL);
    if (!bytes) return;
    const wants = [];
    for (const [i, p] of PROMPTS.entries()) wants.push(await single(bytes, p, opts(i)));
    const mesh = await meshFor(bytes, {stations: [2, 3], shards: 2, resident: false}, {warden, testHooks: true});
    try {
      // a slow byte source (test hook): each phase load takes 5 ms more, so the sessions'
      // phases overlap in each station's isolate (observed below: phaseWaits)
      for (const name of ["st0", "st1"]) await mesh.fault(name, {loadDelayMs: 5});
      const got = await Promise.all(wants.map((w, i) => mesh.run({ids: w.promptIds, options: opts(i)})));
      got.forEach((r, i) => {
        assert.equal(r.error, undefined, `session ${i}: ${r.error?.error}`);
        assert.deepEqual(r.summary.ids, wants[i].ids, `session ${i}`);
      });
      for (const [name, layers] of [["st0", [0, 1]], ["st1", [2, 3, 4]]]) {
        const s = (await (await (await mesh.worker(`knot-${name}`)).fetch("http://x/stats")).json()).stats;
        // the sessions did overlap in this isolate: some phase waited for another session's
        assert.ok(s.phaseWaits > 0, `${name}: no phase of one session overlapped another's (${JSON.stringify(s)})`);
        assert.equal(s.phasesInFlight, 0);
        const largest = await largestPhaseBytes(bytes, layers);
        assert.ok(s.peakPhaseBytes > 0 && s.peakPhaseBytes <= largest,
                  `${name} held ${s.peakPhaseBytes} bytes of matmul weights at once; the largest phase is ${largest}`);
        if (warden) assert.equal(s.wardenRejects, 0, `${name}: ${s.lastReject}`);
      }
    } finally { await mesh.close(); }
  });
}
