// helpers.mjs — shared by tests/workers/*.test.mjs: models as .knot bytes, the
// single-process reference run, and a mesh started under workerd (Miniflare).
import {execFileSync} from "node:child_process";
import {existsSync, readFileSync} from "node:fs";
import {join} from "node:path";
import * as kw from "../../bindings/knotwork.mjs";
import {startMesh} from "../../deploy/miniflare.mjs";
import {topologyFromCounts} from "../../workers/lib/topology.mjs";
import {sharedModel, tmpDir, KNOT_BIN} from "../wasm/helpers.mjs";

export {sharedModel, topologyFromCounts, startMesh};

const cache = new Map();

/** A shared .gguf converted to .knot bytes (in memory), or null when skipped. */
export async function sharedKnot(t, name) {
  if (cache.has(name)) return cache.get(name);
  const p = sharedModel(t, name);
  if (!p) return null;
  const m = await kw.openModel(await kw.fileSource(p));
  const bytes = m.toKnot();
  m.close();
  cache.set(name, bytes);
  return bytes;
}

/** A `knot synth` model's bytes, or null when the native CLI is missing (fails under CI). */
export function synthKnot(t, name, args) {
  if (cache.has(name)) return cache.get(name);
  if (!existsSync(KNOT_BIN)) {
    if (process.env.CI) throw new Error(`${KNOT_BIN} missing (CI is set)`);
    t.skip(`${KNOT_BIN} missing`);
    return null;
  }
  const out = join(tmpDir("knotwork-workers-"), `${name}.knot`);
  execFileSync(KNOT_BIN, ["synth", ...args, out], {stdio: "pipe"});
  const bytes = new Uint8Array(readFileSync(out));
  cache.set(name, bytes);
  return bytes;
}

// qwen2 with biases, 16 heads / 4 KV heads (KV groups of 4), Q4_K_M; llama tied + padded vocab.
export const SYNTH_QWEN = ["--arch", "qwen2", "--hidden", "512", "--layers", "4", "--heads", "16", "--kv-heads", "4",
  "--ffn", "512", "--vocab", "300", "--type", "Q4_K_M", "--seed", "7"];
// qwen3: per-head q/k RMSNorm, no biases, head_dim 128 != hidden / heads (256 / 4)
export const SYNTH_QWEN3 = ["--arch", "qwen3", "--hidden", "256", "--layers", "3", "--heads", "4", "--kv-heads", "2",
  "--head-dim", "128", "--ffn", "512", "--vocab", "300", "--type", "Q4_K_M", "--seed", "5"];
export const SYNTH_TIED = ["--arch", "llama", "--hidden", "256", "--layers", "2", "--heads", "8", "--kv-heads", "2",
  "--ffn", "512", "--vocab", "300", "--vocab-tensor", "320", "--tied", "--type", "Q8_0", "--seed", "7"];

/** Single-process wasm run: the summary of Model.generate (ids, text). */
export async function single(bytes, prompt, opts) {
  const m = await kw.openModel(kw.bytesSource(bytes, "single.knot"));
  try {
    const ids = typeof prompt === "string" ? m.tokenize(prompt) : prompt;
    return {...(await m.complete(ids, opts)), promptIds: ids};
  } finally { m.close(); }
}

export async function configOf(bytes) {
  return (await kw.parseKnotHeader(kw.bytesSource(bytes, "model.knot"))).config;
}

/** Start a mesh for bytes over a topology from counts ({stations, shards, vocab, slices}). */
export async function meshFor(bytes, counts, opts = {}) {
  const topology = topologyFromCounts(await configOf(bytes), {knot: "model.knot", ...counts});
  return startMesh({knotBytes: bytes, topology, ...opts});
}
