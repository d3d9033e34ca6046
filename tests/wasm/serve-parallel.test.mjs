// Slots in `knotwork serve` (local-backend.mjs): with --parallel 4, four concurrent requests
// run at once in the one wasm instance, their tokens interleaved on the wire (observed in
// arrival order), each on its own slot (telemetry), and each reply equals its solo run
// (sampled, seeded); past the slots requests queue, say their place, and still equal solo.
import {test, before, after} from "node:test";
import assert from "node:assert/strict";

import {sharedModel, startServe} from "./helpers.mjs";

let srv = null;
before(async () => {
  const p = sharedModel({skip() {}}, "stories260K.gguf");
  if (p) srv = await startServe(p, ["--ctx", "256", "--parallel", "4"]);
});
after(() => srv?.stop());

const PROMPTS = ["Once upon a time", "The little dog", "Lily wanted to", "One day, a bird", "Tom and his mom", "The sun was"];

/** One streamed completion: {text, events: [{kind, value}]}; onToken(i) per content chunk. */
async function ask(i, onToken = () => {}) {
  const r = await fetch(`${srv.url}/v1/completions`, {method: "POST", headers: {"content-type": "application/json"},
    body: JSON.stringify({model: srv.id, prompt: PROMPTS[i], max_tokens: 48, ignore_eos: true, temperature: 0.9,
                          seed: 100 + i, stream: true})});
  assert.equal(r.status, 200);
  const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "", text = "";
  const tele = [];
  for (;;) {
    const {done, value} = await reader.read();
    if (done) break;
    buf += value;
    let k;
    while ((k = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, k);
      buf = buf.slice(k + 2);
      for (const line of block.split("\n")) {
        if (line.startsWith(": knotwork ")) tele.push(JSON.parse(line.slice(11)));
        else if (line.startsWith("data: {")) {
          const c = JSON.parse(line.slice(6));
          const t = c.choices[0]?.text ?? "";
          if (t) { text += t; onToken(i); }
        }
      }
    }
  }
  return {text, tele};
}

test("serve --parallel 4: four concurrent requests interleave, one slot each, each equal to its solo run", async (t) => {
  if (!srv) return t.skip("no model");
  const props = await (await fetch(`${srv.url}/props`)).json();
  assert.equal(props.total_slots, 4);
  const solo = [];
  for (let i = 0; i < 4; i++) solo.push((await ask(i)).text);
  assert.equal(new Set(solo).size, 4);
  const order = [];
  const runs = await Promise.all([0, 1, 2, 3].map((i) => ask(i, (j) => order.push(j))));
  for (let i = 0; i < 4; i++) assert.equal(runs[i].text, solo[i], `request ${i} equals its solo run`);
  const slots = runs.map((r) => r.tele.filter((e) => e.type === "slot"));
  assert.deepEqual(slots.map((s) => s.length), [1, 1, 1, 1]);
  assert.deepEqual(slots.map((s) => s[0].slot).sort(), [0, 1, 2, 3], "four slots, one each");
  assert.ok(runs.every((r) => !r.tele.some((e) => e.type === "queue")), "nobody queued");
  // they ran at once: every request's first token came before any request's last one
  const first = [0, 1, 2, 3].map((i) => order.indexOf(i)), last = [0, 1, 2, 3].map((i) => order.lastIndexOf(i));
  assert.ok(Math.max(...first) < Math.min(...last), `tokens interleaved: ${order.join("")}`);
  const h = await (await fetch(`${srv.url}/health`)).json();
  assert.equal(h.sessions, 0, "every session freed");
});

test("serve --parallel 4: past the slots requests queue with their position, then get a slot; still equal to solo", async (t) => {
  if (!srv) return t.skip("no model");
  const solo = [];
  for (let i = 0; i < 6; i++) solo.push((await ask(i)).text);
  const runs = await Promise.all([0, 1, 2, 3, 4, 5].map((i) => ask(i)));
  for (let i = 0; i < 6; i++) assert.equal(runs[i].text, solo[i], `request ${i}`);
  const queued = runs.map((r) => r.tele.find((e) => e.type === "queue")).filter(Boolean);
  assert.deepEqual(queued.map((q) => q.position).sort(), [1, 2], "two waited, first and second in line");
  assert.deepEqual(queued.map((q) => q.ahead).sort(), [4, 5]);
  for (const r of runs) {
    const types = r.tele.map((e) => e.type);
    assert.equal(types.filter((x) => x === "slot").length, 1);
    if (types.includes("queue")) assert.ok(types.indexOf("queue") < types.indexOf("slot"), "the slot after the wait");
  }
  const m = await (await fetch(`${srv.url}/metrics`)).text();
  assert.match(m, /^knotwork_slots_total 4$/m);
  assert.match(m, /^knotwork_requests_queued 0$/m);
});
