// make-frame-vectors.mjs — shared test vectors of the wire frame, written by the JS codec
// (workers/lib/frame.mjs) for the C++ one (core/net/frame.h), at test time (ctest's
// net_frame_fixture writes build/frame-vectors.json), and the libFuzzer seeds
// tests/fuzz/corpus/frame/ (committed, small).
//   node tests/fuzz/make-frame-vectors.mjs --out FILE     the vectors
//   node tests/fuzz/make-frame-vectors.mjs --seeds        the seed corpus
// Vectors: "decode": fuzzer inputs (tests/fuzz/fuzz_frame.mjs frameInputs, fixed seeds) with
// frame.mjs's verdict: {hex, error} or {hex, frame: fields}, decoded with and without a pinned
// width / kinds; "encode": frames given by fields and the bytes encodeFrame makes of them.
// tests/native/net_frame.cpp decodes / encodes each and wants the same messages and bytes.
import fs from "node:fs";
import path from "node:path";
import {fileURLToPath} from "node:url";
import {decodeFrame, encodeFrame, FrameError} from "../../workers/lib/frame.mjs";
import {frameInputs} from "./fuzz_frame.mjs";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const hex = (b) => Buffer.from(b).toString("hex");
const fields = (f) => ({kind: f.kind, dtype: f.dtype, reqId: f.reqId, pos: f.pos, rows: f.rows, width: f.width, layer: f.layer,
                        phase: f.phase, flags: f.flags, nCtx: f.nCtx, sid: f.sid, payload: hex(new Uint8Array(f.data.buffer))});

function verdict(b, expect) {
  try {
    return {frame: fields(decodeFrame(b, expect))};
  } catch (e) {
    if (!(e instanceof FrameError)) throw e;
    return {error: e.message};
  }
}

const STATION = {width: 64, kinds: ["prefill", "decode", "end"]};
const decode = [];
for (const seed of [1, 2, 3])
  for (const b of frameInputs({seed, count: 700})) decode.push({hex: hex(b), any: verdict(b), station: verdict(b, STATION)});

const encode = [
  {kind: "prefill", sid: "s1", reqId: 7, pos: 0, width: 4, nCtx: 64, data: Float32Array.from([1, -2, 0.5, 3e-9, 0, -0, Infinity, -1e30])},
  {kind: "decode", sid: "abcd", reqId: 0xffffffff, pos: 4095, layer: 3, phase: "attn", flags: 16, nCtx: 128, width: 2, data: Float32Array.from([1.5, NaN])},
  {kind: "embed", sid: "x".repeat(128), reqId: 1, width: 1, data: Int32Array.from([0, 1, -1, 2147483647])},
  {kind: "end", sid: "e-3", reqId: 9, width: 0},
  {kind: "result", sid: "", reqId: 2, pos: 5, phase: "norm", flags: 1, width: 3, data: new Float32Array(3)},
  {kind: "lmhead", sid: "q", pos: 8, phase: "ffn", layer: 65535, flags: 255, nCtx: 4294967295, width: 3, data: Float32Array.from([1, 2, 3])},
].map((f) => ({fields: fields({...f, dtype: f.data instanceof Int32Array ? 1 : 0, rows: f.width ? (f.data?.length ?? 0) / f.width : 0,
                                reqId: f.reqId ?? 0, layer: f.layer ?? 0, phase: f.phase ?? "all", flags: f.flags ?? 0, nCtx: f.nCtx ?? 0, pos: f.pos ?? 0,
                                data: f.data ?? new Float32Array(0)}),
               hex: hex(encodeFrame(f))}));

const out = JSON.stringify({about: "written by tests/fuzz/make-frame-vectors.mjs from workers/lib/frame.mjs; do not edit", station: STATION, decode, encode}) + "\n";
const oi = process.argv.indexOf("--out");
// libFuzzer seeds: the valid encode vectors and a few decode inputs of each verdict
const seeds = [...encode.map((v) => v.hex), ...decode.filter((v) => v.any.frame).slice(0, 12).map((v) => v.hex),
               ...decode.filter((v) => v.any.error).slice(0, 12).map((v) => v.hex)];
const corpus = path.join(root, "tests/fuzz/corpus/frame");
if (oi >= 0) {
  const file = process.argv[oi + 1];
  fs.writeFileSync(file, out);
  const ok = decode.filter((v) => v.any.frame).length;
  console.log(`${file}: ${decode.length} decode vectors (${ok} accepted), ${encode.length} encode vectors`);
}
if (process.argv.includes("--seeds")) {
  fs.mkdirSync(corpus, {recursive: true});
  seeds.forEach((h, i) => fs.writeFileSync(path.join(corpus, `seed-${String(i).padStart(2, "0")}`), Buffer.from(h, "hex")));
  console.log(`${seeds.length} seeds in ${corpus}`);
}
