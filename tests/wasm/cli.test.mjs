// bin/knotwork.mjs: same flags and same stdout as the native `knot generate`.
import {test} from "node:test";
import assert from "node:assert/strict";
import {copyFileSync, existsSync, readFileSync, symlinkSync, writeFileSync} from "node:fs";
import {spawn, spawnSync} from "node:child_process";
import {join} from "node:path";

import {ROOT, KNOT_BIN, sharedModel, referenceOutputs, tmpDir} from "./helpers.mjs";

const CLI = join(ROOT, "bin/knotwork.mjs");
const run = (args) => spawnSync(process.execPath, [CLI, ...args], {encoding: "utf8", timeout: 60_000});

test("generate --ids prints exactly one JSON line of the reference ids; timing on stderr", (t) => {
  const p = sharedModel(t, "stories260K-pad256-llama-q6_k.gguf");
  if (!p) return;
  const r = run(["generate", p, "-p", referenceOutputs().prompt, "-n", "32", "--temp", "0", "--ids"]);
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stdout, JSON.stringify(referenceOutputs().models["stories260K-pad256-llama-q6_k.gguf"].exactFloat64.tokenIds) + "\n");
  assert.match(r.stderr, /prefill 5 tokens .* tok\/s/);
  assert.match(r.stderr, /decode 31 tokens .* tok\/s/);
});

test("generate streams the text", (t) => {
  const name = "stories260K.gguf";
  const p = sharedModel(t, name);
  if (!p) return;
  const r = run(["generate", p, "-p", referenceOutputs().prompt, "-n", "32", "--temp", "0"]);
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stdout, referenceOutputs().models[name].llamaCppNative.text + "\n");
});

test("bad flags and missing files are errors with exit codes", () => {
  let r = run(["generate", "/nonexistent/model.gguf", "-p", "x"]);
  assert.equal(r.status, 1);
  assert.match(r.stderr, /knotwork: error: .*model\.gguf/);
  r = run(["generate", "m.gguf", "-p", "x", "--temp", "warm"]);
  assert.equal(r.status, 2);
  assert.match(r.stderr, /--temp: 'warm' is not a number/);
  r = run(["generate", "m.gguf", "-p", "x", "--bogus"]);
  assert.equal(r.status, 2);
  r = run(["frobnicate"]);
  assert.equal(r.status, 2);
});

test("same stdout as native `knot generate` (greedy, sampled with seed, stop string, reference mode)", (t) => {
  const p = sharedModel(t, "stories260K-pad256-qwen2-q4_k_m.gguf");
  if (!p) return;
  if (!existsSync(KNOT_BIN)) {
    if (process.env.CI) throw new Error(`${KNOT_BIN} missing (CI is set: the native build must run first)`);
    t.skip("native build/bin/knot not built");
    return;
  }
  const knot = join(tmpDir(), "m.knot");
  const conv = spawnSync(KNOT_BIN, ["convert", p, knot], {encoding: "utf8"});
  assert.equal(conv.status, 0, conv.stderr);
  const cases = [
    ["-n", "16", "--temp", "0", "--ids"],
    ["-n", "24", "--temp", "0.8", "--seed", "7", "--top-k", "20", "--top-p", "0.9", "--ids"],
    ["-n", "24", "--temp", "1.1", "--seed", "3", "--min-p", "0.02", "--repeat-penalty", "1.1"],
    ["-n", "32", "--temp", "0", "--stop", "Lily"],
    ["-n", "32", "--temp", "0", "--reference", "--ids"],
  ];
  for (const model of [p, knot]) {
    for (const c of cases) {
      const args = ["generate", model, "-p", "Once upon a time", ...c];
      const nat = spawnSync(KNOT_BIN, args, {encoding: "utf8", timeout: 60_000});
      const js = run(args);
      assert.equal(nat.status, 0, nat.stderr);
      assert.equal(js.status, 0, js.stderr);
      assert.equal(js.stdout, nat.stdout, `${args.join(" ")}\nnative: ${nat.stdout}\nwasm:   ${js.stdout}`);
    }
  }
});

const haveNative = (t) => {
  if (existsSync(KNOT_BIN)) return true;
  if (process.env.CI) throw new Error(`${KNOT_BIN} missing (CI is set: the native build must run first)`);
  t.diagnostic("native build/bin/knot not built: wasm CLI only");
  return false;
};

// Runs cmd with its stdout pipe closed by the reader before anything is written.
function runClosedStdout(cmd, args) {
  return new Promise((resolve) => {
    const c = spawn(cmd, args, {stdio: ["ignore", "pipe", "pipe"]});
    c.stdout.destroy();
    let stderr = "";
    c.stderr.on("data", (d) => { stderr += d; });
    c.on("close", (status, signal) => resolve({status, signal, stderr}));
  });
}

test("a closed stdout (`| head -c 20`) ends generate quietly with status 0 in both CLIs", async (t) => {
  const p = sharedModel(t, "stories260K.gguf");
  if (!p) return;
  const args = ["generate", p, "-p", "Once upon a time", "-n", "64", "--temp", "0"];
  const runs = [["wasm", await runClosedStdout(process.execPath, [CLI, ...args])]];
  if (haveNative(t)) runs.push(["native", await runClosedStdout(KNOT_BIN, args)]);
  for (const [name, r] of runs) {
    assert.equal(r.signal, null, `${name}: killed by ${r.signal}`);
    assert.equal(r.status, 0, `${name}: ${r.stderr}`);
    assert.doesNotMatch(r.stderr, /EPIPE|error|\n +at /i, name);
  }
});

test("numeric options are range-checked with the same message in both CLIs", (t) => {
  const native = haveNative(t);
  const cases = [
    [["-n", "4294967299"], "-n must be an integer in [0, 1048576], got 4294967299"],
    [["--n-predict", "-1"], "--n-predict must be an integer in [0, 1048576], got -1"],
    [["--ctx", "99999999999"], "--ctx must be an integer in [1, 1048576], got 99999999999"],
    [["--ctx", "0"], "--ctx must be an integer in [1, 1048576], got 0"],
    [["--chunk", "4097"], "--chunk must be an integer in [1, 4096], got 4097"],
    [["--top-k", "-1"], "--top-k must be an integer in [0, 2147483647], got -1"],
    [["--top-k", "2.5"], "option --top-k: '2.5' is not an integer"],
    [["--seed", "9007199254740993"], "--seed must be an integer in [0, 9007199254740991], got 9007199254740993"],
    [["--seed", "-1"], "--seed must be an integer in [0, 9007199254740991], got -1"],
    [["--seed", "1e3"], "option --seed: '1e3' is not an integer"],
    [["--seed", "0x10"], "option --seed: '0x10' is not an integer"],
    [["--temp", "-0.5"], "--temp must be a number >= 0, got -0.5"],
    [["--temp", "Infinity"], "option --temp: 'Infinity' is not a number"],
    [["--temp", "1e999"], "option --temp: '1e999' is not a number"],
    [["--temp", " 1"], "option --temp: ' 1' is not a number"],
    [["--top-p", "0"], "--top-p must be a number in (0, 1], got 0"],
    [["--top-p", "1.01"], "--top-p must be a number in (0, 1], got 1.01"],
    [["--min-p", "2"], "--min-p must be a number in [0, 1], got 2"],
    [["--min-p", "-0.1"], "--min-p must be a number in [0, 1], got -0.1"],
    [["--repeat-penalty", "0"], "--repeat-penalty must be a number > 0, got 0"],
  ];
  for (const [opt, msg] of cases) {
    const args = ["generate", "/nonexistent/m.gguf", "-p", "x", ...opt];
    const js = run(args);
    assert.equal(js.status, 2, `${opt.join(" ")}: ${js.stderr}`);
    assert.equal(js.stderr, `knotwork: error: ${msg}\n`, opt.join(" "));
    if (!native) continue;
    const nat = spawnSync(KNOT_BIN, args, {encoding: "utf8"});
    assert.equal(nat.status, 2, `native ${opt.join(" ")}: ${nat.stderr}`);
    assert.equal(nat.stderr, `knot: error: ${msg}\n`, `native ${opt.join(" ")}`);
  }
  // values at the edges are accepted (the missing file is the error, not the option)
  for (const opt of [["-n", "0"], ["--top-p", "1"], ["--min-p", "0"], ["--temp", "0"], ["--seed", "9007199254740991"],
                     ["--top-k", "0"], ["--ctx", "1048576"], ["--chunk", "4096"], ["--repeat-penalty", ".5"]]) {
    const js = run(["generate", "/nonexistent/m.gguf", "-p", "x", ...opt]);
    assert.equal(js.status, 1, `${opt.join(" ")}: ${js.stderr}`);
    assert.match(js.stderr, /m\.gguf: cannot open/, opt.join(" "));
  }
});

test("--ctx past the trained context warns in both CLIs", (t) => {
  const p = sharedModel(t, "stories260K.gguf");
  if (!p) return;
  const args = ["generate", p, "-p", "Once", "-n", "2", "--temp", "0", "--ctx", "4096", "--ids"];
  const js = run(args);
  assert.equal(js.status, 0, js.stderr);
  assert.match(js.stderr, /knotwork: warning: --ctx 4096 is larger than the model's trained context \(2048\)/);
  if (!haveNative(t)) return;
  const nat = spawnSync(KNOT_BIN, args, {encoding: "utf8"});
  assert.equal(nat.status, 0, nat.stderr);
  assert.match(nat.stderr, /knot: warning: --ctx 4096 is larger than the model's trained context \(2048\)/);
  assert.equal(js.stdout, nat.stdout);
});

test("--prompt-file passes raw bytes (invalid UTF-8 too): same ids in both CLIs", (t) => {
  const dir = tmpDir();
  const file = join(dir, "prompt.bin");
  writeFileSync(file, Buffer.from([0x4f, 0x6e, 0x63, 0x65, 0x20, 0xff, 0xc3, 0x20, 0x75, 0x70, 0x6f, 0x6e, 0x80]));
  for (const name of ["stories260K.gguf", "stories260K-pad256-qwen2-q4_k_m.gguf"]) {
    const p = sharedModel(t, name);
    if (!p) return;
    const args = ["generate", p, "--prompt-file", file, "-n", "8", "--temp", "0", "--ids"];
    const js = run(args);
    assert.equal(js.status, 0, js.stderr);
    assert.match(js.stdout, /^\[\d+(,\d+)*\]\n$/);
    if (!haveNative(t)) continue;
    const nat = spawnSync(KNOT_BIN, args, {encoding: "utf8"});
    assert.equal(nat.status, 0, nat.stderr);
    assert.equal(js.stdout, nat.stdout, name);
    // the same prompt as text through -p gives the same tokens when it is valid UTF-8
    const okArgs = ["generate", p, "-p", "Once upon", "-n", "8", "--temp", "0", "--ids"];
    writeFileSync(file, "Once upon");
    const viaFile = run(["generate", p, "--prompt-file", file, "-n", "8", "--temp", "0", "--ids"]);
    assert.equal(viaFile.stdout, run(okArgs).stdout, name);
    writeFileSync(file, Buffer.from([0x4f, 0x6e, 0x63, 0x65, 0x20, 0xff, 0xc3, 0x20, 0x75, 0x70, 0x6f, 0x6e, 0x80]));
  }
  const r = run(["generate", "m.gguf", "--prompt-file", join(dir, "nope.txt")]);
  assert.equal(r.status, 1);
  assert.equal(r.stderr, `knotwork: error: ${join(dir, "nope.txt")}: cannot open: No such file or directory\n`);
});

test("missing file, directory and unknown command: one-line errors, no stack trace", () => {
  const dir = tmpDir();
  let r = run(["generate", "/nonexistent/model.gguf", "-p", "x"]);
  assert.equal(r.status, 1);
  assert.equal(r.stderr, "knotwork: error: /nonexistent/model.gguf: cannot open: No such file or directory\n");
  r = run(["inspect", dir]);
  assert.equal(r.status, 1);
  assert.equal(r.stderr, `knotwork: error: ${dir}: is a directory\n`);
  r = run(["generate", dir, "-p", "x"]);
  assert.equal(r.stderr, `knotwork: error: ${dir}: is a directory\n`);
  r = run(["generate", "m.gguf", "--prompt-file", dir]);
  assert.equal(r.stderr, `knotwork: error: ${dir}: is a directory\n`);
  r = run(["generate", "m.gguf", "--prompt-file", dir]);
  assert.equal(r.stderr, `knotwork: error: ${dir}: is a directory\n`);
  r = run(["frobnicate"]);
  assert.equal(r.status, 2);
  assert.match(r.stderr, /^knotwork: error: unknown command 'frobnicate'\nusage: knotwork <command>/);
});

test("missing and directory paths: the same message from both CLIs", (t) => {
  if (!haveNative(t)) return;
  const dir = tmpDir();
  const p = join(dir, "prompt.txt");
  writeFileSync(p, "Once");
  for (const args of [["inspect", dir], ["generate", dir, "-p", "x"], ["generate", join(dir, "nope.gguf"), "-p", "x"],
                      ["inspect", join(dir, "nope.knot")], ["generate", "m.gguf", "--prompt-file", dir]]) {
    const js = run(args), nat = spawnSync(KNOT_BIN, args, {encoding: "utf8"});
    assert.equal(nat.status, 1, nat.stderr);
    assert.equal(js.status, 1, js.stderr);
    assert.equal(js.stderr.replace(/^knotwork: /, ""), nat.stderr.replace(/^knot: /, ""), args.join(" "));
  }
});

test("inspect prints floats the way the native CLI does (%g)", (t) => {
  const p = sharedModel(t, "stories260K-pad256-llama-q4_k_m.gguf");
  if (!p) return;
  const js = run(["inspect", p]);
  assert.equal(js.status, 0, js.stderr);
  const eps = /eps (\S+),/.exec(js.stdout)?.[1], theta = /theta (\S+) /.exec(js.stdout)?.[1];
  assert.ok(eps && theta, js.stdout);
  assert.match(eps, /^\d(\.\d+)?e-\d\d$/, "printf %g form, e.g. 2.5e-06");
  if (!haveNative(t)) return;
  const nat = spawnSync(KNOT_BIN, ["inspect", p, "--no-hash"], {encoding: "utf8"});
  assert.equal(nat.status, 0, nat.stderr);
  assert.equal(eps, /\n  rms_eps +(\S+)\n/.exec(nat.stdout)[1]);
  assert.equal(theta, /theta (\S+)\n/.exec(nat.stdout)[1]);
});

test("convert refuses to overwrite its input, a non-.knot output and a .knot input", (t) => {
  const p = sharedModel(t, "stories260K.gguf");
  if (!p) return;
  const dir = tmpDir();
  const inp = join(dir, "s.gguf");
  copyFileSync(p, inp);
  const before = readFileSync(inp);
  let r = run(["convert", inp, inp]);
  assert.equal(r.status, 1);
  assert.equal(r.stderr, `knotwork: error: ${inp}: the output name must end in .knot (refusing to write a .knot file under another extension)\n`);
  symlinkSync(inp, join(dir, "link.knot"));
  r = run(["convert", inp, join(dir, "link.knot")]);
  assert.equal(r.status, 1);
  assert.match(r.stderr, /link\.knot: is the input file .*s\.gguf; refusing to overwrite the source/);
  assert.ok(readFileSync(inp).equals(before), "the source was overwritten");
  r = run(["convert", inp, join(dir, "s.knot")]);
  assert.equal(r.status, 0, r.stderr);
  r = run(["convert", join(dir, "s.knot"), join(dir, "t.knot")]);
  assert.equal(r.status, 1);
  assert.match(r.stderr, /s\.knot: already a \.knot file/);
});

test("usage errors exit with status 2 and the same message in both CLIs (one option spec)", (t) => {
  const native = haveNative(t);
  const cases = [
    [["generate", "m.gguf"], "no prompt: pass -p TEXT or --prompt-file FILE"],
    [["generate", "m.gguf", "-p", "x", "--prompt-file", "f"], "give the prompt once (-p or --prompt-file)"],
    [["generate", "m.gguf", "n.gguf", "-p", "x"], "unexpected argument 'n.gguf'"],
    [["generate", "m.gguf", "-p", "x", "--seed"], "option --seed needs a value"],
    [["generate", "m.gguf", "-p", "x", "--kv-budget", "0"], "--kv-budget must be an integer in [1, 9007199254740991], got 0"],
    [["generate", "m.gguf", "-p", "x", "--bogus"], "unknown option --bogus (see PROG generate --help)"],
  ];
  // the node CLI's `serve` reads the same table
  for (const [args, msg] of [[["serve", "m.gguf", "--port", "70000"], "--port must be an integer in [0, 65535], got 70000"],
                             [["serve", "m.gguf", "--api-key", ""], "--api-key must not be empty"],
                             [["serve", "m.gguf", "--ctx", "0"], "--ctx must be an integer in [1, 1048576], got 0"]]) {
    const js = run(args);
    assert.equal(js.status, 2, `${args.join(" ")}: ${js.stderr}`);
    assert.equal(js.stderr, `knotwork: error: ${msg}\n`);
  }
  for (const [args, msg] of cases) {
    const js = run(args);
    assert.equal(js.status, 2, `${args.join(" ")}: ${js.stderr}`);
    assert.equal(js.stderr, `knotwork: error: ${msg.replace("PROG", "knotwork")}\n`);
    if (!native) continue;
    const nat = spawnSync(KNOT_BIN, args, {encoding: "utf8"});
    assert.equal(nat.status, 2, `native ${args.join(" ")}: ${nat.stderr}`);
    assert.equal(nat.stderr, `knot: error: ${msg.replace("PROG", "knot")}\n`);
  }
  // commands and their arguments: status 2 in both, whatever the wording
  for (const args of [[], ["frobnicate"], ["generate"], ["inspect"], ["inspect", "a", "b"], ["convert", "a.gguf"],
                      ["inspect", "m.gguf", "--bogus"]]) {
    const js = run(args);
    assert.equal(js.status, 2, `wasm ${args.join(" ")}: ${js.stderr}`);
    if (!native) continue;
    const nat = spawnSync(KNOT_BIN, args, {encoding: "utf8"});
    assert.equal(nat.status, 2, `native ${args.join(" ")}: ${nat.stderr}`);
  }
  if (native) {
    for (const args of [["synth", "--hidden", "x", "o.gguf"], ["synth", "--layers", "0", "o.gguf"], ["verify"]]) {
      const nat = spawnSync(KNOT_BIN, args, {encoding: "utf8"});
      assert.equal(nat.status, 2, `native ${args.join(" ")}: ${nat.stderr}`);
    }
  }
});

test("generate --help: one usage text from the core's option table in both CLIs", (t) => {
  const js = run(["generate", "--help"]);
  assert.equal(js.status, 0, js.stderr);
  assert.match(js.stdout, /^usage: knotwork generate MODEL /);
  for (const flag of ["--n-predict", "--temp", "--top-k", "--top-p", "--min-p", "--repeat-penalty", "--seed", "--ctx",
                      "--chunk", "--kv-budget", "--stop", "--ignore-eos", "--reference", "--ids", "--prompt-file"])
    assert.ok(js.stdout.includes(flag), flag);
  if (!haveNative(t)) return;
  const nat = spawnSync(KNOT_BIN, ["generate", "--help"], {encoding: "utf8"});
  assert.equal(nat.status, 0, nat.stderr);
  assert.equal(js.stdout, nat.stdout.replace("usage: knot generate", "usage: knotwork generate"));
});

test("mesh and plan read the same option table: generate's sampling flags plus its topology flags, usage errors exit 2", () => {
  for (const [args, msg] of [
    [["mesh", "m.gguf", "-p", "x", "--shards", "0"], "--shards must be an integer in [1, 1048576], got 0"],
    [["mesh", "m.gguf", "-p", "x", "--slices", "2000"], "--slices must be an integer in [1, 1024], got 2000"],
    [["mesh", "m.gguf", "-p", "x", "--stations", "2,x,3"], "option --stations: 'x' is not an integer"],
    [["mesh", "m.gguf", "-p", "x", "--vocab", "0,-1"], "--vocab must be an integer in [0, 1073741824], got -1"],
    [["mesh", "m.gguf", "-p", "x", "--link", "tcp"], "--link must be one of ws/http, got 'tcp'"],
    [["mesh", "m.gguf", "-p", "x", "--top-p", "0"], "--top-p must be a number in (0, 1], got 0"],
    [["mesh", "m.gguf", "-p", "x", "--kv-budget", "9"], "unknown option --kv-budget (see knotwork mesh --help)"],
    [["mesh", "m.gguf", "-p", "x", "--plan", "p.json", "--shards", "2"], "give --plan or --stations/--shards/--slices, not both"],
    [["mesh", "m.gguf", "--stations", "2,2"], "no prompt: pass -p TEXT or --prompt-file FILE"],
    // `plan` reads the table too
    [["plan", "m.gguf", "--context", "1e3"], "option --context: '1e3' is not an integer"],
    [["plan", "m.gguf", "--mode", "solid"], "--mode must be one of resident/fluid, got 'solid'"],
  ]) {
    const r = run(args);
    assert.equal(r.status, 2, `${args.join(" ")}: ${r.stderr}`);
    assert.equal(r.stderr, `knotwork: error: ${msg}\n`, args.join(" "));
  }
  const h = run(["mesh", "--help"]);
  assert.equal(h.status, 0, h.stderr);
  assert.match(h.stdout, /^usage: knotwork mesh MODEL /);
  assert.match(h.stdout, /Runs MODEL on a mesh of Workers/);
  const gen = run(["generate", "--help"]).stdout;
  // every sampling row of generate appears in mesh's usage, word for word
  for (const flag of ["--n-predict", "--temp", "--top-k", "--top-p", "--min-p", "--repeat-penalty", "--seed", "--ctx",
                      "--chunk", "--stop", "--ignore-eos", "--grammar", "--json-schema", "--ids", "--prompt-file"]) {
    // the option's row: "  [-x, ]--flag ARG   description"
    // (words compared, not the padding: each command aligns its column to its own longest flag)
    const rowOf = (usage) => usage.split("\n").find((l) => /^ {2}(-\w, )?--/.test(l) && l.trim().split(/\s+/).includes(flag))?.trim().replace(/\s+/g, " ");
    const row = rowOf(gen);
    assert.ok(row, `${flag} in generate's usage`);
    assert.equal(rowOf(h.stdout), row, `${flag}: the whole row, not its first 20 characters`);
  }
  for (const flag of ["--plan FILE", "--stations L,L,...", "--shards N", "--vocab C,C,...", "--slices N", "--fluid", "--link ws|http"])
    assert.ok(h.stdout.includes(flag), flag);
  assert.equal(run(["mesh"]).status, 2);
});

test("--kv-budget: the same refusal in both CLIs, naming both numbers; a budget that fits changes nothing", (t) => {
  const p = sharedModel(t, "stories260K.gguf");
  if (!p) return;
  const args = ["generate", p, "-p", "Once", "-n", "2", "--ctx", "64", "--kv-budget", "1000"];
  const js = run(args);
  assert.equal(js.status, 1, js.stderr);
  assert.match(js.stderr, /^knotwork: error: KV cache needs \d+ bytes \(64 positions x \d+ bytes\/token, .*\) but the KV budget is 1000 bytes\n$/);
  if (!haveNative(t)) return;
  const nat = spawnSync(KNOT_BIN, args, {encoding: "utf8"});
  assert.equal(nat.status, 1, nat.stderr);
  assert.equal(js.stderr.replace(/^knotwork: /, ""), nat.stderr.replace(/^knot: /, ""));
  const ok = ["generate", p, "-p", "Once", "-n", "8", "--temp", "0", "--ctx", "64", "--kv-budget", "1000000", "--ids"];
  const a = run(ok), b = spawnSync(KNOT_BIN, ok, {encoding: "utf8"});
  assert.equal(a.status, 0, a.stderr);
  assert.equal(b.status, 0, b.stderr);
  assert.equal(a.stdout, b.stdout);
  assert.equal(a.stdout, run(ok.slice(0, -3).concat("--ids")).stdout);
});
