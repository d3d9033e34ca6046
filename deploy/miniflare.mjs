// miniflare.mjs (Node only) — the Miniflare rendering of a deployment description
// (deploy/description.mjs), and a mesh run under workerd through it: one Worker script per
// station member and per vocab shard (each its own isolate, as in production), the coordinator
// entry Worker with its SessionDO, the warden, and local R2 holding the model. Used by
// `knotwork mesh`, tests/workers/ and bench/mesh.mjs. The vars and bindings are the
// description's, exactly those deploy/wrangler.mjs writes (tests/workers/renderings.test.mjs).
//
//   const mesh = await startMesh({knotBytes, topology, testHooks: true});   // + describeDeployment's options
//   draftBytes: the draft model's .knot, put under options.draft.knot
//   processes: true — each station member and shard in its own workerd process (benchmarks of overlap)
//   for await (const ev of mesh.generate({ids, options: {maxTokens: 16, temperature: 0}})) ...
//   await mesh.close();
import {Miniflare} from "miniflare";
import {dirname, resolve} from "node:path";
import {fileURLToPath} from "node:url";
import {describeDeployment} from "./description.mjs";

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");
process.env.CLOUDFLARE_CF_FETCH_ENABLED ??= "false";

/** The Miniflare worker options of one script of a description (sources under root). */
export function miniflareWorker(d, s, root = ROOT) {
  const sqlite = new Set(s.migrations.flatMap((m) => m.new_sqlite_classes ?? []));  // SQLite-backed classes of this script
  return {
    name: s.name, modules: true, modulesRoot: root, scriptPath: resolve(root, s.main),
    modulesRules: [{type: "CompiledWasm", include: ["**/*.wasm"]}],  // wrangler's default rule
    compatibilityDate: d.compatibility_date, compatibilityFlags: d.compatibility_flags,
    bindings: s.vars,
    serviceBindings: Object.fromEntries(s.services.map((x) => [x.binding, x.service])),
    durableObjects: Object.fromEntries(s.durable_objects.map((x) => [x.name, x.script_name ? {className: x.class_name, scriptName: x.script_name}
                                                                      : sqlite.has(x.class_name) ? {className: x.class_name, useSQLite: true}
                                                                      : x.class_name])),
    r2Buckets: Object.fromEntries(s.r2_buckets.map((x) => [x.binding, x.bucket_name])),
    kvNamespaces: Object.fromEntries(s.kv_namespaces.map((x) => [x.binding, x.id])),
  };
}

/** Miniflare worker options for a topology (first: the entry); options as describeDeployment's. */
export async function meshWorkers(topology, options = {}, root = ROOT) {
  const d = await describeDeployment(topology, options);
  return d.scripts.map((s) => miniflareWorker(d, s, root));
}

/** Start a mesh; the model's .knot bytes are put into local R2 under topology.knot. */
export async function startMesh({knotBytes, draftBytes, topology, port, processes = false, ...options}) {
  if (draftBytes && !options.draft?.knot) throw new Error("startMesh: draftBytes needs options.draft {knot, n?} (its key in the bucket)");
  const put = async (m) => {
    const bucket = await m.getR2Bucket("MODELS");
    if (knotBytes) await bucket.put(topology.knot, knotBytes);
    if (draftBytes) await bucket.put(options.draft.knot, draftBytes);
    return bucket;
  };
  let workers = await meshWorkers(topology, options);
  // processes: every station member and shard in its own workerd process (its own Miniflare and
  // local R2; the others reach it as an external HTTP service), as isolates on separate machines
  // compute at the same time; one Miniflare runs every isolate on one thread
  const side = new Map();
  if (processes) {
    const own = new Set([...topology.stations.flatMap((s) => s.members.filter((m) => !m.url).map((m) => m.name)), ...topology.shards.map((s) => s.name)]
      .flatMap((n) => Array.from({length: topology.replicas ?? 1}, (_, r) => `knot-${r ? `${n}r${r}` : n}`)));
    for (const w of workers.filter((x) => own.has(x.name))) {
      const m = new Miniflare({workers: [w], host: "127.0.0.1", port: 0});
      const u = await m.ready;
      await put(m);
      side.set(w.name, {mf: m, url: u});
    }
    workers = workers.filter((x) => !own.has(x.name)).map((x) => ({...x, serviceBindings: Object.fromEntries(
      Object.entries(x.serviceBindings).map(([b, svc]) => [b, side.has(svc) ? {external: {address: side.get(svc).url.host, http: {}}} : svc]))}));
  }
  const mf = new Miniflare({workers, ...(port !== undefined ? {host: "127.0.0.1", port} : {})});
  const url = await mf.ready;
  const bucket = await put(mf);
  const worker = async (name) => side.has(name) ? {fetch: (u, init) => fetch(new URL(new URL(u).pathname, side.get(name).url), init)} : mf.getWorker(name);
  return {
    mf, topology, bucket, worker, url,
    /** NDJSON events of POST /v1/mesh/generate, parsed. */
    async *generate(body) {
      const res = await mf.dispatchFetch("http://mesh/v1/mesh/generate", {method: "POST", body: JSON.stringify(body)});
      if (!res.ok) throw new Error(`mesh: HTTP ${res.status}: ${await res.text()}`);
      let buf = "";
      const dec = new TextDecoder();
      for await (const chunk of res.body) {
        buf += dec.decode(chunk, {stream: true});
        let nl;
        while ((nl = buf.indexOf("\n")) >= 0) {
          const line = buf.slice(0, nl);
          buf = buf.slice(nl + 1);
          if (line) yield JSON.parse(line);
        }
      }
    },
    /** Collect a generation: {summary, events, tokens, error}. */
    async run(body) {
      const events = [];
      for await (const e of this.generate(body)) events.push(e);
      return {events, summary: events.find((e) => e.type === "summary"), error: events.find((e) => e.type === "error"),
              telemetry: events.filter((e) => e.type === "telemetry"), tokens: events.filter((e) => e.type === "token")};
    },
    /** /stats of every isolate: coordinator, each station member, each shard (every replica; a URL member: its /health). */
    async stats() {
      const out = {coordinator: await (await mf.dispatchFetch("http://mesh/v1/mesh/stats")).json().then((j) => j.coordinator)};
      const names = [...topology.stations.flatMap((s) => s.members.filter((m) => !m.url).map((m) => m.name)), ...topology.shards.map((s) => s.name)]
        .flatMap((n) => Array.from({length: topology.replicas ?? 1}, (_, r) => (r ? `${n}r${r}` : n)));  // topology.mjs replicaName
      for (const n of names) out[n] = await (await (await worker(`knot-${n}`)).fetch("http://x/stats")).json();
      for (const m of topology.stations.flatMap((s) => s.members.filter((x) => x.url)))  // native fat stations (a list: one per copy)
        for (const [r, u] of (Array.isArray(m.url) ? m.url : [m.url]).entries())
          out[r ? `${m.name}r${r}` : m.name] = await fetch(new URL("/health", u)).then((r) => r.json()).catch((e) => ({error: e.message}));
      return out;
    },
    /** POST a fault ({status} | {hangMs} | null) to one worker's test hook. */
    async fault(name, f) {
      const w = await worker(`knot-${name}`);
      const r = await w.fetch("http://x/debug/fault", {method: "POST", body: JSON.stringify(f)});
      if (!r.ok) throw new Error(`fault ${name}: HTTP ${r.status}`);
    },
    close: async () => { await mf.dispose(); for (const x of side.values()) await x.mf.dispose(); },
  };
}
