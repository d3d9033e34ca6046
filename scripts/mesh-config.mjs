#!/usr/bin/env node
// mesh-config.mjs — wrangler configurations for running MODEL.knot as a mesh under
// `wrangler dev`: a topology from the model's header (stations of near-equal layer ranges,
// vocab shards), then its deployment description rendered by deploy/wrangler.mjs: wrangler.jsonc
// (the entry) + one knot-<name>.jsonc per station member, shard and the warden, written flat
// into OUTDIR with absolute paths to the Worker sources. Prints the config paths, entry first,
// one per line (for `wrangler dev -c A -c B ...`).
//   usage: node scripts/mesh-config.mjs MODEL.knot OUTDIR [--stations 2] [--shards 2] [--api-key KEY]
import {basename, dirname, resolve} from "node:path";
import {fileURLToPath} from "node:url";
import {parseKnotHeader} from "../bindings/knotwork.mjs";
import {cuts, topologyFromCounts, validateTopology} from "../workers/lib/topology.mjs";
import {writeWranglerConfigs} from "../deploy/wrangler.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const [file, outDir, ...rest] = process.argv.slice(2);
if (!file || !outDir) { process.stderr.write("usage: node scripts/mesh-config.mjs MODEL.knot OUTDIR [--stations N] [--shards N]\n"); process.exit(2); }
const opt = (name, dflt) => { const i = rest.indexOf(name); return i >= 0 ? rest[i + 1] : dflt; };
const h = await parseKnotHeader(file);
const c = h.config;
const nStations = Math.min(Number(opt("--stations", 2)), c.n_layer);
const layers = cuts(c.n_layer, nStations).slice(1).map((x, i, a) => x - (i ? a[i - 1] : 0));
const t = topologyFromCounts(c, {knot: basename(file), stations: layers, shards: Math.min(Number(opt("--shards", 2)), c.n_vocab)});
validateTopology(c, t);
const paths = await writeWranglerConfigs(t, outDir, {root});
process.stderr.write(`mesh-config: ${t.stations.length} stations (layers ${t.stations.map((s) => `[${s.layers}]`).join(" ")}), ` +
                     `${t.shards.length} vocab shards (${t.shards.map((s) => `[${s.vocab}]`).join(" ")}) for ${basename(file)}\n`);
process.stdout.write(paths.join("\n") + "\n");
