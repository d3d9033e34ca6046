// fuzz_frame.mjs — seeded mutation fuzzer for the station / shard wire frame
// (workers/lib/frame.mjs; tests/fuzz/fuzz_frame.cpp fuzzes the C++ codec, core/net/frame.h).
// Valid frames are built with encodeFrame, then truncated, extended, bit-flipped, spliced
// or given edge values in their version / kind / dtype / phase / rows / width / session-id
// length fields. Contract checked on every input: decodeFrame either throws a FrameError
// whose message starts "frame:", or returns a frame that encodes back to exactly the
// input bytes (so every field it reports is what the bytes say, and no bytes are ignored).
// Anything else — another exception type, a non-canonical frame, a call slower than 1 s —
// is a finding, reported with the seed and the input in hex.
//
//   node tests/fuzz/fuzz_frame.mjs [SECONDS] [--seed N]   prints {"harness","execs",...}
//   import {fuzzFrames} from "./fuzz_frame.mjs"           used by tests/workers/frame-fuzz.test.mjs
//   import {frameInputs} from "./fuzz_frame.mjs"          the same inputs as a list (native codec vectors)
import {decodeFrame, encodeFrame, FrameError, HEADER, KIND, PHASE} from "../../workers/lib/frame.mjs";

// mulberry32: small, seedable, good enough to pick mutations
function rng(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (n) => Math.floor(next() * n);
  return {next, int, pick: (xs) => xs[int(xs.length)]};
}

const KINDS = Object.keys(KIND), PHASES = Object.keys(PHASE);
const EDGE32 = [0, 1, 2, 3, 4, 127, 128, 129, 255, 256, 0x7fff, 0xffff, 0x10000, 0x7fffffff, 0x80000000, 0xfffffffe, 0xffffffff];
const EDGE16 = [0, 1, 2, 3, 4, 127, 128, 129, 255, 256, 0x7fff, 0x8000, 0xffff];
const EDGE8 = [0, 1, 2, 3, 4, 5, 6, 7, 127, 128, 255];
// header fields: [offset, bytes]
const FIELDS = [[0, 4], [4, 2], [6, 1], [7, 1], [8, 4], [12, 4], [16, 4], [20, 4], [24, 2], [26, 1], [27, 1], [28, 4], [32, 2], [34, 2]];

function validFrame(r) {
  const width = r.pick([0, 1, 1, 2, 3, 8, 17, 64]);
  const rows = width ? r.pick([0, 1, 1, 2, 3, 5]) : 0;
  const ints = r.int(2) === 1;
  const data = ints ? new Int32Array(rows * width) : new Float32Array(rows * width);
  for (let i = 0; i < data.length; i++) data[i] = ints ? r.int(2 ** 31) - 2 ** 30 : (r.next() - 0.5) * 2 ** r.int(40);
  const sidLen = r.pick([0, 1, 3, 4, 5, 16, 36, 127, 128]);
  let sid = "";
  for (let i = 0; i < sidLen; i++) sid += String.fromCharCode(0x21 + r.int(0x5e));
  return encodeFrame({kind: r.pick(KINDS), sid, reqId: r.int(2 ** 32), pos: r.int(4096), layer: r.int(80),
                      phase: r.pick(PHASES), flags: r.int(4), nCtx: r.int(32768), width, data});
}

function setField(b, off, n, val) {
  const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
  if (off + n > b.length) return;
  if (n === 4) v.setUint32(off, val >>> 0, true);
  else if (n === 2) v.setUint16(off, val & 0xffff, true);
  else v.setUint8(off, val & 0xff);
}

// one mutation of `b` (may return a new array)
function mutate(r, b, other) {
  switch (r.int(10)) {
    case 0: return b.slice(0, r.int(b.length + 1));                          // truncate
    case 1: { const x = new Uint8Array(b.length + 1 + r.int(64));           // extend
              x.set(b); for (let i = b.length; i < x.length; i++) x[i] = r.int(256); return x; }
    case 2: { const x = b.slice(); if (x.length) { const i = r.int(x.length); x[i] ^= 1 << r.int(8); } return x; }  // bit flip
    case 3: { const x = b.slice(); if (x.length) x[r.int(x.length)] = r.int(256); return x; }  // random byte
    case 4: { const x = b.slice(); const [off, n] = r.pick(FIELDS);          // edge value in a header field
              setField(x, off, n, r.pick(n === 4 ? EDGE32 : n === 2 ? EDGE16 : EDGE8)); return x; }
    case 5: { const x = b.slice(); const [off, n] = r.pick(FIELDS);          // random value in a header field
              setField(x, off, n, r.int(2 ** (8 * n))); return x; }
    case 6: { const x = b.slice(); setField(x, r.pick([16, 20]), 4, r.pick(EDGE32)); return x; }  // rows / width
    case 7: { const x = b.slice(); setField(x, 32, 2, r.pick(EDGE16)); return x; }  // session id length
    case 8: { const cut = r.int(Math.min(b.length, other.length) + 1);       // splice two frames
              const x = new Uint8Array(cut + other.length - cut); x.set(b.subarray(0, cut)); x.set(other.subarray(cut), cut); return x; }
    default: { const x = b.slice(); if (x.length > HEADER) x[HEADER + r.int(x.length - HEADER)] = r.int(256); return x; }  // sid / payload byte
  }
}

const hex = (b) => Buffer.from(b).toString("hex");

// decode one input: {what} is a finding (string) or null; accepted: decodeFrame returned a frame
export function checkOne(input, r) {
  // the same bytes as a Uint8Array at an odd offset inside a larger buffer, or as an ArrayBuffer
  let arg = input;
  const how = r.int(3);
  if (how === 1) { const big = new Uint8Array(input.length + 3); big.set(input, 3); arg = big.subarray(3); }
  else if (how === 2) arg = input.slice().buffer;
  const t0 = performance.now();
  let f;
  try {
    f = decodeFrame(arg);
  } catch (e) {
    if (!(e instanceof FrameError)) return {what: `decodeFrame threw ${e?.constructor?.name}: ${e?.message}`};
    if (!/^frame: /.test(e.message)) return {what: `FrameError message does not start "frame: ": ${e.message}`};
    return {what: performance.now() - t0 > 1000 ? "decodeFrame took more than 1 s to refuse" : null, accepted: false};
  }
  return {what: acceptedProblem(f, input, t0), accepted: true};
}

function acceptedProblem(f, input, t0) {
  if (performance.now() - t0 > 1000) return "decodeFrame took more than 1 s";
  if (f.data.length !== f.rows * f.width) return `accepted frame: ${f.data.length} values for ${f.rows} x ${f.width}`;
  if (!(f.kind in KIND) || !(f.phase in PHASE)) return `accepted frame: kind ${f.kind} / phase ${f.phase}`;
  let back;
  try {
    back = encodeFrame(f);
  } catch (e) {
    return `accepted frame does not encode again: ${e.message}`;
  }
  if (back.length !== input.length || back.some((x, i) => x !== input[i])) return `accepted frame is not canonical (encodes to ${hex(back)})`;
  return null;
}

/**
 * `count` inputs as the fuzzer makes them (seeded: the same list every time), for the native
 * codec's shared vectors and the native station's bad-frame test
 * (tests/fuzz/make-frame-vectors.mjs, tests/workers/fat-station.test.mjs).
 */
export function frameInputs({seed = 1, count = 1000} = {}) {
  const r = rng(seed), pool = [], out = [];
  for (let i = 0; i < 16; i++) pool.push(validFrame(r));
  while (out.length < count) {
    if (r.int(8) === 0) pool[r.int(pool.length)] = validFrame(r);
    let b = r.pick(pool);
    const depth = r.int(4);
    for (let k = 0; k < depth; k++) b = mutate(r, b, r.pick(pool));
    out.push(b);
  }
  return out;
}

/**
 * Run the fuzzer: `iterations` inputs or until `seconds` pass (whichever is given).
 * @returns {{execs: number, accepted: number, findings: {seed: number, execs: number, input: string, what: string}[]}}
 */
export function fuzzFrames({seed = 1, iterations = Infinity, seconds = Infinity, maxFindings = 5} = {}) {
  const r = rng(seed);
  const end = performance.now() + seconds * 1000;
  const findings = [];
  let execs = 0, accepted = 0;
  const pool = [];
  for (let i = 0; i < 16; i++) pool.push(validFrame(r));
  while (execs < iterations && findings.length < maxFindings && (execs & 255 || performance.now() < end)) {
    if (r.int(8) === 0) pool[r.int(pool.length)] = validFrame(r);
    let b = r.pick(pool);
    const depth = r.int(4);  // 0: the valid frame itself, else 1-3 stacked mutations
    for (let k = 0; k < depth; k++) b = mutate(r, b, r.pick(pool));
    const {what, accepted: ok} = checkOne(b, r);
    execs++;
    if (ok) accepted++;
    if (what) findings.push({seed, execs, input: hex(b), what});
  }
  return {execs, accepted, findings};
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const args = process.argv.slice(2);
  const si = args.indexOf("--seed");
  const seed = si >= 0 ? Number(args.splice(si, 2)[1]) : Date.now() % 2 ** 31;
  const seconds = Number(args[0] ?? 60);
  const t0 = performance.now();
  const {execs, accepted, findings} = fuzzFrames({seed, seconds});
  for (const f of findings) console.error(JSON.stringify(f));
  console.log(JSON.stringify({harness: "frame", seconds, seed, execs, accepted, wall_s: +((performance.now() - t0) / 1000).toFixed(1),
                              status: findings.length ? "fail" : "ok"}));
  process.exit(findings.length ? 1 : 0);
}
