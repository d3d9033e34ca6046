// Crafted inputs at the wasm ABI (issue 7): offsets and sizes past 4 GiB (size_t is 32
// bits here), a tensor larger than the 128 MB memory cap, JS numbers that are not
// integers, row loads under a live session, a crafted n_ff, and JSON nesting bombs.
import {test} from "node:test";
import assert from "node:assert/strict";
import {readFileSync} from "node:fs";

import * as kw from "../../bindings/knotwork.mjs";
import {openParts} from "../../bindings/mesh.mjs";
import {sharedModel} from "./helpers.mjs";

const MODEL = "stories260K-pad256-llama-q4_k_m.gguf";
let knotBytes = null;

async function knotOf(t) {
  const p = sharedModel(t, MODEL);
  if (!p) return null;
  if (!knotBytes) {
    const m = await kw.openModel(kw.bytesSource(readFileSync(p), MODEL));
    knotBytes = m.toKnot();
    m.close();
  }
  return knotBytes;
}

const u32 = (b, o) => b[o] | (b[o + 1] << 8) | (b[o + 2] << 16) | (b[o + 3] * 2 ** 24);

/** Splits a .knot into its metadata object and payload bytes. */
function splitKnot(b) {
  const metaLen = u32(b, 6);
  const meta = JSON.parse(new TextDecoder().decode(b.subarray(10, 10 + metaLen)));
  const payloadOffset = ((10 + metaLen + 3) & ~3) + 1;
  return {meta, payload: b.subarray(payloadOffset)};
}

/** The canonical layout around a JSON text (docs/knot-format.md) and the first payload bytes. */
function layout(jsonText, payloadHead) {
  const js = new TextEncoder().encode(jsonText);
  const align = (10 + js.length + 3) & ~3;
  const out = new Uint8Array(align + 1 + payloadHead.length);
  out.set([0x4b, 0x4e, 0x4f, 0x54, 1, 0]);
  new DataView(out.buffer).setUint32(6, js.length, true);
  out.set(js, 10);
  out[align] = 0x40;
  out.set(payloadHead, align + 1);
  return out;
}

const FILLER = 2 ** 32 + 64 * 1024;  // F32 [16384 x 65537]: one tensor of 4 GiB + 64 KiB

/**
 * The model laid out behind the filler tensor, served as a virtual > 4 GiB file from a
 * few MB: header | tokenizer | filler (zeros) | the model's tensors. Logs every read.
 */
function largeSource(knot) {
  const {meta, payload} = splitKnot(knot);
  const tok = meta.tokenizer.size;
  for (const t of meta.tensors) t.offset += FILLER;
  meta.tensors.push({name: "filler_weight", type: "F32", shape: [16384, 65537], offset: tok, size: FILLER,
                     hash: "0000000000000000"});
  const head = layout(JSON.stringify(meta), payload.subarray(0, tok));
  const tail = payload.subarray(tok);
  const size = head.length + FILLER + tail.length;
  const tail0 = size - tail.length;
  const log = [];
  return {
    size, name: "large.knot", log, tail0,
    async read(offset, len) {
      log.push({offset, len});
      assert.ok(Number.isInteger(offset) && offset >= 0 && offset + len <= size, `read [${offset}, +${len})`);
      const out = new Uint8Array(len);
      for (let i = 0; i < len; ) {
        const p = offset + i;
        if (p < head.length) { const n = Math.min(len - i, head.length - p); out.set(head.subarray(p, p + n), i); i += n; }
        else if (p >= tail0) { const n = len - i; out.set(tail.subarray(p - tail0, p - tail0 + n), i); i += n; }
        else i += Math.min(len - i, tail0 - p);  // zeros
      }
      return out;
    },
  };
}

test("> 4 GiB: header, whole tensors past 2^32, row ranges with chunk hashes, embedding rows", async (t) => {
  const knot = await knotOf(t);
  if (!knot) return;
  const src = largeSource(knot);
  const h = await kw.parseKnotHeader(src);
  assert.equal(h.file_size, src.size);
  assert.ok(src.size > 2 ** 32);
  const emb = h.tensors.find((x) => x.name === "token_embd_weight");
  assert.ok(emb.offset > 2 ** 32 && emb.chunk_rows > 0);

  // the same model from the plain file, for the expected bytes / embeddings
  const plain = await openParts(kw.bytesSource(knot, "plain.knot"));
  const parts = await openParts(src);
  const cfg = h.config;
  const names = h.tensors.map((x) => x.name).filter((n) => n !== "filler_weight" && n !== "token_embd_weight");
  await parts.load(names);  // every tensor past 4 GiB, hash-verified by the core
  assert.ok(src.log.some((r) => r.offset > 2 ** 32));
  // a vocab slice of token_embd across the chunk edge at 256, verified by chunk hashes
  await parts.loadRows("token_embd_weight", 200, 300);
  await plain.loadRows("token_embd_weight", 200, 300);
  const ids = [200, 255, 256, 299, 5];
  const a = parts.embed(ids, 200, 300, cfg.n_embd), b = plain.embed(ids, 200, 300, cfg.n_embd);
  assert.deepEqual(a, b);
  assert.ok(a.some((x) => x !== 0));
  assert.ok(a.subarray(4 * cfg.n_embd).every((x) => x === 0), "id 5 is outside the slice");
  // the 4 GiB + 64 KiB tensor is refused before any byte of it is read
  const before = src.log.length;
  await assert.rejects(parts.load(["filler_weight"]),
    /large\.knot: tensor filler_weight: 4295032832 bytes do not fit this module's linear memory \(capped at 128 MiB\)/);
  assert.equal(src.log.length, before, "no read for the refused tensor");
  // so is a row range of it that only a whole-tensor read could verify (no chunk hashes)
  await assert.rejects(parts.loadRows("filler_weight", 65536, 65537),
    /tensor filler_weight rows \[65536, 65537\) need a read of 4295032832 bytes .* more than this module's linear memory/);
  assert.equal(src.log.length, before, "no read for the refused rows");
  parts.close(); plain.close();
});

test("a whole-model open of the > 4 GiB file stops at the filler tensor, naming it", async (t) => {
  const knot = await knotOf(t);
  if (!knot) return;
  const src = largeSource(knot);
  await assert.rejects(kw.openModel(src), /tensor filler_weight: 4295032832 bytes do not fit/);
  const f0 = src.tail0 - FILLER;
  assert.ok(src.log.some((r) => r.offset >= src.tail0), "the model's tensors were read");
  assert.ok(!src.log.some((r) => r.offset >= f0 && r.offset < src.tail0), "nothing of the filler was read");
});

test("JS numbers that are not exact non-negative integers are refused by name", async (t) => {
  const knot = await knotOf(t);
  if (!knot) return;
  const parts = await openParts(kw.bytesSource(knot, "m.knot"));
  const i = parts.entries.get("token_embd_weight").i;
  for (const [r0, r1, what] of [[NaN, 1, "r0"], [0, 1.5, "r1"], [-1, 2, "r0"], [0, 2 ** 60, "r1"], [0, Infinity, "r1"]])
    assert.throws(() => parts.w.call("kw_model_rows_plan", parts.handle, i, r0, r1),
                  new RegExp(`kw_model_rows_plan: ${what} = .* is not an integer in \\[0, 2\\^53\\]`));
  const w = parts.w;
  for (const size of [NaN, -5, 2 ** 64, 1.5])
    assert.throws(() => w.call("kw_parse_header", 0, 0, size, 0, 0), /kw_parse_header: file_size = .* is not an integer/);
  parts.close();
});

test("rows cannot be loaded into a model with a live session: its weights never change", async (t) => {
  const knot = await knotOf(t);
  if (!knot) return;
  const parts = await openParts(kw.bytesSource(knot, "m.knot"));
  await parts.load([...parts.entries.keys()]);  // the tokenizer blob too: kw_model_finish wants every entry
  const w = parts.w;
  w.call("kw_model_finish", parts.handle);
  const s = w.withString("{}", (p, n) => kw._withOut(w, (out) => w.call("kw_session_new", parts.handle, p, n, out)));
  const ev = (ids) => {
    const a = Int32Array.from(ids);
    const p = w.copyIn(new Uint8Array(a.buffer));
    try { w.call("kw_session_eval", s, p, a.length); } finally { w.free(p); }
    return w.resultBytes().slice();
  };
  const before = ev([1, 400, 300, 200]);
  await assert.rejects(parts.loadRows("token_embd_weight", 0, 256),
    /kw_model_rows_load: m\.knot: tensor token_embd_weight is in use by 1 live session\(s\)/);
  assert.throws(() => parts.evict(["blk_0_ffn_up_weight"]), /kw_model_tensor_evict: .*in use by 1 live session/);
  parts.loaded.delete("output_norm_weight");  // so load() asks the core for a new buffer
  await assert.rejects(parts.load(["output_norm_weight"]), /kw_model_tensor_buffer: .*in use by 1 live session/);
  w.call("kw_session_reset", s, 0);
  assert.deepEqual(ev([1, 400, 300, 200]), before, "same logits: the weights did not move");
  // once the session is gone the model may be cut down
  w.exports.kw_session_free(s);
  await parts.loadRows("token_embd_weight", 0, 256);
  parts.close();
});

test("a crafted n_ff is an error naming the field and value, natively sized or not", async (t) => {
  const knot = await knotOf(t);
  if (!knot) return;
  for (const nff of [2 ** 24, 2 ** 28]) {
    const {meta, payload} = splitKnot(knot);
    meta.config.n_ff = nff;
    const bytes = new Uint8Array([...layout(JSON.stringify(meta), payload)]);
    const m = await kw.openModel(kw.bytesSource(bytes, "nff.knot"));
    assert.throws(() => m.session(), new RegExp(`the config wants 256 x ${nff} \\(n_embd x n_ff\\)`));
    m.close();
  }
});

test("JSON nesting bombs in metadata, chat messages and session options are named errors", async (t) => {
  const knot = await knotOf(t);
  if (!knot) return;
  const deep = "[".repeat(100000) + "]".repeat(100000);
  const {meta, payload} = splitKnot(knot);
  const text = JSON.stringify({...meta, config: "@RAW@"}).replace('"@RAW@"', deep);
  await assert.rejects(kw.parseKnotHeader(kw.bytesSource(layout(text, payload), "deep.knot")),
                       /deep\.knot: metadata: JSON nests deeper than 64 levels/);
  const m = await kw.openModel(kw.bytesSource(knot, "m.knot"));
  const w = m.w;
  assert.throws(() => w.withString(deep, (p, n) => w.call("kw_chat_apply", m.handle, p, n, 1, 0, 0)),
                /kw_chat_apply: messages: JSON nests deeper than 64 levels/);
  assert.throws(() => w.withString(`{"stop": ${deep}}`, (p, n) => kw._withOut(w, (out) => w.call("kw_session_new", m.handle, p, n, out))),
                /kw_session_new: options: JSON nests deeper/);
  m.close();
});
