// The committed wrangler configs (deploy/example/) are what deploy/wrangler.mjs writes for the
// example topology, and `wrangler deploy --dry-run` packs every script (coordinator, stations,
// shards, warden) with the wasm module.
import {test} from "node:test";
import assert from "node:assert/strict";
import {execFile} from "node:child_process";
import {promisify} from "node:util";
import {readFileSync, mkdtempSync} from "node:fs";
import {tmpdir} from "node:os";
import {join} from "node:path";
import {ROOT} from "../wasm/helpers.mjs";
import {topologyFromCounts} from "../../workers/lib/topology.mjs";
import {exampleConfigs, parseWranglerConfig} from "../../deploy/wrangler.mjs";

const run = promisify(execFile);
const EXAMPLE = {n_layer: 5, n_embd: 256, n_head: 32, n_head_kv: 16, head_dim: 8, n_ff: 256, n_vocab: 512};

test("deploy/example/*.jsonc: generated from the example topology, and each packs with wrangler deploy --dry-run", async () => {
  const files = await exampleConfigs(topologyFromCounts(EXAMPLE, {knot: "stories260K-pad256-llama-q4_k_m.knot", stations: [2, 3], shards: 2}));
  assert.deepEqual(Object.keys(files).sort(), ["deploy/example/knot-sh0.jsonc", "deploy/example/knot-sh1.jsonc", "deploy/example/knot-st0.jsonc",
    "deploy/example/knot-st1.jsonc", "deploy/example/knot-warden.jsonc", "deploy/example/wrangler.jsonc"]);
  for (const [path, text] of Object.entries(files))
    assert.equal(readFileSync(join(ROOT, path), "utf8"), text, `${path} is stale: run node scripts/wrangler-example.mjs`);
  // only the entry is routable: stations, shards and the warden have no workers.dev route or
  // preview URL (service bindings only)
  for (const [path, text] of Object.entries(files)) {
    const c = parseWranglerConfig(text);
    assert.equal(c.workers_dev, path === "deploy/example/wrangler.jsonc", path);
    assert.equal(c.preview_urls, false, path);
  }
  const out = mkdtempSync(join(tmpdir(), "knot-wrangler-"));
  for (const path of Object.keys(files)) {
    const r = await run(process.execPath, [join(ROOT, "node_modules/wrangler/bin/wrangler.js"), "deploy", "--dry-run", "-c", path, "--outdir", join(out, path)],
                        {cwd: ROOT, env: {...process.env, WRANGLER_SEND_METRICS: "false", CI: "1"}}).catch((e) => e);
    assert.equal(r instanceof Error ? r.signal ?? r.code : 0, 0, `${path}: ${r.stderr}`);  // a killed child has code null
    assert.match(r.stdout, /Total Upload: [\d.]+ KiB/, path);
    assert.match(r.stdout, /--dry-run: exiting now/);
    assert.doesNotMatch(r.stderr, /Unexpected fields|preview_urls/, `${path}: wrangler does not know a field`);
  }
});
