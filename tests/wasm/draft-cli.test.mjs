// `knot generate --draft SMALL`: speculative decoding with a draft model in the native CLI —
// the same ids as plain greedy decoding, drafted/accepted on stderr, a vocabulary mismatch
// named; `knotwork generate --draft` (the shared option table) refuses it clearly, since the
// wasm session has no draft model yet.
import {test} from "node:test";
import assert from "node:assert/strict";
import {execFile} from "node:child_process";
import {promisify} from "node:util";
import {existsSync, mkdtempSync, rmSync} from "node:fs";
import {tmpdir} from "node:os";
import {join} from "node:path";
import {ROOT, KNOT_BIN} from "./helpers.mjs";

const run = promisify(execFile);
const exec = (cmd, args) => run(cmd, args, {maxBuffer: 1 << 24}).catch((e) => e);
const shared = process.env.KNOT_SHARED_MODELS ?? "/work/shared/models";
const Q8 = join(shared, "stories260K-pad256-llama-q8_0.gguf"), Q4 = join(shared, "stories260K-pad256-llama-q4_k_m.gguf");

test("knot generate --draft: the same greedy ids as plain decoding, speculation on stderr", async (t) => {
  if (!existsSync(Q8) || !existsSync(Q4) || !existsSync(KNOT_BIN)) return t.skip("shared models or build/bin/knot missing");
  const args = [Q8, "-p", "Once upon a time, there was a little girl named Lily. She", "-n", "40", "--temp", "0", "--ignore-eos", "--ids"];
  const plain = await exec(KNOT_BIN, ["generate", ...args]);
  assert.ok(!(plain instanceof Error), plain.stderr);
  for (const n of ["2", "5"]) {
    const spec = await exec(KNOT_BIN, ["generate", ...args, "--draft", Q4, "--draft-n", n]);
    assert.ok(!(spec instanceof Error), spec.stderr);
    assert.equal(spec.stdout, plain.stdout, `--draft-n ${n}`);
    const m = new RegExp(`speculative \\(draft .*q4_k_m\\.gguf, n ${n}\\): (\\d+) drafted, (\\d+) accepted`).exec(spec.stderr);
    assert.ok(m, spec.stderr);
    assert.ok(Number(m[2]) > 0 && Number(m[2]) <= Number(m[1]), spec.stderr);
  }
});

test("knot generate --draft with another vocabulary names both models; knotwork generate --draft is refused", async (t) => {
  if (!existsSync(Q8) || !existsSync(KNOT_BIN)) return t.skip("shared models or build/bin/knot missing");
  const dir = mkdtempSync(join(tmpdir(), "knot-draft-cli-"));
  try {
    const other = join(dir, "other.knot");
    await run(KNOT_BIN, ["synth", "--arch", "llama", "--vocab", "300", other]);
    const r = await exec(KNOT_BIN, ["generate", Q8, "-p", "x", "-n", "2", "--draft", other]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /draft model .*other\.knot and target model .*q8_0\.gguf have different vocabularies: 300 vs 512 tokens/);
    const bad = await exec(KNOT_BIN, ["generate", Q8, "-p", "x", "--draft-n", "0"]);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /--draft-n/);
  } finally { rmSync(dir, {recursive: true}); }
  const node = await exec(process.execPath, [join(ROOT, "bin/knotwork.mjs"), "generate", Q8, "-p", "x", "--draft", Q8]);
  assert.equal(node.code, 2);
  assert.match(node.stderr, /--draft: draft-model speculation runs in the native CLI only/);
});
