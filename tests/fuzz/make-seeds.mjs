// make-seeds.mjs — writes the small seed corpora in tests/fuzz/corpus/<harness>/ (kept
// in the repo, a few KB each). Run once after a build: node tests/fuzz/make-seeds.mjs
// Sources: a tiny `knot synth` model (Q8_0, tied embeddings; GGUF and .knot), the header of the shared
// stories260K.gguf, tokenizer blobs taken from those .knot payloads plus a hand-built
// byte-level BPE blob, chat templates of the four recognised families, sampler bytes.
import {execFileSync} from "node:child_process";
import {mkdirSync, readFileSync, writeFileSync, existsSync, mkdtempSync} from "node:fs";
import {createHash} from "node:crypto";
import {join, resolve, dirname} from "node:path";
import {tmpdir} from "node:os";
import {fileURLToPath} from "node:url";

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = resolve(HERE, "../..");
const KNOT = join(ROOT, "build/bin/knot");
const MODELS = resolve(ROOT, "../shared/models");
const tmp = mkdtempSync(join(tmpdir(), "knot-seeds-"));

function put(harness, bytes) {
  const dir = join(HERE, "corpus", harness);
  mkdirSync(dir, {recursive: true});
  const b = typeof bytes === "string" ? Buffer.from(bytes) : Buffer.from(bytes);
  writeFileSync(join(dir, createHash("sha1").update(b).digest("hex")), b);
}
const cat = (...parts) => Buffer.concat(parts.map((p) => (typeof p === "string" ? Buffer.from(p) : Buffer.from(p))));
const FF = Buffer.from([0xff]);

function synth(args, out) {
  execFileSync(KNOT, ["synth", ...args, out], {stdio: "ignore"});
  return readFileSync(out);
}
const tiny = ["--arch", "llama", "--hidden", "32", "--layers", "1", "--heads", "2", "--kv-heads", "1", "--ffn", "32",
              "--vocab", "260", "--type", "Q8_0", "--tied"];

// GGUF: two synth files and the shared model's header (the parser stops at the tensor
// table's bounds, after walking every metadata value of a real file)
put("gguf", synth(tiny, join(tmp, "a.gguf")));
const shared = join(MODELS, "stories260K.gguf");
if (existsSync(shared)) put("gguf", readFileSync(shared).subarray(0, 24 * 1024));

// .knot: the same two models
const knots = [synth(tiny, join(tmp, "a.knot"))];
for (const k of knots) put("knot", k);

// tokenizer blobs: from the .knot payloads (the first payload bytes)
function blobOf(k) {
  const metaLen = k.readUInt32LE(6);
  const meta = JSON.parse(k.subarray(10, 10 + metaLen).toString());
  const p0 = ((10 + metaLen + 3) & ~3) + 1;
  return k.subarray(p0 + meta.tokenizer.offset, p0 + meta.tokenizer.offset + meta.tokenizer.size);
}
const spm = blobOf(knots[0]);
put("tokenizer", cat(spm, FF, "once upon a time, there was <s> a girl named lily!", FF, [3]));
put("tokenizer", cat(spm, FF, "  tabs\tand\nnewlines \u00e9\u4e2d\u{1F600} bytes \x80", FF, [1]));
// byte-level BPE (GPT-2 byte-to-unicode map), a few merges and ChatML specials
const b2u = [];
for (let b = 0, n = 0; b < 256; b++) {
  const keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  b2u.push(String.fromCodePoint(keep ? b : 256 + n++));
}
const merges = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r", "o n", "Ġ w", "a n", "r e"];
const bpeTokens = [...b2u, ...merges.map((m) => m.replace(" ", "")), "<|im_start|>", "<|im_end|>", "<|endoftext|>"];
const types = bpeTokens.map((t) => (t.startsWith("<|") ? 3 : 1));
const bpe = JSON.stringify({model: "gpt2", pre: "qwen2", tokens: bpeTokens, scores: [], token_types: types, merges,
                            bos_id: -1, eos_id: bpeTokens.length - 2, unk_id: -1, pad_id: -1, eot_id: bpeTokens.length - 2,
                            add_bos: false, add_eos: false, add_space_prefix: false, chat_template: ""});
put("tokenizer", cat(bpe, FF, "<|im_start|>user\nthe weather in the ran<|im_end|>\n 123 4567 don't  x", FF, [2]));
put("tokenizer", cat(bpe, FF, "fn main() {\r\n\tprintln!(\"hi\");\r\n}", FF, [0]));

// chat: <template> FF <flags> <bos> <eos> then role FF content FF ...
const conv = cat("system", FF, "be brief", FF, "user", FF, "hi", FF, "assistant", FF, "hello", FF, "user", FF, "more?");
const templates = [
  "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}",
  "<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n{% for m in messages %}<|im_start|>{{m.role}}{% endfor %}",
  "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\\n\\n{{ m['content'] | trim }}<|eot_id|>{% endfor %}",
  "{% for message in messages %}{% if message['role'] == 'user' %}{{ '<|user|>\\n' + message['content'] + eos_token }}{% endif %}{% endfor %}",
  "{{ bos_token }}{% for message in messages %}[INST] {{ message['content'] }} [/INST]{% endfor %}",
  "",
];
for (const [i, t] of templates.entries()) put("chat", cat(t, FF, [i * 37 + 0x81, 1, 2], conv));

// sampler: params + history + logits (little-endian floats)
function samplerSeed(temp, topk, topp, minp, pen, lastn, nvocab, hist, logits) {
  const b = Buffer.alloc(4 * 6 + 8 + 2 + hist.length + 4 * logits.length);
  let o = 0;
  b.writeFloatLE(temp, o); o += 4;
  b.writeInt32LE(topk, o); o += 4;
  b.writeFloatLE(topp, o); o += 4;
  b.writeFloatLE(minp, o); o += 4;
  b.writeFloatLE(pen, o); o += 4;
  b.writeInt32LE(lastn, o); o += 4;
  b.writeUInt32LE(7, o); o += 4;
  b.writeUInt32LE(42, o); o += 4;
  b[o++] = nvocab - 1;
  b[o++] = hist.length;
  for (const h of hist) b[o++] = h;
  for (const l of logits) { b.writeFloatLE(l, o); o += 4; }
  return b;
}
const lg = Array.from({length: 40}, (_, i) => Math.sin(i * 1.7) * 5);
put("sampler", samplerSeed(0.8, 40, 0.95, 0.05, 1.1, 64, 32, [1, 2, 3, 2], lg));
put("sampler", samplerSeed(0, 0, 1, 0, 1, 0, 16, [], lg));
put("sampler", samplerSeed(1.5, 3, 0.5, 0.2, 0.9, -1, 40, [5, 5, 5, 39], lg));
console.log("seeds written under", join(HERE, "corpus"));
