// synth.mjs — the benches' random-weight llama of an 85M-parameter shape (hidden 768,
// 12 layers, 12 heads, 4 KV heads, ffn 2048, vocab 512, Q4_K_M, seed 1), written by the native
// CLI's `knot synth` into a fresh temporary folder. Exits 2 with a message when the CLI is
// not built. The caller removes `dir` when done.
import {execFileSync} from "node:child_process";
import {existsSync, mkdtempSync, readFileSync} from "node:fs";
import {tmpdir} from "node:os";
import {dirname, join, resolve} from "node:path";
import {fileURLToPath} from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");

export function synth85m(prefix, knot = process.env.KNOT_BIN ?? join(root, "build/bin/knot")) {
  if (!existsSync(knot)) { console.error(`${knot} missing: build the native CLI`); process.exit(2); }
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const file = join(dir, "synth85m.knot");
  execFileSync(knot, ["synth", "--arch", "llama", "--hidden", "768", "--layers", "12", "--heads", "12", "--kv-heads", "4",
    "--ffn", "2048", "--vocab", "512", "--type", "Q4_K_M", "--seed", "1", file], {stdio: "pipe"});
  return {dir, file, bytes: new Uint8Array(readFileSync(file)), knot};
}
