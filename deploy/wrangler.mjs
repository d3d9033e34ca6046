// wrangler.mjs (Node only) — the wrangler rendering of the deployment description
// (deploy/description.mjs): one wrangler.jsonc per Worker script, the coordinator as
// wrangler.jsonc and every other script as knot-<name>.jsonc, rendered by the core
// (core/infer/deployment.cpp, the same files native `knot plan --wrangler` writes). JSON vars
// (TOPOLOGY, STATION, SHARD, FOLLOWERS, TIMEOUTS) are JSON values, so the workers get the same
// objects as under Miniflare (deploy/miniflare.mjs). Only the coordinator is routable: every
// other script has no workers.dev route and no preview URL (service bindings only).
//
//   exampleConfigs(topology)                        -> {path: text} of deploy/example/ (committed;
//                                                     scripts/wrangler-example.mjs writes them)
//   writeWranglerConfigs(topology, outDir, {root, ...options})
//                                                   -> paths written (entry first), `main` absolute
//                                                     into the checkout at root
//   writePlanWranglerConfigs(plan, outDir, {root, knot, planText})
//                                                   -> {topology, paths}: a planner plan's configs +
//                                                     plan.json and topology.json beside them
//   parseWranglerConfig(text)                       -> the object of one such file
// Deployments bind the warden (options.warden defaults to true here).
import {mkdirSync, writeFileSync} from "node:fs";
import {join, resolve} from "node:path";
import {deploymentOf} from "./description.mjs";

export const EXAMPLE_DIR = "deploy/example";

/** A file these functions write, back as an object (its comments are whole lines). */
export const parseWranglerConfig = (text) => JSON.parse(text.replace(/^\s*\/\/.*$/gm, ""));

/** The committed example's files, {path from the checkout: text}; `main` relative to each file. */
export async function exampleConfigs(topology) {
  const up = EXAMPLE_DIR.split("/").map(() => "../").join("");
  const {files} = await deploymentOf({topology, options: {warden: true}, main_prefix: up});
  return Object.fromEntries(files.map(({file, text}) => [`${EXAMPLE_DIR}/${file}`, text]));
}

function write(outDir, files) {
  mkdirSync(outDir, {recursive: true});
  return files.map(({file, text}) => {
    const out = join(outDir, file);
    writeFileSync(out, text);
    return out;
  });
}

const prefixOf = (root) => {
  if (!root) throw new Error("wrangler configs: root (the checkout holding workers/) is required");
  return resolve(root) + "/";
};

export async function writeWranglerConfigs(topology, outDir, {root, warden = true, ...options} = {}) {
  const {files} = await deploymentOf({topology, options: {warden, ...options}, main_prefix: prefixOf(root)});
  return write(outDir, files);
}

export async function writePlanWranglerConfigs(plan, outDir, {root, knot, planText = JSON.stringify(plan, null, 2) + "\n"} = {}) {
  const {topology, files} = await deploymentOf({plan, ...(knot ? {knot} : {}), options: {warden: true}, main_prefix: prefixOf(root)});
  const paths = write(outDir, files);
  writeFileSync(join(outDir, "plan.json"), planText);
  writeFileSync(join(outDir, "topology.json"), JSON.stringify(topology, null, 2) + "\n");
  return {topology, paths};
}
