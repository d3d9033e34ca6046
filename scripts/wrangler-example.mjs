#!/usr/bin/env node
// Writes the example deployment, deploy/example/: wrangler.jsonc (the coordinator) and
// knot-<name>.jsonc (one script per station member, shard and the warden), rendered by
// deploy/wrangler.mjs from a topology. The example is stories260K-pad256 (5 layers, 512 tokens)
// on 2 stations + 2 shards. usage: node scripts/wrangler-example.mjs [TOPOLOGY.json]
import {mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync} from "node:fs";
import {dirname, join, resolve} from "node:path";
import {fileURLToPath} from "node:url";
import {topologyFromCounts, validateTopology} from "../workers/lib/topology.mjs";
import {EXAMPLE_DIR, exampleConfigs} from "../deploy/wrangler.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const example = {n_layer: 5, n_embd: 256, n_head: 32, n_head_kv: 16, head_dim: 8, n_ff: 256, n_vocab: 512};
const t = process.argv[2] ? JSON.parse(readFileSync(process.argv[2], "utf8"))
  : topologyFromCounts(example, {knot: "stories260K-pad256-llama-q4_k_m.knot", stations: [2, 3], shards: 2});
if (!process.argv[2]) validateTopology(example, t);
const dir = join(root, EXAMPLE_DIR);
mkdirSync(dir, {recursive: true});
for (const f of readdirSync(dir)) if (f.endsWith(".jsonc")) rmSync(join(dir, f));  // scripts of an earlier topology
for (const [path, text] of Object.entries(await exampleConfigs(t))) {
  writeFileSync(join(root, path), text);
  console.error(`wrote ${path}`);
}
