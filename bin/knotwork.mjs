#!/usr/bin/env node
// knotwork — the wasm build's CLI, flag- and output-compatible with the native
// `knot generate` (text streamed to stdout, --ids prints one JSON array line, timing
// on stderr).
//   node bin/knotwork.mjs generate MODEL -p TEXT [-n N] [--temp T] [--top-k K] [--top-p P]
//        [--min-p M] [--repeat-penalty R] [--seed S] [--ctx N] [--chunk N] [--stop TEXT]...
//        [--ignore-eos] [--reference] [--ids]
//   node bin/knotwork.mjs inspect MODEL [--json]
//   node bin/knotwork.mjs convert IN.gguf OUT.knot      (types kept; hashes computed)
//   node bin/knotwork.mjs selftest
// MODEL is a .gguf/.knot path or an http(s) URL served with Range support.
import {writeFileSync} from "node:fs";
import * as kw from "../bindings/knotwork.mjs";

const USAGE = `usage: knotwork <command> [args]
  generate MODEL -p TEXT [-n N] [options]   run a model in wasm (see generate --help)
  inspect MODEL [--json]                    header: config and tensor table
  convert IN.gguf OUT.knot                  re-encode as .knot (types kept)
  selftest                                  SIMD-vs-scalar kernel checks in wasm
`;
const GEN_USAGE = `usage: knotwork generate MODEL -p TEXT [-n N] [options]
  MODEL                .gguf or .knot file, or an http(s) URL (Range requests)
  -p, --prompt TEXT    prompt (not echoed)
  -n, --n-predict N    tokens to generate (default 128)
  --temp T             temperature, 0 = greedy (default 0.8)
  --top-k K            (default 40, 0 = off)
  --top-p P            (default 0.95, 1 = off)
  --min-p M            (default 0.05, 0 = off)
  --repeat-penalty R   (default 1.0 = off)
  --seed S             sampler seed (default 0)
  --ctx N              context length (default min(train ctx, 2048))
  --chunk N            prefill chunk size (default 64)
  --stop TEXT          stop string (repeatable)
  --ignore-eos         keep generating past end-of-generation tokens
  --reference          reference mode: dequantized f32 math, f32 KV cache
  --ids                print only a JSON array of the generated ids
`;

class UsageError extends Error {}

function num(flag, v, integer) {
  if (v === undefined) throw new UsageError(`option ${flag} needs a value`);
  const x = Number(v);
  if (v.trim() === "" || !Number.isFinite(x) || (integer && !Number.isInteger(x)))
    throw new UsageError(`option ${flag}: '${v}' is not ${integer ? "an integer" : "a number"}`);
  return x;
}

function source(model) {
  return /^https?:\/\//i.test(model) ? kw.urlSource(model) : kw.fileSource(model);
}

async function generate(args) {
  const o = {stop: []};
  let model = null, prompt = null, idsOnly = false;
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    const val = () => { if (i + 1 >= args.length) throw new UsageError(`option ${a} needs a value`); return args[++i]; };
    switch (a) {
      case "-h": case "--help": process.stdout.write(GEN_USAGE); return 0;
      case "-p": case "--prompt": prompt = val(); break;
      case "-n": case "--n-predict": o.maxTokens = num(a, val(), true); break;
      case "--temp": o.temperature = num(a, val()); break;
      case "--top-k": o.topK = num(a, val(), true); break;
      case "--top-p": o.topP = num(a, val()); break;
      case "--min-p": o.minP = num(a, val()); break;
      case "--repeat-penalty": o.repeatPenalty = num(a, val()); break;
      case "--seed": o.seed = num(a, val(), true); break;
      case "--ctx": o.nCtx = num(a, val(), true); if (o.nCtx <= 0) throw new UsageError("--ctx must be positive"); break;
      case "--chunk": o.chunk = num(a, val(), true); if (o.chunk <= 0) throw new UsageError("--chunk must be positive"); break;
      case "--stop": o.stop.push(val()); break;
      case "--ignore-eos": o.ignoreEos = true; break;
      case "--reference": o.reference = true; break;
      case "--ids": idsOnly = true; break;
      default:
        if (a.startsWith("-") && a !== "-") throw new UsageError(`unknown option ${a} (see knotwork generate --help)`);
        if (model !== null) throw new UsageError(`unexpected argument '${a}'`);
        model = a;
    }
  }
  if (model === null) { process.stderr.write(GEN_USAGE); return 2; }
  if (prompt === null) throw new UsageError("no prompt: pass -p TEXT");
  if (o.maxTokens !== undefined && o.maxTokens < 0) throw new UsageError("-n must not be negative");
  o.maxTokens ??= 128;

  const src = await source(model);
  let m;
  try { m = await kw.openModel(src); } finally { await src.close?.(); }
  let summary;
  for await (const ev of m.generate(prompt, o)) {
    if (ev.type === "summary") summary = ev;
    else if (!idsOnly && ev.text) process.stdout.write(ev.text);
  }
  process.stdout.write(idsOnly ? `[${summary.ids.join(",")}]\n` : "\n");
  const s = summary, mib = (b) => (b / 1048576).toFixed(2);
  process.stderr.write(
    `knotwork: wasm ${s.mode} mode, ctx ${s.nCtx}\n` +
    `knotwork: prefill ${s.nPrompt} tokens in ${(s.prefillMs / 1000).toFixed(3)} s (${s.prefillTokS.toFixed(1)} tok/s)\n` +
    `knotwork: decode ${s.nDecoded} tokens in ${(s.decodeMs / 1000).toFixed(3)} s (${s.decodeTokS.toFixed(1)} tok/s), stop: ${s.reason}\n` +
    `knotwork: peak KV+activation memory ${mib(s.engine.engine_peak_bytes)} MiB, ` +
    `peak wasm linear memory ${mib(s.memory.peakLinear)} MiB\n`);
  m.close();
  return 0;
}

async function inspect(args) {
  const json = args.includes("--json");
  const rest = args.filter((a) => a !== "--json");
  if (rest.length !== 1) throw new UsageError("usage: knotwork inspect MODEL [--json]");
  const src = await source(rest[0]);
  let h;
  try { h = await kw.parseKnotHeader(src); } finally { await src.close?.(); }
  if (json) { process.stdout.write(JSON.stringify(h, null, 1) + "\n"); return 0; }
  const c = h.config;
  const lines = [`${rest[0]}: ${h.format}${h.version !== undefined ? ` v${h.version}` : ""}, ${h.tensors.length} tensors`,
    `  arch ${c.arch}, hidden ${c.n_embd}, layers ${c.n_layer}, heads ${c.n_head}/${c.n_head_kv} kv, head_dim ${c.head_dim}, ffn ${c.n_ff}`,
    `  vocab ${c.n_vocab} (tensor rows ${c.n_vocab_tensor}), rope ${c.rope_style} theta ${c.rope_theta} dims ${c.rope_dims}, eps ${c.rms_eps}, ctx ${c.n_ctx_train}${c.tied_embeddings ? ", tied embeddings" : ""}`];
  for (const t of h.tensors)
    lines.push(`  ${t.name.padEnd(28)} ${t.type.padEnd(5)} [${t.shape.join(", ")}] @${t.offset} ${t.size} B`);
  process.stdout.write(lines.join("\n") + "\n");
  return 0;
}

async function convert(args) {
  if (args.length !== 2) throw new UsageError("usage: knotwork convert IN.gguf OUT.knot");
  const src = await kw.fileSource(args[0]);
  let m;
  try { m = await kw.openModel(src); } finally { await src.close(); }
  const bytes = m.toKnot();
  writeFileSync(args[1], bytes);
  process.stderr.write(`knotwork: wrote ${args[1]} (${bytes.length} bytes, ${m.info.tensors.length} tensors)\n`);
  m.close();
  return 0;
}

async function selftest() {
  const r = await kw.kernelSelftest();
  process.stdout.write(r.report.endsWith("\n") ? r.report : r.report + "\n");
  return r.failures ? 1 : 0;
}

async function main(argv) {
  const [cmd, ...args] = argv;
  try {
    switch (cmd) {
      case "generate": return await generate(args);
      case "inspect": return await inspect(args);
      case "convert": return await convert(args);
      case "selftest": return await selftest();
      case "-h": case "--help": process.stdout.write(USAGE); return 0;
      default: process.stderr.write(USAGE); return 2;
    }
  } catch (e) {
    process.stderr.write(`knotwork: error: ${e.message}\n`);
    return e instanceof UsageError ? 2 : 1;
  }
}

process.exitCode = await main(process.argv.slice(2));
