// record.mjs — records what `knot generate` (native) and `node bin/knotwork.mjs generate`
// (wasm) print for a fixed set of models x sampling settings, into outputs.json.
// Run once from a known-good build; tests/native/infer_golden.cpp and
// tests/wasm/golden.test.mjs then check that today's build produces the same ids and
// text bytes (so a refactor that should not change outputs provably does not).
//
//   node tests/golden/record.mjs [CHECKOUT] > tests/golden/outputs.json
// CHECKOUT (default: this one) is a built checkout whose build/bin/knot and
// bin/knotwork.mjs (with its build/wasm/knotwork.wasm) are run.
import {execFileSync} from "node:child_process";
import {existsSync} from "node:fs";
import {fileURLToPath} from "node:url";
import path from "node:path";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const checkout = path.resolve(process.argv[2] ?? root);
const knot = path.join(checkout, "build/bin/knot");
const models = path.join(root, "../shared/models");

export const MODELS = [
  "stories260K.gguf", "llama-2-tiny-random.gguf", "stories260K-pad256-llama-q8_0.gguf",
  "stories260K-pad256-llama-q6_k.gguf", "stories260K-pad256-llama-q4_k_m.gguf",
  "stories260K-pad256-qwen2-q4_k_m.gguf",
];
// Each: the sampler path it pins down.
export const SETTINGS = [
  {name: "greedy", args: ["--temp", "0"]},
  {name: "reference-greedy", args: ["--temp", "0", "--reference"]},
  {name: "default-sampling", args: ["--seed", "42"]},                                   // top-k 40 -> top-p -> min-p
  {name: "top-p-only", args: ["--temp", "1", "--top-k", "0", "--top-p", "0.9", "--min-p", "0", "--seed", "7"]},
  {name: "min-p-only", args: ["--temp", "1", "--top-k", "0", "--top-p", "1", "--min-p", "0.1", "--seed", "3"]},
  {name: "penalty-stop", args: ["--temp", "0.7", "--repeat-penalty", "1.3", "--seed", "5", "--stop", "ed", "--stop", "in the"]},
  {name: "ignore-eos-ctx", args: ["--temp", "0", "--ignore-eos", "--ctx", "24", "--chunk", "3"]},
];
const PROMPT = "Once upon a time", N = "32";

function run(cmd, args) {
  return execFileSync(cmd, args, {cwd: root, stdio: ["ignore", "pipe", "pipe"], maxBuffer: 1 << 24});
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const out = {prompt: PROMPT, n_predict: Number(N), cases: []};
  for (const model of MODELS) {
    const file = path.join(models, model);
    if (!existsSync(file)) throw new Error(`missing ${file}`);
    for (const s of SETTINGS) {
      const args = ["generate", file, "-p", PROMPT, "-n", N, ...s.args];
      const c = {model, setting: s.name, args: s.args};
      for (const [engine, cmd, pre] of [["native", knot, []], ["wasm", process.execPath, [path.join(checkout, "bin/knotwork.mjs")]]]) {
        const ids = JSON.parse(run(cmd, [...pre, ...args, "--ids"]).toString());
        const text = run(cmd, [...pre, ...args]);  // streamed text + "\n"
        c[engine] = {ids, text_hex: text.subarray(0, text.length - 1).toString("hex")};
      }
      out.cases.push(c);
      process.stderr.write(`${model} ${s.name}: ${c.native.ids.length} ids\n`);
    }
  }
  process.stdout.write(JSON.stringify(out, null, 1) + "\n");
}
