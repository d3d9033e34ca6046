// Token-exact greedy generation in wasm against reference-outputs.json, from .gguf
// directly and from .knot files (encoded by the wasm core and by the native CLI).
import {test} from "node:test";
import assert from "node:assert/strict";
import {readFileSync, existsSync} from "node:fs";
import {execFileSync} from "node:child_process";
import {join} from "node:path";

import * as kw from "../../bindings/knotwork.mjs";
import {sharedModel, referenceOutputs, tmpDir, KNOT_BIN} from "./helpers.mjs";

// K-quant files have a near-tie at generated step 22 (README): compare 21 ids there.
const CASES = [
  ["stories260K.gguf", 32],
  ["stories260K-pad256-llama-q8_0.gguf", 32],
  ["stories260K-pad256-llama-q6_k.gguf", 32],
  ["stories260K-pad256-llama-q4_k_m.gguf", 21],
  ["stories260K-pad256-qwen2-q4_k_m.gguf", 21],
];

async function greedy(model, n) {
  const s = await model.complete(referenceOutputs().prompt, {maxTokens: n, temperature: 0});
  return s;
}

function expected(name, n) {
  const ref = referenceOutputs().models[name];
  assert.ok(ref, `no reference for ${name}`);
  const ids = ref.exactFloat64.tokenIds.slice(0, n);
  // the native llama.cpp run agrees on these positions (checked, not assumed)
  assert.deepEqual(ref.llamaCppNative.tokenIds.slice(0, n), ids);
  return {ids, promptIds: ref.promptTokenIds};
}

for (const [name, n] of CASES) {
  test(`${name}: greedy ${n} ids from the .gguf match the reference`, async (t) => {
    const p = sharedModel(t, name);
    if (!p) return;
    const want = expected(name, n);
    const m = await kw.openModel(p);
    try {
      assert.equal(m.info.format, "gguf");
      assert.deepEqual(m.tokenize(referenceOutputs().prompt), want.promptIds);
      const s = await greedy(m, n);
      assert.deepEqual(s.ids, want.ids);
      assert.equal(s.text, m.detokenize(s.ids));
      assert.equal(s.reason, "length");
    } finally { m.close(); }
  });

  test(`${name}: greedy ${n} ids from a wasm-encoded .knot match the reference`, async (t) => {
    const p = sharedModel(t, name);
    if (!p) return;
    const want = expected(name, n);
    const g = await kw.openModel(p);
    const knot = g.toKnot();
    g.close();
    const src = kw.countingSource(kw.bytesSource(knot, name.replace(".gguf", ".knot")));
    const m = await kw.openModel(src);
    try {
      assert.equal(m.info.format, "knot");
      // header probe + tokenizer blob + one range per tensor (each < 4 MiB chunk)
      assert.equal(src.log.length, 1 + 1 + m.info.tensors.length);
      assert.deepEqual((await greedy(m, n)).ids, want.ids);
    } finally { m.close(); }
  });

  test(`${name}: greedy ${n} ids from a native \`knot convert\` .knot match the reference`, async (t) => {
    const p = sharedModel(t, name);
    if (!p) return;
    if (!existsSync(KNOT_BIN)) {
      if (process.env.CI) throw new Error(`${KNOT_BIN} missing (CI is set: the native build must run first)`);
      t.skip("native build/bin/knot not built");
      return;
    }
    const want = expected(name, n);
    const out = join(tmpDir(), name.replace(".gguf", ".knot"));
    execFileSync(KNOT_BIN, ["convert", p, out], {stdio: "pipe"});
    const m = await kw.openModel(out);
    try {
      assert.deepEqual((await greedy(m, n)).ids, want.ids);
    } finally { m.close(); }
  });
}

test("reference mode (dequantized weights, f32 activations) matches the exact float64 pass past the near-tie", async (t) => {
  const name = "stories260K-pad256-llama-q4_k_m.gguf";
  const p = sharedModel(t, name);
  if (!p) return;
  const ref = referenceOutputs().models[name].exactFloat64.tokenIds;
  const m = await kw.openModel(p);
  try {
    const s = await m.complete(referenceOutputs().prompt, {maxTokens: 32, temperature: 0, reference: true});
    assert.deepEqual(s.ids, ref);
    assert.equal(s.mode, "reference");
  } finally { m.close(); }
});

test("streaming: token events add up to the summary; telemetry and memory are reported", async (t) => {
  const p = sharedModel(t, "stories260K.gguf");
  if (!p) return;
  const m = await kw.openModel(p);
  try {
    const events = [];
    for await (const ev of m.generate("Once upon a time", {maxTokens: 20, temperature: 0})) events.push(ev);
    const toks = events.filter((e) => e.type === "token");
    const sum = events.at(-1);
    assert.equal(sum.type, "summary");
    assert.equal(toks.length, 20);
    assert.deepEqual(toks.map((e) => e.token), sum.ids);
    assert.equal(toks.map((e) => e.text).join(""), sum.text);
    assert.equal(sum.nPrompt, 5);
    assert.equal(sum.nDecoded, 19);
    assert.ok(sum.prefillTokS > 0 && sum.decodeTokS > 0);
    assert.ok(toks.at(-1).telemetry.n === 20);
    assert.ok(sum.memory.peakLinear >= sum.memory.linear && sum.memory.linear <= 128 << 20);
  } finally { m.close(); }
});

test("per-token telemetry carries a memory figure in bytes (README: tokens so far, tok/s, memory)", async (t) => {
  const p = sharedModel(t, "stories260K.gguf");
  if (!p) return;
  const m = await kw.openModel(p);
  try {
    const before = await kw.memoryStats();
    const toks = [];
    let sum;
    for await (const ev of m.generate("Once upon a time", {maxTokens: 6, temperature: 0, nCtx: 256})) {
      if (ev.type === "token") toks.push(ev); else sum = ev;
    }
    assert.equal(toks.length, 6);
    toks.forEach((ev, i) => {
      const {n, elapsedMs, decodeTokS, memory} = ev.telemetry;
      assert.equal(n, i + 1);
      assert.ok(elapsedMs > 0 && decodeTokS >= 0, JSON.stringify(ev.telemetry));
      assert.deepEqual(Object.keys(memory), ["linear", "peakLinear", "heap", "peakHeap"]);
      for (const v of Object.values(memory)) assert.ok(Number.isInteger(v) && v > 0, JSON.stringify(memory));
      assert.ok(memory.peakLinear >= memory.linear && memory.linear <= 128 << 20 && memory.peakHeap >= memory.heap);
      // the session's KV cache and buffers are live while it generates
      assert.ok(memory.heap > before.heap, `${memory.heap} vs ${before.heap} before the session`);
      assert.ok(memory.peakLinear <= sum.memory.peakLinear);
    });
  } finally { m.close(); }
});

test("kvBudget in generate() and session() bounds the KV cache: an error naming both numbers, as --kv-budget", async (t) => {
  const p = sharedModel(t, "stories260K.gguf");
  if (!p) return;
  const m = await kw.openModel(p);
  try {
    const c = m.info.config, perTok = 2 * c.n_layer * c.n_head_kv * c.head_dim * 2;  // F16 KV (fast mode)
    const want = new RegExp(`^KV cache needs ${64 * perTok} bytes \\(64 positions x ${perTok} bytes/token, F16, .*\\) but the KV budget is 1000 bytes$`);
    const refused = (e) => { assert.match(e.message, want); return true; };
    await assert.rejects(m.generate("Once", {maxTokens: 2, nCtx: 64, kvBudget: 1000}).next(), refused);
    assert.throws(() => m.session({nCtx: 64, kvBudget: 1000}), refused);
    assert.throws(() => m.session({nCtx: 64, kvBudget: 64 * perTok - 1}), (e) => /but the KV budget is \d+ bytes$/.test(e.message));
    // a budget that fits changes nothing
    const s = m.session({nCtx: 64, kvBudget: 64 * perTok});
    try { assert.equal(s.eval([1, 403]).length, c.n_vocab); } finally { s.free(); }
    const a = await m.complete("Once upon a time", {maxTokens: 8, temperature: 0, nCtx: 64, kvBudget: 64 * perTok});
    const b = await m.complete("Once upon a time", {maxTokens: 8, temperature: 0, nCtx: 64});
    assert.deepEqual(a.ids, b.ids);
    // checked by the option table like every other option
    await assert.rejects(m.generate("Once", {kvBudget: 0}).next(), (e) => e.status === kw.STATUS.USAGE && /kv_budget/.test(e.message));
    assert.throws(() => m.session({kvBudget: -1}), (e) => e.status === kw.STATUS.USAGE);
  } finally { m.close(); }
});

test("stop strings end the text before the stop string; seeded sampling is reproducible", async (t) => {
  const p = sharedModel(t, "stories260K.gguf");
  if (!p) return;
  const m = await kw.openModel(p);
  try {
    const s = await m.complete("Once upon a time", {maxTokens: 32, temperature: 0, stop: ["Lily"]});
    assert.equal(s.reason, "stop");
    assert.equal(s.text, ", there was a little girl named ");
    const a = await m.complete("Once upon a time", {maxTokens: 24, temperature: 0.9, seed: 42});
    const b = await m.complete("Once upon a time", {maxTokens: 24, temperature: 0.9, seed: 42});
    assert.deepEqual(a.ids, b.ids);
    assert.equal(a.ids.length, 24);
  } finally { m.close(); }
});

test("bad generation options and a freed model are errors, not aborts", async (t) => {
  const p = sharedModel(t, "stories260K.gguf");
  if (!p) return;
  const m = await kw.openModel(p);
  const it = m.generate([1, 403, 99999], {maxTokens: 4});
  await assert.rejects(it.next(), /token 2 has id 99999, outside the vocabulary \[0,512\)/);
  await assert.rejects(m.generate("x", {maxTokens: 4, nCtx: 1 << 30}).next(), /n_ctx must be an integer in \[1, 1048576\], got 1073741824/);
  m.close();
  assert.throws(() => m.tokenize("hello"), /closed/);
});

test("generate() options go through the core's option table: its ranges, status USAGE", async (t) => {
  const p = sharedModel(t, "stories260K.gguf");
  if (!p) return;
  const m = await kw.openModel(p);
  try {
    for (const [opts, msg] of [[{topP: 2}, "top_p must be a number in (0, 1], got 2"],
                               [{temperature: -1}, "temperature must be a number >= 0, got -1"],
                               [{maxTokens: 2.5}, "option n_predict: 2.5 is not an integer"],
                               [{seed: -3}, "seed must be an integer in [0, 9007199254740991], got -3"],
                               [{options: {bogus: 1}}, /^unknown option 'bogus' \(known: /]]) {
      await assert.rejects(m.generate("x", opts).next(), (e) => {
        assert.equal(e.status, kw.STATUS.USAGE, e.message);
        if (typeof msg === "string") assert.equal(e.message, msg); else assert.match(e.message, msg);
        return true;
      }, JSON.stringify(opts));
    }
    // the command-line parse of the node CLI: the same table, the same message
    await assert.rejects(kw.parseCommandLine("generate", ["m", "-p", "x", "--top-p", "2"], "knotwork"),
                         (e) => e.status === kw.STATUS.USAGE && e.message === "--top-p must be a number in (0, 1], got 2");
    const cl = await kw.parseCommandLine("generate", ["m", "-p", "x", "--top-p", "0.5", "-n", "3"], "knotwork");
    const s = await m.complete("Once", {options: cl.options, temperature: 0});
    assert.equal(s.ids.length, 3);
  } finally { m.close(); }
});

test("chat template through the ABI: formats messages, rejects bad ones with a message", async (t) => {
  const p = sharedModel(t, "stories260K.gguf");
  if (!p) return;
  const m = await kw.openModel(p);
  try {
    const msgs = [{role: "system", content: "Be brief."}, {role: "user", content: "Tell me a story"}];
    // llama.cpp's formats of these names (llm_chat_apply_template), without and with the
    // generation prompt (Llama-2 has none)
    const want = {
      chatml: ["<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nTell me a story<|im_end|>\n", "<|im_start|>assistant\n"],
      llama2: ["[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nTell me a story [/INST]", ""],
      llama3: ["<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n" +
               "Tell me a story<|eot_id|>", "<|start_header_id|>assistant<|end_header_id|>\n\n"],
    };
    for (const [template, [body, gen]] of Object.entries(want)) {
      assert.equal(m.applyChatTemplate(msgs, {template, addGenerationPrompt: false}), body, template);
      assert.equal(m.applyChatTemplate(msgs, {template}), body + gen, `${template} with the generation prompt`);
    }
    assert.throws(() => m.applyChatTemplate([{role: "user"}]), /"role" and "content"/);
    assert.throws(() => m.applyChatTemplate(msgs, {template: "nope"}), /unknown chat template 'nope'/);
  } finally { m.close(); }
});
