// The native fat station (`knot station`, core/net/fat_station.h) against the Worker station
// (workers/station under workerd) and the wasm station (bindings/mesh.mjs): the model is
// served by a small Node HTTP range server that logs every range, so the test sees the station
// read the header window and then exactly its own tensors; frames go by POST and WebSocket
// with the JS codec (workers/lib/frame.mjs). Checked: /health (config named as `knot
// inspect` names it, layers, sessions, memory); rows bit-exact with the wasm reference station
// (--reference) and near the Worker station's simd rows; a rewind equals a fresh session bit
// for bit; every fuzzer input (tests/fuzz/fuzz_frame.mjs frameInputs) and every frame wrong
// here gets the Worker station's status and message; a lost session is a 409; a killed
// station closes its sockets (the client sees the close) and refuses connections; SIGTERM exits 0.
import {test} from "node:test";
import assert from "node:assert/strict";
import {spawn} from "node:child_process";
import {existsSync} from "node:fs";
import http from "node:http";
import WebSocket from "ws";
import {encodeFrame, decodeFrame, FLAG} from "../../workers/lib/frame.mjs";
import {frameInputs} from "../fuzz/fuzz_frame.mjs";
import {openParts} from "../../bindings/mesh.mjs";
import * as kw from "../../bindings/knotwork.mjs";
import {KNOT_BIN} from "../wasm/helpers.mjs";
import {sharedKnot, synthKnot, meshFor, configOf} from "./helpers.mjs";

const MODEL = "stories260K-pad256-llama-q4_k_m.gguf";
const N_CTX = 64;
const LAYERS = [1, 3];  // st1 of stations [1, 2, 2]

function needBin(t) {
  if (existsSync(KNOT_BIN)) return true;
  if (process.env.CI) throw new Error(`${KNOT_BIN} missing (CI is set)`);
  t.skip(`${KNOT_BIN} missing`);
  return false;
}

// The model over HTTP ranges; reads: every [a, b) served. corrupt: flip a bit of that byte.
async function rangeServer(bytes, {corrupt = -1} = {}) {
  const reads = [];
  if (corrupt >= 0) { bytes = bytes.slice(); bytes[corrupt] ^= 0x40; }
  const srv = http.createServer((req, res) => {
    const m = /^bytes=(\d+)-(\d+)$/.exec(req.headers.range ?? "");
    if (!m) { res.writeHead(416); res.end(); return; }
    const a = +m[1], b = Math.min(+m[2], bytes.length - 1);
    reads.push([a, b + 1]);
    res.writeHead(206, {"content-range": `bytes ${a}-${b}/${bytes.length}`, "content-length": b - a + 1});
    res.end(bytes.subarray(a, b + 1));
  });
  await new Promise((ok) => srv.listen(0, "127.0.0.1", ok));
  return {url: `http://127.0.0.1:${srv.address().port}/model.knot`, reads, close: () => new Promise((ok) => srv.close(ok))};
}

// `knot station ARGS --port 0`: resolves once it prints its URL.
function startStation(args) {
  const proc = spawn(KNOT_BIN, ["station", ...args, "--port", "0"], {stdio: ["ignore", "pipe", "pipe"]});
  let out = "", err = "";
  proc.stderr.on("data", (d) => { err += d; });
  const exited = new Promise((ok) => proc.on("exit", (code, signal) => ok({code, signal})));
  return new Promise((ok, fail) => {
    proc.stdout.on("data", (d) => {
      out += d;
      const m = /^knot station listening on (http:\/\/127\.0\.0\.1:\d+)\n/.exec(out);
      if (m) ok({url: m[1], proc, exited, stderr: () => err});
    });
    exited.then(({code}) => fail(new Error(`knot station exited ${code}: ${err}`)));
  });
}

async function post(base, frame, sid) {
  const r = await fetch(`${base}/?sid=${sid}`, {method: "POST", body: frame});
  return r.ok ? {status: 200, frame: decodeFrame(new Uint8Array(await r.arrayBuffer()))} : {status: r.status, error: (await r.json()).error};
}
async function postWorker(mesh, name, frame, sid) {
  const w = await mesh.worker(`knot-${name}`);
  const r = await w.fetch(`http://x/?sid=${sid}`, {method: "POST", body: frame});
  return r.ok ? {status: 200, frame: decodeFrame(new Uint8Array(await r.arrayBuffer()))} : {status: r.status, error: (await r.json()).error};
}
const health = async (base) => (await fetch(`${base}/health`)).json();

// Hidden-state rows in [-1, 1): a deterministic function of (seed, position, column).
const rows = (E, seed, pos0, n) => Float32Array.from({length: n * E}, (_, i) => Math.sin(seed * 7.1 + (pos0 + i / E) * 1.7 + (i % E) * 0.37));
const frame = (sid, pos, x, E, over = {}) =>
  encodeFrame({kind: pos === 0 || x.length > E ? "prefill" : "decode", sid, reqId: pos + 1, pos, width: E, nCtx: N_CTX, data: x, ...over});

// A session's steps as a coordinator makes them: chunked prefill, decode, a K = 3 verify
// pass, a rewind (a rejected draft), then decode on.
const STEPS = [[0, 4], [4, 3], [7, 1], [8, 4], [9, 2], [11, 1]];

test("the fat station reads the header window, then only its own tensors, each on first use; /health", async (t) => {
  const bytes = await sharedKnot(t, MODEL);
  if (!bytes || !needBin(t)) return;
  const c = await configOf(bytes), h = await kw.parseKnotHeader(kw.bytesSource(bytes, "model.knot"));
  const srv = await rangeServer(bytes);
  const st = await startStation([srv.url, "--layers", `${LAYERS[0]}..${LAYERS[1]}`]);
  try {
    const h0 = await health(st.url);
    for (const k of ["arch", "n_embd", "n_layer", "n_head", "n_head_kv", "head_dim", "n_ff", "n_vocab"]) assert.equal(h0.config[k], c[k], k);
    assert.deepEqual(h0.layers, LAYERS);
    assert.equal(h0.role, "mid");
    assert.equal(h0.sessions, 0);
    assert.equal(h0.memory.tensorBytes, 0, "no tensor before the first frame");
    assert.ok(h0.memory.rss > 0);
    const headerReads = srv.reads.length;
    assert.ok(srv.reads.every(([a, b]) => a === 0 || b <= h.payload_offset), `header reads ${JSON.stringify(srv.reads)}`);
    const r = await post(st.url, frame("s", 0, rows(c.n_embd, 1, 0, 3), c.n_embd), "s");
    assert.equal(r.status, 200, r.error);
    // every later read is exactly one tensor of layers [1, 3), each read once
    // (the header JSON's tensor offsets are absolute in the file)
    const byRange = new Map(h.tensors.map((x) => [`${x.offset}-${x.offset + x.size}`, x.name]));
    const names = srv.reads.slice(headerReads).map(([a, b]) => byRange.get(`${a}-${b}`) ?? `bytes ${a}-${b}`);
    const want = h.tensors.filter((x) => /^blk_(\d+)_/.test(x.name) && +/^blk_(\d+)_/.exec(x.name)[1] >= LAYERS[0] &&
                                         +/^blk_(\d+)_/.exec(x.name)[1] < LAYERS[1]).map((x) => x.name);
    assert.deepEqual([...names].sort(), [...want].sort());
    const h1 = await health(st.url);
    const served = srv.reads.reduce((a, [x, y]) => a + y - x, 0);
    assert.deepEqual(srv.reads[0], [0, 1], "the size probe: one byte (Content-Range gives the total)");
    assert.equal(h1.source.bytesRead, served - 1, "the station counts what the server served (after the size probe)");
    assert.equal(h1.source.fileBytes, bytes.length);
    assert.equal(h1.memory.tensorBytes, h.tensors.filter((x) => want.includes(x.name)).reduce((a, x) => a + x.size, 0));
    assert.equal(h1.sessions, 1);
    assert.equal(h1.live[0].nPos, 3);
    // a second frame reads nothing more
    await post(st.url, frame("s", 3, rows(c.n_embd, 1, 3, 1), c.n_embd), "s");
    assert.equal(srv.reads.length, headerReads + want.length);
  } finally {
    st.proc.kill("SIGTERM");
    assert.deepEqual(await st.exited, {code: 0, signal: null}, "SIGTERM exits 0");
    await srv.close();
  }
});

test("the fat station's rows: bit-exact with the wasm reference station, a rewind equals a fresh session", async (t) => {
  const bytes = await sharedKnot(t, MODEL);
  if (!bytes || !needBin(t)) return;
  const srv = await rangeServer(bytes);
  const st = await startStation([srv.url, "--layers", `${LAYERS[0]}..${LAYERS[1]}`, "--reference"]);
  const parts = await openParts(kw.bytesSource(bytes, "model.knot"));
  try {
    const c = await parts.config(), E = c.n_embd;
    for (let l = LAYERS[0]; l < LAYERS[1]; l++) for (const ph of ["attn", "ffn_gate", "ffn_up", "ffn_down"]) await parts.load(parts.layerTensors(l, ph));
    const ws = parts.station({layers: LAYERS, nCtx: N_CTX, reference: true});
    const cols = [0, c.n_ff];
    const wasm = (pos, x) => {
      ws.truncate(pos);
      const n = x.length / E;
      x = Float32Array.from(x);
      for (let l = LAYERS[0]; l < LAYERS[1]; l++) {
        const a = ws.attn(l, pos, x, n);
        for (let i = 0; i < x.length; i++) x[i] += a[i];
        let hh = ws.ffnGate(l, x, n, cols);
        hh = ws.ffnUp(l, x, n, hh, cols);
        const d = ws.ffnDown(l, hh, n, cols, E);
        for (let i = 0; i < x.length; i++) x[i] += d[i];
      }
      return x;
    };
    for (const [pos, n] of STEPS) {
      const x = rows(E, 2, pos, n);
      const r = await post(st.url, frame("a", pos, x, E), "a");
      assert.equal(r.status, 200, r.error);
      assert.deepEqual(r.frame.data, wasm(pos, x), `rows at ${pos} (+${n})`);
      assert.equal(r.frame.pos, pos);
      assert.equal(r.frame.reqId, pos + 1);
    }
    // the rewound session "a" holds [0, 12); a fresh session "b" fed the same rows answers the same bits
    const fresh = [];
    for (const [pos, n] of [[0, 4], [4, 3], [7, 1], [8, 1], [9, 2], [11, 1]]) fresh.push((await post(st.url, frame("b", pos, rows(E, 2, pos, n), E), "b")).frame.data);
    const again = await post(st.url, frame("a", 12, rows(E, 2, 12, 1), E), "a");
    const freshNext = await post(st.url, frame("b", 12, rows(E, 2, 12, 1), E), "b");
    assert.deepEqual(again.frame.data, freshNext.frame.data, "rewound session = fresh session, bit for bit");
    const hh = await health(st.url);
    assert.equal(hh.stats.rewinds, 1);
    assert.equal(hh.sessions, 2);
    // end frees a session
    const e = await post(st.url, encodeFrame({kind: "end", sid: "a", reqId: 5, width: 0}), "a");
    assert.equal(e.status, 200);
    assert.equal(e.frame.kind, "result");
    assert.equal(e.frame.reqId, 5);
    assert.equal((await health(st.url)).sessions, 1);
    ws.free();
  } finally {
    parts.close();
    st.proc.kill("SIGTERM");
    await st.exited;
    await srv.close();
  }
});

test("the fat station answers as the Worker station: rows, 400s of every fuzzer input, frames wrong here, 409", async (t) => {
  const bytes = await sharedKnot(t, MODEL);
  if (!bytes || !needBin(t)) return;
  const mesh = await meshFor(bytes, {stations: [1, 2, 2]});
  const srv = await rangeServer(bytes);
  // named as the Worker member, so messages are equal text
  const st = await startStation([srv.url, "--layers", "1..3", "--name", "st1"]);
  try {
    const E = mesh.topology.n_embd;
    assert.deepEqual(mesh.topology.stations[1].layers, LAYERS);
    const both = async (bytes, sid) => [await post(st.url, bytes, sid), await postWorker(mesh, "st1", bytes, sid)];
    // rows: the same steps; simd kernels on both sides (native AVX vs wasm SIMD): close, not equal bits
    let worst = 0;
    for (const [pos, n] of STEPS) {
      const [a, b] = await both(frame("w", pos, rows(E, 3, pos, n), E), "w");
      assert.equal(a.status, 200, a.error);
      assert.equal(b.status, 200, b.error);
      for (let i = 0; i < a.frame.data.length; i++) worst = Math.max(worst, Math.abs(a.frame.data[i] - b.frame.data[i]) / (1 + Math.abs(b.frame.data[i])));
    }
    assert.ok(worst < 1e-3, `fat vs Worker station rows: worst relative difference ${worst}`);
    // frames wrong here: the same status and message
    const x1 = rows(E, 4, 0, 1);
    const cases = [
      frame("w", 20, x1, E),                                        // 409: past the positions held
      frame("nobody", 5, x1, E),                                    // 409: no session
      frame("w", 0, x1, E, {nCtx: 0}),                              // n_ctx 0
      frame("w", 63, rows(E, 4, 63, 2), E),                         // past the context
      frame("w", 12, x1, E, {flags: FLAG.normLast}),                // normLast of a mid station
      frame("w", 12, x1, E, {phase: "norm"}),                       // phase norm of a mid station
      frame("w", 12, x1, E, {phase: "attn", layer: 4}),             // layer outside [1,3)
      frame("w", 12, x1, E, {phase: "ffn", layer: 0}),
      encodeFrame({kind: "embed", sid: "w", width: 1, data: Int32Array.from([1])}),  // kind not accepted
      frame("w", 0, rows(2, 1, 0, 1), 2),                           // width
      frame("v", 0, x1, E, {nCtx: 1 << 30}),                        // a KV cache that does not fit (native: its budget)
    ];
    for (const [i, c] of cases.entries()) {
      const [a, b] = await both(c, decodeFrame(c).sid);
      assert.equal(a.status, b.status, `case ${i}: fat ${a.status} ${a.error} vs Worker ${b.status} ${b.error}`);
      if (i !== cases.length - 1) assert.equal(a.error, b.error, `case ${i}`);
      else assert.match(a.error, /^station st1: n_ctx 1073741824: .*KV cache/);
    }
    // every fuzzer input: the same status, and the same message for every refusal
    let refused = 0;
    for (const b of frameInputs({seed: 11, count: 300})) {
      const sid = "fz";
      const [a, w] = await both(b, sid);
      assert.equal(a.status, w.status, `input ${Buffer.from(b).toString("hex").slice(0, 80)}: fat ${a.error} vs Worker ${w.error}`);
      if (w.status !== 200) { assert.equal(a.error, w.error); refused++; }
    }
    assert.ok(refused > 100, `${refused} of 300 refused`);
    // the station still serves
    const ok = await post(st.url, frame("w", 12, x1, E), "w");
    assert.equal(ok.status, 200, ok.error);
  } finally {
    st.proc.kill("SIGTERM");
    await st.exited;
    await srv.close();
    await mesh.close();
  }
});

test("frames over a WebSocket: answers by request id, errors as text; a killed station closes the link", async (t) => {
  const bytes = await sharedKnot(t, MODEL);
  if (!bytes || !needBin(t)) return;
  const srv = await rangeServer(bytes);
  const st = await startStation([srv.url, "--layers", "0..5"]);
  try {
    const E = (await health(st.url)).config.n_embd;
    assert.equal((await health(st.url)).role, "exit", "B = n_layer: the exit by default");
    const ws = new WebSocket(`${st.url.replace("http", "ws")}/link?sid=k`);
    ws.binaryType = "nodebuffer";
    await new Promise((ok, fail) => { ws.on("open", ok); ws.on("error", fail); });
    const answers = [];
    let closed = null;
    ws.on("message", (d, isBinary) => answers.push(isBinary ? decodeFrame(new Uint8Array(d)) : JSON.parse(d.toString())));
    const closing = new Promise((ok) => ws.on("close", (code) => { closed = code; ok(); }));
    const until = async (n) => { while (answers.length < n) await new Promise((ok) => setTimeout(ok, 5)); };
    ws.send(frame("k", 0, rows(E, 5, 0, 4), E, {reqId: 41, flags: FLAG.normLast}));
    ws.send(frame("k", 9, rows(E, 5, 9, 1), E, {reqId: 42}));   // lost: 409 as text
    ws.send(frame("k", 4, rows(E, 5, 4, 2), E, {reqId: 43, flags: FLAG.normAll}));
    await until(3);
    assert.equal(answers[0].reqId, 41);
    assert.equal(answers[0].rows, 1, "normLast: one row");
    assert.deepEqual(answers[1], {reqId: 42, status: 409, error: "station fat0-5: session k lost: it holds 4 positions, the frame starts at 9; re-prefill"});
    assert.equal(answers[2].reqId, 43);
    assert.equal(answers[2].rows, 2, "normAll: every row");
    // kill -9 mid-session: the client's socket closes abnormally, new connections are refused
    st.proc.kill("SIGKILL");
    await closing;
    assert.equal(closed, 1006, "abnormal closure");
    await assert.rejects(fetch(`${st.url}/health`), /fetch failed/);
  } finally {
    st.proc.kill("SIGKILL");
    await st.exited;
    await srv.close();
  }
});

test("--slice i/n: the attn / ffn partials of a split layer's member, as the Worker member's", async (t) => {
  const bytes = await sharedKnot(t, MODEL);
  if (!bytes || !needBin(t)) return;
  const mesh = await meshFor(bytes, {stations: [1, 2, 2], slices: 2});
  const srv = await rangeServer(bytes);
  const st = await startStation([srv.url, "--layers", "1..3", "--slice", "1/2", "--name", "st1s1"]);
  try {
    const E = mesh.topology.n_embd, m = mesh.topology.stations[1].members[1];
    assert.equal(m.name, "st1s1");
    const hh = await health(st.url);
    assert.deepEqual(hh.heads, m.heads);
    assert.deepEqual(hh.cols, m.cols);
    let worst = 0, frames = 0;
    for (const [pos, n] of STEPS) {
      const x = rows(E, 6, pos, n);
      for (let l = 1; l < 3; l++) for (const phase of ["attn", "ffn"]) {
        const f = frame("p", pos, x, E, {kind: n > 1 || pos === 0 ? "prefill" : "decode", layer: l, phase});
        const a = await post(st.url, f, "p"), b = await postWorker(mesh, "st1s1", f, "p");
        assert.equal(a.status, 200, a.error);
        assert.equal(b.status, 200, b.error);
        for (let i = 0; i < a.frame.data.length; i++) worst = Math.max(worst, Math.abs(a.frame.data[i] - b.frame.data[i]) / (1 + Math.abs(b.frame.data[i])));
        frames++;
      }
    }
    assert.equal(frames, STEPS.length * 4);
    assert.ok(worst < 1e-3, `fat vs Worker member partials: worst relative difference ${worst}`);
    // a later layer's attn at a position the session has not reached: the Worker's 409
    const f = frame("p", 13, rows(E, 6, 13, 1), E, {layer: 2, phase: "attn"});
    const [a, b] = [await post(st.url, f, "p"), await postWorker(mesh, "st1s1", f, "p")];
    assert.equal(a.status, 409);
    assert.deepEqual(a, b);
  } finally {
    st.proc.kill("SIGTERM");
    await st.exited;
    await srv.close();
    await mesh.close();
  }
});

// 8 layers of ~12 MB (Q8_0, hidden 1024): one station's tensors are an eighth of the file
const SYNTH_WIDE = ["--arch", "llama", "--hidden", "1024", "--layers", "8", "--heads", "16", "--kv-heads", "4", "--ffn", "2816",
  "--vocab", "300", "--type", "Q8_0", "--fast", "--seed", "3"];

test("memory stays near the station's tensors: one layer of eight read and held", async (t) => {
  if (!needBin(t)) return;
  const bytes = synthKnot(t, "fat-wide", SYNTH_WIDE);
  if (!bytes) return;
  const srv = await rangeServer(bytes);
  const st = await startStation([srv.url, "--layers", "3..4"]);
  try {
    const E = (await health(st.url)).config.n_embd;
    for (const [pos, n] of STEPS) assert.equal((await post(st.url, frame("m", pos, rows(E, 7, pos, n), E), "m")).status, 200);
    const h = await health(st.url);
    const served = srv.reads.reduce((a, [x, y]) => a + y - x, 0);
    assert.ok(h.memory.tensorBytes > 10e6 && h.memory.tensorBytes < bytes.length / 7, `tensor bytes ${h.memory.tensorBytes} of ${bytes.length}`);
    assert.ok(served < h.memory.tensorBytes + 256 * 1024, `served ${served} for ${h.memory.tensorBytes} tensor bytes`);
    // RSS: its tensors, KV and buffers, plus the process's own few MB; not the file
    assert.ok(h.memory.rss < h.memory.tensorBytes + 32e6, `rss ${h.memory.rss} for ${h.memory.tensorBytes} tensor bytes`);
    assert.ok(h.memory.peakRss >= h.memory.rss && h.memory.peakRss < h.memory.tensorBytes + 48e6, `peak rss ${h.memory.peakRss}`);
    const s = await (await fetch(`${st.url}/stats`)).json();
    assert.deepEqual(s.layers, [3, 4], "/stats: the same report");
  } finally {
    st.proc.kill("SIGTERM");
    await st.exited;
    await srv.close();
  }
});

test("a tensor whose bytes do not match its hash is a 500 naming it; an unreachable model fails the start", async (t) => {
  const bytes = await sharedKnot(t, MODEL);
  if (!bytes || !needBin(t)) return;
  const h = await kw.parseKnotHeader(kw.bytesSource(bytes, "model.knot"));
  const victim = h.tensors.find((x) => x.name === "blk_2_ffn_up_weight");
  const srv = await rangeServer(bytes, {corrupt: victim.offset + 100});
  const st = await startStation([srv.url, "--layers", "1..3"]);
  try {
    const E = h.config.n_embd;
    for (let i = 0; i < 2; i++) {  // the same answer again: nothing half-loaded is kept as good
      const r = await post(st.url, frame("c", 0, rows(E, 8, 0, 2), E), "c");
      assert.equal(r.status, 500);
      assert.match(r.error, /tensor blk_2_ffn_up_weight/);
      assert.match(r.error, /hash/);
    }
    const hh = await health(st.url);
    assert.equal(hh.layersLoaded, 1, "layer 1 loaded, layer 2 refused");
  } finally {
    st.proc.kill("SIGTERM");
    await st.exited;
    await srv.close();
  }
  await assert.rejects(startStation([srv.url, "--layers", "1..3"]), /knot station exited 1: knot: error: http:\/\/127\.0\.0\.1:\d+\/model\.knot: range bytes=0-0: /);
  await assert.rejects(startStation(["/nonexistent/model.knot", "--layers", "1..3"]), /exited 1: knot: error: .*nonexistent/);
  await assert.rejects(startStation(["/nonexistent/model.knot", "--layers", "3..1"]), /exited 2: knot: error: --layers 3..1: B must be greater than A/);
});
