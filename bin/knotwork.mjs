#!/usr/bin/env node
// knotwork — the wasm build's CLI, flag- and output-compatible with the native
// `knot generate` (text streamed to stdout, --ids prints one JSON array line, timing
// on stderr).
//   node bin/knotwork.mjs generate MODEL (-p TEXT | --prompt-file FILE) [-n N] [options]
//        (options: `generate --help`; the core's option spec, shared with `knot generate`)
//   node bin/knotwork.mjs tokenize MODEL (-p TEXT | --prompt-file FILE) [--ids] [--no-bos] [--no-special]
//   node bin/knotwork.mjs inspect MODEL [--json]
//   node bin/knotwork.mjs convert IN.gguf OUT.knot      (types kept; hashes computed)
//   node bin/knotwork.mjs serve MODEL [--port N] [--host H] [--api-key KEY] [--ctx N] [--name ID] [--parallel N]
//   node bin/knotwork.mjs selftest
// MODEL is a .gguf/.knot path or an http(s) URL served with Range support.
import {closeSync, openSync, readFileSync, readSync, statSync, writeFileSync} from "node:fs";
import * as kw from "../bindings/knotwork.mjs";
import {MAX_THREADS} from "../bindings/threads.mjs";
import {writePlanWranglerConfigs} from "../deploy/wrangler.mjs";

const USAGE = `usage: knotwork <command> [args]
  generate MODEL (-p TEXT | --prompt-file FILE) [-n N] [--threads N] [options]
                                            run a model in wasm (see generate --help;
                                            --threads N: the threaded module, N threads)
  tokenize MODEL (-p TEXT | --prompt-file FILE) [--ids] [--no-bos] [--no-special]
                                            token ids and pieces (see tokenize --help)
  inspect MODEL [--json]                    header: config and tensor table
  convert IN.gguf OUT.knot                  re-encode as .knot (types kept)
  serve MODEL [--port N] [--api-key KEY]    OpenAI-compatible API + chat page (see serve --help)
  mesh MODEL [--stations ..] -p TEXT        run MODEL on a mesh of Workers under workerd
  upload MODEL.knot [--remote]              put a model into the mesh's R2 bucket (local or real)
  plan MODEL [--budget 128MB] [--wrangler DIR]
                                            mesh plan (same JSON as knot plan; see plan --help)
  wrangler PLAN.json DIR [--knot NAME]      Worker configurations of a plan, one per isolate
  selftest                                  SIMD-vs-scalar kernel checks in wasm
`;
const TOK_USAGE = `usage: knotwork tokenize MODEL (-p TEXT | --prompt-file FILE) [--ids] [--no-bos] [--no-special]
  -p, --prompt TEXT    text to tokenize
  --prompt-file FILE   text from a file, bytes as they are
  --ids                print only the ids, as [1, 2, 3]
  --no-bos             do not add BOS (added only when the vocab asks for it)
  --no-special         special-token text (<|im_start|>) is plain text
  --special            parse special-token text (the default)
`;

class UsageError extends Error {}

// File errors in the native CLI's words ("<path>: cannot open: No such file or directory").
const ERRNO_TEXT = {ENOENT: "No such file or directory", EISDIR: "Is a directory", EACCES: "Permission denied",
  ENOTDIR: "Not a directory"};
function fileError(path, e) {
  if (e?.code === "EISDIR") return new Error(`${path}: is a directory`);
  if (e?.code in ERRNO_TEXT) return new Error(`${path}: cannot open: ${ERRNO_TEXT[e.code]}`);
  return e;
}

function readPromptFile(path) {
  try { return readFileSync(path); } catch (e) { throw fileError(path, e); }
}

async function source(model) {
  if (/^https?:\/\//i.test(model)) return kw.urlSource(model);
  try {
    if (statSync(model).isDirectory()) throw Object.assign(new Error("directory"), {code: "EISDIR"});
    return await kw.fileSource(model);
  } catch (e) { throw fileError(model, e); }
}

// A command line read by the core's option spec (core/infer/options.h, the one `knot
// generate` uses): the parsed {args, options, cli}, or the exit status after --help (0)
// or a missing MODEL (usage on stderr, 2). A refused line throws (status 2).
async function commandLine(command, args) {
  const cl = await kw.parseCommandLine(command, args, "knotwork");
  if (cl.action === "run") return cl;
  const help = cl.action === "help";
  (help ? process.stdout : process.stderr).write(await kw.commandUsage(command, "knotwork"));
  return help ? 0 : 2;
}

const promptBytes = (cli) => cli.prompt_file !== undefined ? readPromptFile(cli.prompt_file) : Buffer.from(cli.prompt, "utf8");

async function generate(args) {
  const cl = await commandLine("generate", args);
  if (typeof cl === "number") return cl;
  const [model] = cl.args, {options, cli} = cl;
  const prompt = promptBytes(cli);
  const idsOnly = cli.ids === true;
  // --grammar FILE / --json-schema FILE: their text, as the options object takes it
  if (cli.grammar_file !== undefined) options.grammar = readPromptFile(cli.grammar_file).toString("utf8");
  if (cli.json_schema_file !== undefined) options.json_schema = readPromptFile(cli.json_schema_file).toString("utf8");

  const src = await source(model);
  let m;
  try { m = await kw.openModel(src); } finally { await src.close?.(); }
  const trained = m.info.config?.n_ctx_train;
  if (options.n_ctx !== undefined && trained > 0 && options.n_ctx > trained)
    process.stderr.write(`knotwork: warning: --ctx ${options.n_ctx} is larger than the model's trained context (${trained})\n`);
  const ids = m.tokenize(prompt, {parseSpecial: cli.parse_special ?? true});  // --no-special: plain text
  if (ids.length === 0) throw new Error("the prompt encodes to no tokens and the vocab adds no BOS");
  // --draft SMALL [--draft-n K]: speculative decoding with a draft model (same vocabulary)
  let draft = null;
  if (cli.draft !== undefined) {
    const dsrc = await source(cli.draft);
    try { draft = await kw.openModel(dsrc); } finally { await dsrc.close?.(); }
  }
  let summary;
  try {
    for await (const ev of m.generate(ids, {options, ...(draft ? {draft, draftN: cli.draft_n, draftOneHot: cli.draft_one_hot} : {})})) {
      if (ev.type === "summary") summary = ev;
      else if (!idsOnly && ev.text) process.stdout.write(ev.text);
    }
  } finally { draft?.close(); }
  process.stdout.write(idsOnly ? `[${summary.ids.join(",")}]\n` : "\n");
  const s = summary, mib = (b) => (b / 1048576).toFixed(2);
  process.stderr.write(
    `knotwork: wasm ${s.mode} mode, ctx ${s.nCtx}\n` +
    `knotwork: prefill ${s.nPrompt} tokens in ${(s.prefillMs / 1000).toFixed(3)} s (${s.prefillTokS.toFixed(1)} tok/s)\n` +
    `knotwork: decode ${s.nDecoded} tokens in ${(s.decodeMs / 1000).toFixed(3)} s (${s.decodeTokS.toFixed(1)} tok/s), stop: ${s.reason}\n` +
    `knotwork: peak KV+activation memory ${mib(s.engine.engine_peak_bytes)} MiB, ` +
    `peak wasm linear memory ${mib(s.memory.peakLinear)} MiB\n`);
  if (s.speculative) {
    const sp = s.speculative;
    process.stderr.write(`knotwork: speculative (${sp.draft ? `draft ${cli.draft}, n ${sp.draftN}` : `lookup ${sp.lookup}`}): ` +
                         `${sp.drafted} drafted, ${sp.accepted} accepted (${(100 * sp.acceptance).toFixed(0)}%)\n`);
  }
  m.close();
  return 0;
}

async function mesh(args) {
  const cl = await commandLine("mesh", args);
  if (typeof cl === "number") return cl;
  const [model] = cl.args, {options, cli} = cl;
  const prompt = promptBytes(cli), idsOnly = cli.ids === true, linkMode = cli.link;
  const counts = {};
  for (const k of ["stations", "shards", "vocab", "slices"]) if (cli[k] !== undefined) counts[k] = cli[k];
  if (cli.fluid) counts.resident = false;
  if (cli.chain) counts.chain = true;
  const planPath = cli.plan ?? null;
  if (planPath && Object.keys(counts).length) throw new UsageError("give --plan or --stations/--shards/--slices, not both");
  const {startMesh} = await import("../deploy/miniflare.mjs");
  const {topologyFromCounts, topologyFromPlan, validateTopology} = await import("../workers/lib/topology.mjs");
  const {openTextModel} = await import("../workers/lib/text.mjs");
  // a .gguf becomes a temporary .knot (in memory); a .knot goes to R2 as it is
  const src = await source(model);
  let bytes;
  try {
    const head = await src.read(0, 4);
    if (new TextDecoder().decode(head) === "KNOT") bytes = await src.read(0, src.size);
    else {
      const m = await kw.openModel(src);
      bytes = m.toKnot();
      m.close();
    }
  } finally { await src.close?.(); }
  const text = await openTextModel(kw.bytesSource(bytes, model));
  const c = text.info.config;
  // --draft SMALL [--draft-n K]: the coordinator's draft model (the deployment's DRAFT: its .knot
  // in R2 beside the target's); a mismatched vocabulary is refused here, naming both models
  let draftBytes = null, draft = null;
  if (cli.draft !== undefined) {
    const dsrc = await source(cli.draft);
    let dm;
    try { dm = await kw.openModel(dsrc); } finally { await dsrc.close?.(); }
    try {
      const {Drafter} = await import("../bindings/drafter.mjs");
      (await Drafter.open(dm, text, {n: cli.draft_n ?? 4})).free();
      draftBytes = dm.toKnot();
    } catch (e) { text.close(); throw e; } finally { dm.close(); }
    draft = {knot: "draft.knot", n: cli.draft_n ?? 4};
  }
  const given = planPath ? JSON.parse(readFileSync(planPath, "utf8")) : null;
  // a planner plan (stations with ids, slices) or a topology (stations with members)
  const topology = given ? (given.stations?.[0]?.members ? validateTopology(c, {...given, knot: "model.knot"})
                                                         : topologyFromPlan(c, given, {knot: "model.knot"}))
    : topologyFromCounts(c, {knot: "model.knot", ...counts, stations: counts.stations ?? [c.n_layer]});
  topology.knot = "model.knot";
  if (cli.replicas !== undefined) topology.replicas = cli.replicas, validateTopology(c, topology);
  topology.n_embd ??= c.n_embd;
  topology.n_vocab ??= c.n_vocab;
  const trained = c.n_ctx_train;
  if (options.n_ctx !== undefined && trained > 0 && options.n_ctx > trained)
    process.stderr.write(`knotwork: warning: --ctx ${options.n_ctx} is larger than the model's trained context (${trained})\n`);
  const ids = text.tokenize(prompt, {parseSpecial: cli.parse_special ?? true});  // --no-special: plain text
  // --grammar FILE / --json-schema FILE: their text, as generate passes them
  if (cli.grammar_file !== undefined) options.grammar = readPromptFile(cli.grammar_file).toString("utf8");
  if (cli.json_schema_file !== undefined) options.json_schema = readPromptFile(cli.json_schema_file).toString("utf8");
  // compiled here first, so a refused one exits 2 as generate's does
  if (cli.grammar_file !== undefined || cli.json_schema_file !== undefined) {
    const {Generator} = await import("../bindings/generator.mjs");
    try { (await Generator.open(text, {grammar: options.grammar, jsonSchema: options.json_schema})).free(); } finally { text.close(); }
  } else text.close();
  if (ids.length === 0) throw new Error("the prompt encodes to no tokens and the vocab adds no BOS");
  // the plan's context and chunk unless given
  const nCtx = options.n_ctx ?? topology.context, chunk = options.chunk ?? topology.chunk;
  const {n_ctx: _, lookup, ...sampling} = options;  // the coordinator's Generator takes the context as nCtx
  const meshOptions = {options: sampling, ...(nCtx ? {nCtx} : {}), ...(chunk ? {chunk} : {}), ...(lookup ? {lookup} : {}),
                       ...(cli.prefill ? {prefill: cli.prefill} : {})};
  // --fat I,J: those stations run as native `knot station` processes reading the .knot by range
  let fat = null;
  if (cli.fat) {
    const {rangeServer, startFatStations} = await import("../deploy/fat.mjs");
    const {withUrls} = await import("../workers/lib/topology.mjs");
    const range = await rangeServer(bytes);
    try {
      const started = await startFatStations(topology, cli.fat, range);
      fat = {range, stations: started.stations};
      Object.assign(topology, withUrls(c, topology, started.urls));
    } catch (e) { await range.close(); throw e; }
  }
  const closeFat = async () => { if (fat) { await Promise.all(fat.stations.map((x) => x.stop())); await fat.range.close(); } };
  let m;
  try { m = await startMesh({knotBytes: bytes, topology, linkMode, ...(draft ? {draftBytes, draft} : {})}); } catch (e) { await closeFat(); throw e; }
  let summary = null, error = null;
  try {
    for await (const ev of m.generate({ids, options: meshOptions})) {
      if (ev.type === "summary") summary = ev;
      else if (ev.type === "error") error = ev;
      else if (ev.type === "token" && !idsOnly && ev.text) process.stdout.write(ev.text);
      else if (ev.type === "telemetry" && ["abstain", "reprefill"].includes(ev.event))
        process.stderr.write(`knotwork: mesh ${ev.event}: ${ev.reason}\n`);
      else if (ev.type === "telemetry" && ev.event === "failover")
        process.stderr.write(`knotwork: mesh failover: ${ev.member} ${ev.from} -> ${ev.replica} (${ev.rebuilt}): ${ev.reason}\n`);
    }
    if (error) throw new Error(`mesh: ${error.error}`);
    process.stdout.write(idsOnly ? `[${summary.ids.join(",")}]\n` : "\n");
    const s = summary, mib = (b) => (b / 1048576).toFixed(2);
    const st = await m.stats();
    const isolates = Object.entries(st).map(([n, v]) => `${n} ${v.memory?.peakLinear !== undefined ? mib(v.memory.peakLinear)
      : v.memory?.rss !== undefined ? `${mib(v.memory.rss)} (native fat station, rss)` : "?"}`).join(", ");
    const members = topology.stations.reduce((a, x) => a + x.members.filter((y) => !y.url).length, 0);
    const fatCount = topology.stations.reduce((a, x) => a + x.members.filter((y) => y.url).length, 0);
    process.stderr.write(
      `knotwork: mesh ${topology.stations.length} stations (${members} isolates${fatCount ? ` + ${fatCount} fat` : ""}: ${topology.stations.map((x) => `[${x.layers}]${x.members.length > 1 ? `x${x.members.length}` : ""}${x.members.some((y) => y.url) ? " fat" : ""}`).join(" ")}) + ${topology.shards.length} shards (${topology.shards.map((x) => `[${x.vocab}]`).join(" ")})${topology.replicas > 1 ? `, ${topology.replicas} replicas` : ""}, links ${linkMode}, ctx ${s.nCtx}\n` +
      `knotwork: prefill ${s.nPrompt} tokens in ${(s.prefillMs / 1000).toFixed(3)} s (${s.prefillTokS.toFixed(1)} tok/s)\n` +
      `knotwork: decode ${s.nDecoded} tokens in ${(s.decodeMs / 1000).toFixed(3)} s (${s.decodeTokS.toFixed(1)} tok/s), stop: ${s.reason}\n` +
      `knotwork: hops ${s.hops} (${(s.hops / Math.max(1, s.nDecoded + 1)).toFixed(1)} per token incl. prefill), subrequests ${s.subrequests}, max simultaneous connections ${s.maxConnections}, re-prefills ${s.reprefills}, abstains ${s.abstains}\n` +
      `knotwork: peak wasm linear memory per isolate (MiB): ${isolates}\n`);
    if (s.widened) process.stderr.write(`knotwork: grammar: ${s.widened} lm-head fan-outs asked again with a wider top-k\n`);
    if (s.speculative) {
      const sp = s.speculative;
      process.stderr.write(`knotwork: speculative (${sp.draft ? `draft ${cli.draft}, n ${sp.draftN}` : `lookup ${sp.lookup}`}): ${sp.drafted} drafted, ${sp.accepted} accepted ` +
                           `(${(100 * sp.acceptance).toFixed(0)}%) in ${sp.verifyPasses} verify passes` +
                           `${sp.draft ? `; draft ${sp.draftPasses} passes in ${(sp.draftMs / 1000).toFixed(3)} s, ${mib(sp.draftWeightBytes)} MiB weights + ${mib(sp.draftKvBytes)} MiB KV in the coordinator` : ""}\n`);
    }
  } finally { await m.close(); await closeFat(); }
  return 0;
}

const UPLOAD_USAGE = `usage: knotwork upload MODEL.knot [--key NAME] [--bucket knot-models] [--remote] [--persist DIR]
  Puts a .knot into the mesh's R2 bucket under NAME (default: the file name).
  default: local R2 of \`wrangler dev\` (DIR, default .wrangler/state/v3), multipart, with a progress bar
  --remote: the real bucket, through \`wrangler r2 object put --remote\` (needs wrangler login)
`;

async function upload(args) {
  let file = null, key = null, bucketName = "knot-models", remote = false, persist = ".wrangler/state/v3";
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    const val = () => { if (i + 1 >= args.length) throw new UsageError(`option ${a} needs a value`); return args[++i]; };
    if (a === "--key") key = val();
    else if (a === "--bucket") bucketName = val();
    else if (a === "--remote") remote = true;
    else if (a === "--persist") persist = val();
    else if (a === "-h" || a === "--help") { process.stdout.write(UPLOAD_USAGE); return 0; }
    else if (a.startsWith("-")) throw new UsageError(`unknown option ${a}`);
    else if (file) throw new UsageError(`unexpected argument '${a}'`);
    else file = a;
  }
  if (!file) { process.stderr.write(UPLOAD_USAGE); return 2; }
  const src = await source(file);
  const size = src.size;
  try {
    if (new TextDecoder().decode(await src.read(0, 4)) !== "KNOT")
      throw new Error(`${file}: not a .knot file (convert a GGUF first: knotwork convert IN.gguf OUT.knot)`);
    await kw.parseKnotHeader(src);  // refuse a stale or broken header before uploading anything
  } catch (e) { await src.close?.(); throw e; }
  key ??= file.split("/").pop();
  const bar = (done) => {
    const w = 30, f = Math.round(w * done / size);
    process.stderr.write(`\r[${"#".repeat(f)}${".".repeat(w - f)}] ${(done / 1048576).toFixed(1)}/${(size / 1048576).toFixed(1)} MiB`);
  };
  if (remote) {
    await src.close?.();
    const {spawnSync} = await import("node:child_process");
    process.stderr.write(`knotwork: uploading ${file} (${size} bytes) to R2 ${bucketName}/${key} with wrangler (remote)\n`);
    const r = spawnSync("npx", ["wrangler", "r2", "object", "put", `${bucketName}/${key}`, "--file", file, "--remote"], {stdio: "inherit"});
    return r.status ?? 1;
  }
  const {Miniflare} = await import("miniflare");
  const {resolve} = await import("node:path");
  const mf = new Miniflare({modules: true, script: "export default {fetch() { return new Response(null); }}",
                            r2Buckets: {MODELS: bucketName}, r2Persist: resolve(persist, "r2")});
  try {
    const bucket = await mf.getR2Bucket("MODELS");
    const part = 16 << 20;
    const up = await bucket.createMultipartUpload(key);
    const parts = [];
    bar(0);
    for (let off = 0, n = 1; off < size; off += part, n++) {
      const bytes = await src.read(off, Math.min(part, size - off));
      parts.push(await up.uploadPart(n, bytes));
      bar(off + bytes.length);
    }
    await up.complete(parts);
    const head = await bucket.head(key);
    process.stderr.write(`\nknotwork: local R2 ${bucketName}/${key}: ${head.size} bytes, etag ${head.etag} (${resolve(persist)})\n`);
    if (head.size !== size) throw new Error(`upload: R2 holds ${head.size} bytes, the file has ${size}`);
  } finally { await src.close?.(); await mf.dispose(); }
  return 0;
}

// Output byte-identical to the native `knot tokenize` (cli/tokenize.cpp).
async function tokenize(args) {
  let model = null, prompt = null, idsOnly = false, addBos = true, special = true;
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    const val = () => { if (i + 1 >= args.length) throw new UsageError(`option ${a} needs a value`); return args[++i]; };
    switch (a) {
      case "-h": case "--help": process.stdout.write(TOK_USAGE); return 0;
      case "-p": case "--prompt": case "--prompt-file":
        if (prompt !== null) throw new UsageError("give the prompt once (-p or --prompt-file)");
        prompt = a === "--prompt-file" ? readPromptFile(val()) : Buffer.from(val(), "utf8");
        break;
      case "--ids": idsOnly = true; break;
      case "--no-bos": addBos = false; break;
      case "--no-special": special = false; break;
      case "--special": special = true; break;
      default:
        if (a.startsWith("-") && a !== "-") throw new UsageError(`unknown option ${a} (see knotwork tokenize --help)`);
        if (model !== null) throw new UsageError(`unexpected argument '${a}'`);
        model = a;
    }
  }
  if (model === null) { process.stderr.write(TOK_USAGE); return 2; }
  if (prompt === null) throw new UsageError("no prompt: pass -p TEXT or --prompt-file FILE");
  const src = await source(model);
  let m;
  try { m = await kw.openModel(src); } finally { await src.close?.(); }
  try {
    const ids = m.tokenize(prompt, {addBos, parseSpecial: special});
    if (idsOnly) { process.stdout.write(`[${ids.join(", ")}]\n`); return 0; }
    const parts = [];
    for (const id of ids)
      parts.push(Buffer.from(`${String(id).padStart(6)} -> '`), m.tokenBytes(id, {special: true}), Buffer.from("'\n"));
    process.stdout.write(Buffer.concat(parts));
    return 0;
  } finally { m.close(); }
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
    `  vocab ${c.n_vocab} (tensor rows ${c.n_vocab_tensor}), rope ${c.rope_style} theta ${await kw.formatG(c.rope_theta)} dims ${c.rope_dims}, eps ${await kw.formatG(c.rms_eps)}, ctx ${c.n_ctx_train}${c.tied_embeddings ? ", tied embeddings" : ""}`];
  for (const t of h.tensors)
    lines.push(`  ${t.name.padEnd(28)} ${t.type.padEnd(5)} [${t.shape.join(", ")}] @${t.offset} ${t.size} B`);
  process.stdout.write(lines.join("\n") + "\n");
  return 0;
}

async function convert(args) {
  if (args.length !== 2) throw new UsageError("usage: knotwork convert IN.gguf OUT.knot");
  const [inp, out] = args;
  // the same refusals as the native `knot convert`
  let magic;
  try {
    const fd = openSync(inp, "r");
    try { magic = Buffer.alloc(4); readSync(fd, magic, 0, 4, 0); } finally { closeSync(fd); }
  } catch (e) { throw fileError(inp, e); }
  if (magic.toString("latin1") === "KNOT")
    throw new Error(`${inp}: already a .knot file (convert reads GGUF; to change types, convert from the source GGUF)`);
  if (magic.toString("latin1") !== "GGUF") throw new Error(`${inp}: not a GGUF file (bad magic)`);
  if (!out.endsWith(".knot"))
    throw new Error(`${out}: the output name must end in .knot (refusing to write a .knot file under another extension)`);
  const same = (a, b) => { try { const x = statSync(a), y = statSync(b); return x.dev === y.dev && x.ino === y.ino; } catch { return false; } };
  if (same(inp, out)) throw new Error(`${out}: is the input file ${inp}; refusing to overwrite the source`);
  const src = await source(inp);
  let m;
  try { m = await kw.openModel(src); } finally { await src.close(); }
  const bytes = m.toKnot();
  writeFileSync(out, bytes);
  process.stderr.write(`knotwork: wrote ${out} (${bytes.length} bytes, ${m.info.tensors.length} tensors)\n`);
  m.close();
  return 0;
}

async function serve(args) {
  const cl = await commandLine("serve", args);
  if (typeof cl === "number") return cl;
  const [model] = cl.args, {cli, options} = cl;
  const o = {port: cli.port, host: cli.host, apiKey: cli.api_key ?? (process.env.KNOTWORK_API_KEY || undefined),
             name: cli.name, nCtx: options.n_ctx, chunk: options.chunk, reference: options.mode === "reference",
             chatTemplate: cli.chat_template, parallel: cli.parallel ?? 4};
  const [{createHandler, loadingHandler}, {localBackend, slotsThatFit}, {serveHandler}] = await Promise.all([
    import("../bindings/openai.mjs"), import("../bindings/local-backend.mjs"), import("../bindings/node-http.mjs")]);
  const id = o.name ?? model.replace(/[?#].*$/, "").split("/").pop().replace(/\.(gguf|knot)$/i, "");
  // listen first: /health answers 503 {status: "loading"} until the model is loaded
  let loaded = 0, m = null;
  let ready;
  const handlerReady = new Promise((ok) => { ready = ok; });
  const server = await serveHandler(loadingHandler(handlerReady, {progress: () => loaded}), {port: o.port, host: o.host});
  const {port} = server.address();
  const shown = o.host.includes(":") ? `[${o.host}]` : o.host;
  process.stderr.write(`knotwork: listening at http://${shown}:${port} (loading ${model})\n`);
  try {
    const src = await source(model);
    try {
      let last = -1;
      m = await kw.openModel(src, {onProgress: (done, total) => {
        loaded = done / total;
        const pct = Math.floor(100 * done / total);
        if (pct >= last + 10 || done === total) { last = pct; process.stderr.write(`knotwork: loading ${model}: ${pct}%\n`); }
      }});
    } finally { await src.close?.(); }
  } catch (e) {
    server.closeAllConnections?.();
    server.close();
    throw e;
  }
  const trained = m.info.config?.n_ctx_train;
  if (o.nCtx !== undefined && trained > 0 && o.nCtx > trained)
    process.stderr.write(`knotwork: warning: --ctx ${o.nCtx} is larger than the model's trained context (${trained})\n`);
  // --draft SMALL [--draft-n K]: every request drafts with it (same vocabulary: checked here)
  let draft = null;
  const draftN = cli.draft_n;
  if (cli.draft !== undefined) {
    try {
      const dsrc = await source(cli.draft);
      try { draft = await kw.openModel(dsrc); } finally { await dsrc.close?.(); }
      const {Drafter} = await import("../bindings/drafter.mjs");
      (await Drafter.open(draft, m, {nCtx: o.nCtx, n: draftN ?? 4})).free();
    } catch (e) { server.closeAllConnections?.(); server.close(); throw e; }
    process.stderr.write(`knotwork: speculative decoding with draft model ${cli.draft} (${draftN ?? 4} tokens per pass)\n`);
  }
  // slots: --parallel, fewer when the memory holds fewer sessions of this context
  const fit = await slotsThatFit(m, {nCtx: o.nCtx, chunk: o.chunk, reference: o.reference, draft, draftN});
  const slots = Math.min(o.parallel, fit);
  if (slots < o.parallel)
    process.stderr.write(`knotwork: --parallel ${o.parallel}: the wasm memory holds ${fit} session(s) of this context; running ${slots} at once\n`);
  const backend = localBackend(m, {id, nCtx: o.nCtx, chunk: o.chunk, reference: o.reference, chatTemplate: o.chatTemplate,
                                   modelPath: model, slots, ...(draft ? {draft, draftN} : {})});
  ready(createHandler(backend, {apiKey: o.apiKey}));
  const threads = await kw.threadCount();
  process.stderr.write(`knotwork: serving ${id} at http://${shown}:${port} (OpenAI API under /v1, chat page at /)` +
                       `${o.apiKey ? ", API key required" : ""}${threads > 1 ? `, ${threads} wasm threads` : ""}\n`);
  await new Promise((ok) => {
    const stop = () => { server.closeAllConnections?.(); server.close(() => ok()); };
    process.once("SIGINT", stop);
    process.once("SIGTERM", stop);
  });
  m.close();
  return 0;
}

const WRANGLER_USAGE = `usage: knotwork wrangler PLAN.json DIR [--knot NAME]
  The Worker configurations of a plan (\`knot plan\` / \`knotwork plan\` JSON) into DIR
  (see plan --help): the same files as \`knot plan --wrangler DIR\`.
`;

async function plan(args) {
  const cl = await commandLine("plan", args);
  if (typeof cl === "number") return cl;
  const [file] = cl.args, {wrangler: dir, knot, cost, ...opts} = cl.cli;  // the planner's options
  if (knot !== undefined && !dir) throw new UsageError("--knot goes with --wrangler DIR");
  if (cost !== undefined) {
    let text;
    try { text = readFileSync(cost, "utf8"); } catch (e) { throw fileError(cost, e); }
    try { opts.cost = JSON.parse(text); } catch (e) { throw new Error(`${cost}: cost model: not JSON: ${e.message}`); }
  }
  const {planText} = await import("../bindings/planner.mjs");
  const text = await planText(await source(file), opts);
  if (dir) await writePlanConfigs(JSON.parse(text), text, dir, knot);
  process.stdout.write(text.endsWith("\n") ? text : text + "\n");
  return 0;
}

async function wrangler(args) {
  const pos = [];
  let knot;
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (a === "--knot") { if (i + 1 >= args.length) throw new UsageError("option --knot needs a value"); knot = args[++i]; }
    else if (a === "-h" || a === "--help") { process.stdout.write(WRANGLER_USAGE); return 0; }
    else if (a.startsWith("-")) throw new UsageError(`unknown option ${a}`);
    else pos.push(a);
  }
  if (pos.length !== 2) { process.stderr.write(WRANGLER_USAGE); return 2; }
  let p, text;
  try { text = readFileSync(pos[0], "utf8"); } catch (e) { throw fileError(pos[0], e); }
  try { p = JSON.parse(text); } catch (e) { throw new Error(`${pos[0]}: not JSON: ${e.message}`); }
  if (!p?.model?.n_layer || !Array.isArray(p.stations) || !Array.isArray(p.shards))
    throw new Error(`${pos[0]}: not a planner plan (needs model, stations, shards: the output of knot plan)`);
  await writePlanConfigs(p, text, pos[1], knot);
  return 0;
}

async function writePlanConfigs(p, planText, dir, knot) {
  const root = new URL("..", import.meta.url).pathname;
  const {topology, paths} = await writePlanWranglerConfigs(p, dir, {root, planText, ...(knot ? {knot} : {})});
  const members = topology.stations.reduce((a, s) => a + s.members.length, 0);
  process.stderr.write(`knotwork: wrote ${paths.length} Worker configurations to ${dir} (${members} station scripts, ` +
                       `${topology.shards.length} vocab shards, warden, coordinator) for R2 object ${topology.knot}\n`);
}

async function selftest() {
  const r = await kw.kernelSelftest();
  process.stdout.write(r.report.endsWith("\n") ? r.report : r.report + "\n");
  return r.failures ? 1 : 0;
}

// --threads N (generate, serve, selftest): the threaded wasm module with N threads
// (bindings/threads.mjs). A runtime option, not a core one: taken off the command line
// before the core's option spec reads it.
async function takeThreads(args) {
  const i = args.findIndex((a) => a === "--threads" || a.startsWith("--threads="));
  if (i < 0) return args;
  const eq = args[i].indexOf("=");
  const v = eq >= 0 ? args[i].slice(eq + 1) : args[i + 1];
  const n = Number(v);
  if (v === undefined || !/^[0-9]+$/.test(v) || n < 1 || n > MAX_THREADS)
    throw new UsageError(`--threads: expected an integer in [1, ${MAX_THREADS}], got ${v === undefined ? "nothing" : `'${v}'`}`);
  await kw.init(undefined, {threads: n});
  return [...args.slice(0, i), ...args.slice(i + (eq >= 0 ? 1 : 2))];
}

async function main(argv) {
  let [cmd, ...args] = argv;
  try {
    if (cmd === "generate" || cmd === "serve" || cmd === "selftest") args = await takeThreads(args);
    switch (cmd) {
      case "generate": return await generate(args);
      case "mesh": return await mesh(args);
      case "upload": return await upload(args);
      case "plan": return await plan(args);
      case "wrangler": return await wrangler(args);
      case "tokenize": return await tokenize(args);
      case "inspect": return await inspect(args);
      case "convert": return await convert(args);
      case "serve": return await serve(args);
      case "selftest": return await selftest();
      case "-h": case "--help": process.stdout.write(USAGE); return 0;
      case undefined: process.stderr.write(USAGE); return 2;
      default: process.stderr.write(`knotwork: error: unknown command '${cmd}'\n${USAGE}`); return 2;
    }
  } catch (e) {
    process.stderr.write(`knotwork: error: ${e.message}\n`);
    return e instanceof UsageError || e?.status === kw.STATUS.USAGE ? 2 : 1;
  }
}

// The reader closed stdout (`| head -c 20`): stop quietly with success, like coreutils
// and the native CLI, instead of an unhandled EPIPE stack trace.
process.stdout.on("error", (e) => {
  if (e.code === "EPIPE") process.exit(0);
  process.stderr.write(`knotwork: error: stdout: ${e.message}\n`);
  process.exit(1);
});

process.exitCode = await main(process.argv.slice(2));
await kw.shutdown();  // --threads: stop the workers (a worker inside the module keeps the process alive)
