// edit-tasks.mjs — real prompts and replies for teacher-forced lookup acceptance
// (bench/lookup-acceptance.mjs), built from this repository's files at a fixed commit
// (git show COMMIT:PATH, so the text never drifts), in Qwen2.5's chat frame (ChatML with
// qwen2.5-coder's default system prompt).
//   kind "code-edit": the user message holds an instruction and a real source file of
//     100-260 lines; the reply is the whole edited file in a fence, made here by applying the
//     edit (each replacement checks how often it matched, so a changed file fails loudly).
//     A coder model asked to apply an edit answers with (nearly) this text.
//   kind "doc-continue": the user message holds the first sections of a real document
//     (docs/*.md) and asks for the rest; the reply is the real rest (English prose).
//   kind "chat": a question only; the reply is a real README section (English prose that
//     repeats nothing from the prompt, only itself).
//   editTasks(root) -> [{kind, name, file, commit, prompt, reply}]   (strings)
import {execFileSync} from "node:child_process";

export const COMMIT = "7d9244a";  // the files as of this commit
const SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
const chat = (user) => `<|im_start|>system\n${SYSTEM}<|im_end|>\n<|im_start|>user\n${user}<|im_end|>\n<|im_start|>assistant\n`;
const fence = (lang, text) => "```" + lang + "\n" + text + (text.endsWith("\n") ? "" : "\n") + "```";

/** text with `from` (a string, or a global RegExp) replaced by `to`, which must match exactly `count` times */
export function replaceCounted(text, from, to, count, what) {
  const n = typeof from === "string" ? text.split(from).length - 1 : (text.match(from) ?? []).length;
  if (n !== count) throw new Error(`${what}: ${from} matched ${n} times, expected ${count}`);
  return typeof from === "string" ? text.split(from).join(to) : text.replace(from, to);
}

const EDITS = [
  {name: "rename a function (JS)", file: "bindings/sources.mjs", lang: "js",
   instruction: "Rename the function checkRange to assertInRange everywhere in this file. Reply with the whole updated file.",
   edit: (t, w) => replaceCounted(t, /\bcheckRange\(/g, "assertInRange(", 5, w)},
  {name: "add an option (JS)", file: "bindings/sources.mjs", lang: "js",
   instruction: "Add a `timeoutMs` option to urlSource (default 0: no timeout): every request it makes, the probe and each range read, " +
                "is aborted after timeoutMs milliseconds with AbortSignal.timeout. Document it in the function's comment. " +
                "Reply with the whole updated file.",
   edit: (t, w) => {
     t = replaceCounted(t, " * from a `Range: bytes=0-0` probe (Content-Range), so the server must support ranges.\n */",
       " * from a `Range: bytes=0-0` probe (Content-Range), so the server must support ranges.\n" +
       " * timeoutMs > 0 aborts each request (the probe and every range read) after that many milliseconds.\n */", 1, w);
     t = replaceCounted(t, "export async function urlSource(url, {fetch: fetchFn = globalThis.fetch, headers = {}} = {}) {\n  const href = String(url);\n",
       "export async function urlSource(url, {fetch: fetchFn = globalThis.fetch, headers = {}, timeoutMs = 0} = {}) {\n  const href = String(url);\n" +
       "  const signal = () => (timeoutMs > 0 ? AbortSignal.timeout(timeoutMs) : undefined);\n", 1, w);
     t = replaceCounted(t, '{headers: {...headers, Range: "bytes=0-0"}}', '{headers: {...headers, Range: "bytes=0-0"}, signal: signal()}', 1, w);
     return replaceCounted(t, "{headers: {...headers, Range: `bytes=${offset}-${offset + len - 1}`}}",
       "{headers: {...headers, Range: `bytes=${offset}-${offset + len - 1}`}, signal: signal()}", 1, w);
   }},
  {name: "add a parameter (JS)", file: "bindings/generator.mjs", lang: "js",
   instruction: "Add a parameter minN (default 1) to draftLookup, after ngramMax: the shortest n-gram it tries. " +
                "Update its comment. Reply with the whole updated file.",
   edit: (t, w) => {
     t = replaceCounted(t, "trying\n * n = ngramMax down to 1; [] when nothing matches.", "trying\n * n = ngramMax down to minN; [] when nothing matches.", 1, w);
     t = replaceCounted(t, "export function draftLookup(hist, k, ngramMax = 3) {", "export function draftLookup(hist, k, ngramMax = 3, minN = 1) {", 1, w);
     return replaceCounted(t, "n >= 1; n--) {\n    for (let j = len - n - 1", "n >= minN; n--) {\n    for (let j = len - n - 1", 1, w);
   }},
  {name: "rename a member function (C++)", file: "core/infer/draft_model.cpp", lang: "cpp",
   instruction: "Rename DraftModel::keep to keep_matching in this file (its definition and every call). Reply with the whole updated file.",
   edit: (t, w) => replaceCounted(t, /\bkeep\(/g, "keep_matching(", 3, w)},
];

const DOCS = [
  {file: "docs/testing.md", split: "## Reference implementations"},
  {file: "docs/wasm.md", split: "## The loader"},
];
const CHATS = [
  {file: "README.md", section: "## The `.knot` container", question: "What is the .knot container and why does knotwork use it instead of GGUF?"},
  {file: "README.md", section: "## Modes", question: "Which modes can knotwork run a model in, and how do they differ?"},
];

function show(root, file) {
  try {
    return execFileSync("git", ["-C", root, "show", `${COMMIT}:${file}`], {encoding: "utf8", maxBuffer: 1 << 26, stdio: ["ignore", "pipe", "pipe"]});
  } catch (e) {
    throw new Error(`edit-tasks: git show ${COMMIT}:${file} failed (the tasks need the repository's history up to ${COMMIT}; a shallow clone lacks it): ${e.stderr ?? e.message}`);
  }
}

export function editTasks(root) {
  const tasks = [];
  for (const e of EDITS) {
    const src = show(root, e.file), what = `${e.name} in ${e.file}@${COMMIT}`;
    const edited = e.edit(src, what);
    if (edited === src) throw new Error(`${what}: the edit changed nothing`);
    tasks.push({kind: "code-edit", name: e.name, file: e.file, commit: COMMIT, lines: src.split("\n").length - 1,
                prompt: chat(`${e.instruction}\n\n\`${e.file}\`:\n${fence(e.lang, src)}`), reply: fence(e.lang, edited) + "<|im_end|>"});
  }
  for (const d of DOCS) {
    const src = show(root, d.file), at = src.indexOf(`\n${d.split}\n`);
    if (at < 0) throw new Error(`${d.file}@${COMMIT}: no heading ${d.split}`);
    tasks.push({kind: "doc-continue", name: `continue ${d.file}`, file: d.file, commit: COMMIT, lines: src.split("\n").length - 1,
                prompt: chat(`Here is the start of a document. Write the rest of it.\n\n${src.slice(0, at + 1)}`), reply: src.slice(at + 1) + "<|im_end|>"});
  }
  for (const c of CHATS) {
    const src = show(root, c.file), at = src.indexOf(`\n${c.section}\n`);
    if (at < 0) throw new Error(`${c.file}@${COMMIT}: no heading ${c.section}`);
    const body = src.slice(at + c.section.length + 2), end = body.search(/\n## /);
    tasks.push({kind: "chat", name: c.question, file: `${c.file} ${c.section}`, commit: COMMIT,
                prompt: chat(c.question), reply: (end < 0 ? body : body.slice(0, end + 1)).trim() + "<|im_end|>"});
  }
  return tasks;
}
