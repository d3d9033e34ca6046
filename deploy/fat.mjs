// fat.mjs (Node only) — native fat stations for a local mesh: a Node HTTP server that serves the
// model's .knot bytes by range (and logs every range it served), and `knot station` processes
// (core/net/fat_station.h, docs/protocol.md) reading the model from it, one per topology member
// named by url (workers/lib/topology.mjs). Used by `knotwork mesh --fat`, tests/workers/ and
// bench/fat.mjs.
//
//   const range = await rangeServer(knotBytes);
//   const st = await startFatStation({model: range.url, layers: [1, 3], role: "mid", name: "st1"});
//   ... topology member {name: "st1", url: st.url} ...
//   await st.stop(); await range.close();
import {spawn} from "node:child_process";
import {existsSync} from "node:fs";
import http from "node:http";
import {resolve} from "node:path";
import {ROOT} from "./miniflare.mjs";

/** The native binary: $KNOT_BIN, else build/bin/knot of the checkout. */
export const KNOT_BIN = process.env.KNOT_BIN || resolve(ROOT, "build/bin/knot");

/**
 * Serve `bytes` at http://127.0.0.1:PORT/model.knot by Range (bytes=A-B only; anything else
 * is a 416). reads: every [a, b) served, in order.
 */
export async function rangeServer(bytes) {
  const reads = [];
  const srv = http.createServer((req, res) => {
    const m = /^bytes=(\d+)-(\d+)$/.exec(req.headers.range ?? "");
    if (!m || +m[1] >= bytes.length) { res.writeHead(416); res.end(); return; }
    const a = +m[1], b = Math.min(+m[2], bytes.length - 1);
    reads.push([a, b + 1]);
    res.writeHead(206, {"content-range": `bytes ${a}-${b}/${bytes.length}`, "content-length": b - a + 1});
    res.end(bytes.subarray(a, b + 1));
  });
  await new Promise((ok) => srv.listen(0, "127.0.0.1", ok));
  return {url: `http://127.0.0.1:${srv.address().port}/model.knot`, reads,
          close: () => new Promise((ok) => { srv.closeAllConnections?.(); srv.close(ok); })};
}

/**
 * Spawn `knot station MODEL --layers A..B --role ROLE --name NAME --port 0 [...extra]`; resolves
 * once it prints its URL: {url, proc, exited (a promise of {code, signal}), stderr(), stop()}
 * (stop: SIGTERM, then the exit). A station that exits first rejects with its stderr.
 */
export function startFatStation({model, layers, role, name, extra = [], bin = KNOT_BIN}) {
  if (!existsSync(bin)) throw new Error(`fat station ${name}: ${bin} missing (bash scripts/build.sh builds it)`);
  const args = ["station", model, "--layers", `${layers[0]}..${layers[1]}`, ...(role ? ["--role", role] : []),
                ...(name ? ["--name", name] : []), "--port", "0", ...extra];
  const proc = spawn(bin, args, {stdio: ["ignore", "pipe", "pipe"]});
  let out = "", err = "";
  proc.stderr.on("data", (d) => { err += d; });
  const exited = new Promise((ok) => proc.on("exit", (code, signal) => ok({code, signal})));
  return new Promise((ok, fail) => {
    proc.stdout.on("data", (d) => {
      out += d;
      const m = /knot station listening on (http:\/\/[^\s]+)\n/.exec(out);
      if (m) ok({url: m[1], proc, exited, stderr: () => err,
                 stop: async () => { if (proc.exitCode === null && proc.signalCode === null) proc.kill("SIGTERM"); return exited; }});
    });
    exited.then(({code, signal}) => fail(new Error(`fat station ${name}: knot station exited (${code ?? signal}): ${err.trim()}`)));
  });
}

/**
 * Start a fat station for every station index in `indices` of topology t (single-member
 * stations), reading the model from range server `range`; with t.replicas R > 1, R processes
 * per station (copy r named replicaName). Returns {urls: {index: url, or [url per copy]}, stations}
 * (urls as withUrls takes them).
 */
export async function startFatStations(t, indices, range) {
  const stations = [], R = t.replicas ?? 1, urls = {};
  try {
    for (const i of indices) {
      const s = t.stations[i];
      if (!s) throw new Error(`--fat ${i}: no station ${i} (the topology has ${t.stations.length})`);
      if (s.members.length !== 1) throw new Error(`--fat ${i}: station ${i} is split into ${s.members.length} members (a fat station runs whole layers)`);
      const copies = [];
      for (let r = 0; r < R; r++) {
        const st = await startFatStation({model: range.url, layers: s.layers, role: s.role, name: r ? `${s.members[0].name}r${r}` : s.members[0].name});
        stations.push(st);
        copies.push(st.url);
      }
      urls[i] = R > 1 ? copies : copies[0];
    }
  } catch (e) {
    await Promise.all(stations.map((x) => x.stop()));
    throw e;
  }
  return {urls, stations};
}
