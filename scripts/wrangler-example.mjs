#!/usr/bin/env node
// Writes wrangler.toml (the coordinator) and deploy/*.toml (one script per station member,
// shard and the warden) for a topology: the example is stories260K-pad256 (5 layers, 512
// tokens) on 2 stations + 2 shards. usage: node scripts/wrangler-example.mjs [TOPOLOGY.json]
import {mkdirSync, readFileSync, writeFileSync} from "node:fs";
import {dirname, join, resolve} from "node:path";
import {fileURLToPath} from "node:url";
import {topologyFromCounts, validateTopology} from "../workers/lib/topology.mjs";
import {wranglerConfigs} from "../workers/lib/wrangler.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const example = {n_layer: 5, n_embd: 256, n_head: 32, n_head_kv: 16, head_dim: 8, n_ff: 256, n_vocab: 512};
const t = process.argv[2] ? JSON.parse(readFileSync(process.argv[2], "utf8"))
  : topologyFromCounts(example, {knot: "stories260K-pad256-llama-q4_k_m.knot", stations: [2, 3], shards: 2});
if (!process.argv[2]) validateTopology(example, t);
for (const [path, text] of Object.entries(wranglerConfigs(t))) {
  mkdirSync(dirname(join(root, path)), {recursive: true});
  writeFileSync(join(root, path), text + "\n");
  console.error(`wrote ${path}`);
}
