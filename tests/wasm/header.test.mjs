// .knot / .gguf header parsing through JS range sources: the probe + second fetch
// protocol, stale-file refusal (docs/knot-format.md), corrupt and truncated files.
import {test, before} from "node:test";
import assert from "node:assert/strict";
import {readFileSync, writeFileSync, existsSync} from "node:fs";
import {execFileSync} from "node:child_process";
import {join} from "node:path";

import * as kw from "../../bindings/knotwork.mjs";
import {sharedModel, tmpDir, serveFiles, KNOT_BIN} from "./helpers.mjs";

const MODEL = "stories260K-pad256-llama-q4_k_m.gguf";
let knotBytes = null;  // the model as .knot, encoded by the wasm core
let gguf = null;

async function fixtures(t) {
  const p = sharedModel(t, MODEL);
  if (!p) return false;
  if (!knotBytes) {
    gguf = readFileSync(p);
    const m = await kw.openModel(kw.bytesSource(gguf, MODEL));
    knotBytes = m.toKnot();
    m.close();
  }
  return true;
}

const u32 = (b, o) => b[o] | (b[o + 1] << 8) | (b[o + 2] << 16) | (b[o + 3] * 2 ** 24);

test("knot header: one read when the probe covers it, two when metaLen says it is longer", async (t) => {
  if (!(await fixtures(t))) return;
  const metaLen = u32(knotBytes, 6);
  const payloadOffset = ((10 + metaLen + 3) & ~3) + 1;
  assert.equal(knotBytes[payloadOffset - 1], 0x40, "codec marker");

  const small = kw.countingSource(kw.bytesSource(knotBytes, "m.knot"));
  const h1 = await kw.parseKnotHeader(small, {probe: 64});
  assert.deepEqual(small.log, [{offset: 0, len: 64}, {offset: 0, len: payloadOffset}]);

  const big = kw.countingSource(kw.bytesSource(knotBytes, "m.knot"));
  const h2 = await kw.parseKnotHeader(big, {probe: payloadOffset + 100});
  assert.equal(big.log.length, 1);
  assert.deepEqual(h1, h2);

  assert.equal(h1.format, "knot");
  assert.equal(h1.meta_len, metaLen);
  assert.equal(h1.payload_offset, payloadOffset);
  const hg = await kw.parseKnotHeader(kw.bytesSource(gguf, MODEL));
  assert.deepEqual(h1.config, hg.config);
  assert.equal(h1.tensors.length, hg.tensors.length);
  const types = Object.fromEntries(hg.tensors.map((x) => [x.name, x.type]));
  for (const x of h1.tensors) {
    assert.equal(x.type, types[x.name], x.name);
    assert.ok(x.offset >= payloadOffset && x.offset + x.size <= knotBytes.length, x.name);
  }
});

test("gguf header: grows the prefix until it parses; same result as one big read", async (t) => {
  if (!(await fixtures(t))) return;
  const src = kw.countingSource(kw.bytesSource(gguf, MODEL));
  const h = await kw.parseKnotHeader(src, {probe: 256});
  assert.ok(src.log.length >= 2 && src.log.length < 16, `${src.log.length} reads`);
  for (let i = 1; i < src.log.length; i++) assert.ok(src.log[i].len > src.log[i - 1].len);
  assert.ok(src.log.every((r) => r.offset === 0));
  const whole = await kw.parseKnotHeader(kw.bytesSource(gguf, MODEL), {probe: gguf.length});
  assert.deepEqual(h, whole);
  assert.equal(h.config.n_embd, 256);
  assert.equal(h.config.n_layer, 5);
});

test("stale .knot (JSON space-padded inside metaLen) is refused, not read one byte off", async (t) => {
  if (!(await fixtures(t))) return;
  // Re-create the historical encoder's layout from a good file: the JSON is padded with
  // spaces INSIDE metaLen so the payload after the marker is 4-aligned, marker, payload.
  const metaLen = u32(knotBytes, 6);
  const payloadOffset = ((10 + metaLen + 3) & ~3) + 1;
  const json = knotBytes.subarray(10, 10 + metaLen);
  let pad = 1;
  while ((10 + metaLen + pad + 1) % 4 !== 0) pad++;
  const staleLen = metaLen + pad;
  const payload = knotBytes.subarray(payloadOffset);
  const stale = new Uint8Array(10 + staleLen + 1 + payload.length);
  stale.set(knotBytes.subarray(0, 6));
  new DataView(stale.buffer).setUint32(6, staleLen, true);
  stale.set(json, 10);
  stale.fill(0x20, 10 + metaLen, 10 + staleLen);
  stale[10 + staleLen] = 0x40;
  stale.set(payload, 10 + staleLen + 1);
  const dir = tmpDir();
  const path = join(dir, "stale.knot");
  writeFileSync(path, stale);

  const src = await kw.fileSource(path);
  try {
    await assert.rejects(kw.parseKnotHeader(src), /stale\.knot: stale \.knot file/);
  } finally { await src.close(); }
  await assert.rejects(kw.openModel(path), /stale \.knot file/);
});

test("a flipped payload byte fails the tensor's content hash, naming the tensor", async (t) => {
  if (!(await fixtures(t))) return;
  const h = await kw.parseKnotHeader(kw.bytesSource(knotBytes, "m.knot"));
  const victim = h.tensors.find((x) => x.name === "blk_2_ffn_up_weight");
  const bad = knotBytes.slice();
  bad[victim.offset + 100] ^= 0x10;
  await assert.rejects(kw.openModel(kw.bytesSource(bad, "bad.knot")),
    /bad\.knot: tensor blk_2_ffn_up_weight at offset \d+: content hash [0-9a-f]{16} != expected [0-9a-f]{16}/);
});

test("truncated and garbage .knot files are errors with messages", async (t) => {
  if (!(await fixtures(t))) return;
  await assert.rejects(kw.parseKnotHeader(kw.bytesSource(knotBytes.subarray(0, knotBytes.length - 1000), "cut.knot")), /cut\.knot: truncated or corrupt: tensor \S+ bytes \[\d+, \d+\) run past the end of the file \(\d+ bytes\)/);
  await assert.rejects(kw.parseKnotHeader(kw.bytesSource(knotBytes.subarray(0, 8), "tiny.knot")), /tiny\.knot: truncated/);
  const junk = knotBytes.slice(0, 4096);
  junk.fill(0x7b, 10, 200);  // '{' garbage in the JSON
  await assert.rejects(kw.parseKnotHeader(kw.bytesSource(junk, "junk.knot")), /junk\.knot/);
});

test("header over HTTP Range requests (urlSource): probe, then one more range", async (t) => {
  if (!(await fixtures(t))) return;
  const dir = tmpDir();
  const path = join(dir, "m.knot");
  writeFileSync(path, knotBytes);
  const server = await serveFiles({"/m.knot": path});
  try {
    const src = await kw.urlSource(`${server.url}/m.knot`);
    assert.equal(src.size, knotBytes.length);
    const h = await kw.parseKnotHeader(src, {probe: 128});
    assert.equal(h.format, "knot");
    const ranges = server.log.map((r) => r.range);
    assert.deepEqual(ranges, ["bytes=0-0", "bytes=0-127", `bytes=0-${h.payload_offset - 1}`]);
  } finally { await server.close(); }
});

test("native `knot convert` output parses and loads in wasm", async (t) => {
  const p = sharedModel(t, MODEL);
  if (!p) return;
  if (!existsSync(KNOT_BIN)) {
    if (process.env.CI) throw new Error(`${KNOT_BIN} missing (CI is set: build native first)`);
    t.skip("native build/bin/knot not built");
    return;
  }
  const out = join(tmpDir(), "native.knot");
  execFileSync(KNOT_BIN, ["convert", p, out], {stdio: "pipe"});
  const h = await kw.parseKnotHeader(out, {probe: 64});
  assert.equal(h.format, "knot");
  const m = await kw.openModel(out);
  assert.equal(m.info.format, "knot");
  assert.equal(m.info.config.n_embd, 256);
  m.close();
});

test("urlSource refuses a server that ignores Range, and a short range answer", async () => {
  const {createServer} = await import("node:http");
  const body = new Uint8Array(1000).fill(1);
  let mode = "ignore";
  const server = createServer((req, res) => {
    if (mode === "ignore") { res.writeHead(200, {"Content-Length": body.length}); res.end(body); return; }
    // claims the range but sends fewer bytes than asked
    const m = /bytes=(\d+)-(\d+)/.exec(req.headers.range);
    const [a, b] = [Number(m[1]), Number(m[2])];
    const n = req.headers.range === "bytes=0-0" ? 1 : Math.max(1, b - a);
    res.writeHead(206, {"Content-Range": `bytes ${a}-${a + n - 1}/${body.length}`, "Content-Length": n});
    res.end(body.subarray(0, n));
  });
  await new Promise((ok) => server.listen(0, "127.0.0.1", ok));
  const url = `http://127.0.0.1:${server.address().port}/m.knot`;
  try {
    await assert.rejects(kw.urlSource(url), /did not answer a Range request \(HTTP 200/);
    mode = "short";
    const src = await kw.urlSource(url);
    await assert.rejects(src.read(10, 100), /returned 99 bytes/);
    await assert.rejects(src.read(990, 100), /outside the source's 1000 bytes/);
  } finally {
    server.closeAllConnections();
    await new Promise((ok) => server.close(ok));
  }
});
