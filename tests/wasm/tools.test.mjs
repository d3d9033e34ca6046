// Tool calling (bindings/tools.mjs) on `serve`'s handler (bindings/openai.mjs over the
// local backend), through the official openai client, with random-weight models carrying
// the real Qwen3 vocabulary and chat template, and the real Llama-3 vocabulary with a
// Llama-3.1-style tool template (tests/data/llama3-tools.jinja: the @lenml Llama-3 package's
// template takes no tools). Checked: the template renders tools and tool turns as
// @huggingface/jinja does; a forced call (tool_choice "required" / a named function) is a
// call whose arguments validate against the declared parameters (ajv), finish_reason
// "tool_calls", streamed deltas reassembling to the non-streamed call (greedy); a tool-role
// follow-up turn is rendered by the template; bad tools are 400s naming the field; the
// parsers of both syntaxes, malformed output staying plain content.
import {test} from "node:test";
import assert from "node:assert/strict";
import {readFileSync} from "node:fs";
import OpenAI from "openai";
import * as kw from "../../bindings/knotwork.mjs";
import {createHandler} from "../../bindings/openai.mjs";
import {localBackend} from "../../bindings/local-backend.mjs";
import {ToolStream, parseToolCalls} from "../../bindings/tools.mjs";
import {join} from "node:path";
import {KNOT_BIN, startServe, tmpDir} from "./helpers.mjs";
import {VOCABS, referenceChat, synthVocabModel, vocabFiles} from "./tokenizer-ref.mjs";
import {LLAMA3_TOOLS_TEMPLATE, QUESTION, TOOLS, argumentChecker, collect, toolModels} from "./tools-ref.mjs";

// content: null as the openai client sends it (the handler passes "" to the template)
const FOLLOW_UP = (call, content = null) => [...QUESTION, {role: "assistant", content, tool_calls: [call]},
  {role: "tool", tool_call_id: call.id, content: "{\"temp\": 21, \"sky\": \"clear\"}"}];

// the assistant's call as the template gets it: arguments parsed (bindings/tools.mjs toolMessage)
const parsedCall = (c) => ({...c, function: {...c.function, arguments: JSON.parse(c.function.arguments)}});

test("parsers: Qwen <tool_call> blocks and Llama-3 JSON calls; malformed output stays plain content", () => {
  const names = ["f", "g"];
  assert.deepEqual(parseToolCalls('<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>', "qwen", names),
    {content: null, calls: [{name: "f", arguments: '{"x":1}'}]});
  assert.deepEqual(parseToolCalls('Let me check.\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>\n' +
                                  '<tool_call>\n{"name": "g", "arguments": "{\\"y\\": [1, 2]}"}\n</tool_call>', "qwen", names),
    {content: "Let me check.", calls: [{name: "f", arguments: "{}"}, {name: "g", arguments: '{"y":[1,2]}'}]});
  // a forced call ends at its JSON (no closing tag)
  assert.deepEqual(parseToolCalls('<tool_call>\n{"name": "g", "arguments": {"y": true}}', "qwen", names).calls, [{name: "g", arguments: '{"y":true}'}]);
  assert.deepEqual(parseToolCalls('{"name": "f", "parameters": {"x": "a"}}', "json", names), {content: null, calls: [{name: "f", arguments: '{"x":"a"}'}]});
  assert.deepEqual(parseToolCalls(' <|python_tag|>{"name": "g", "parameters": {}}', "json", names).calls, [{name: "g", arguments: "{}"}]);
  for (const [text, syntax] of [
    ['<tool_call>\n{"name": "f", "arguments": {"x": 1}\n</tool_call>', "qwen"],   // truncated JSON
    ['<tool_call>\n{"name": "nope", "arguments": {}}\n</tool_call>', "qwen"],     // an undeclared function
    ['<tool_call>\n{"arguments": {}}\n</tool_call>', "qwen"],                     // no name
    ['<tool_call>\n{"name": "f", "arguments": [1]}\n</tool_call>', "qwen"],       // arguments not an object
    ["<tool_call>", "qwen"], ["plain text", "qwen"], ["", "qwen"],
    ['{"name": "f", "parameters": ', "json"], ['{"name": "f"} and more', "json"], ["[]", "json"], ["Hello {", "json"], ["", "json"],
  ]) assert.deepEqual(parseToolCalls(text, syntax, names), {content: text, calls: []}, `${syntax}: ${JSON.stringify(text)}`);
});

test("ToolStream: the streamed content and calls equal the whole text's parse, at any split", () => {
  const names = ["f"];
  const cases = [
    ["qwen", 'Sure, checking.\n\n<tool_call>\n{"name": "f", "arguments": {"q": "<tool"}}\n</tool_call>'],
    ["qwen", "<tool_ca is not a tag, <tool_call> broken"], ["qwen", "no calls at all <tool_"],
    ["json", '  {"name": "f", "parameters": {"a": 1}}'], ["json", "  <|python_tag|>{\"name\": \"f\", \"parameters\": {}}"],
    ["json", "<|pyth not a tag"], ["json", "{ not json"], ["json", "Hello"],
  ];
  for (const [syntax, text] of cases) {
    const whole = parseToolCalls(text, syntax, names);
    for (const step of [1, 2, 3, 7, 1000]) {
      const s = new ToolStream(syntax, names);
      let content = "";
      for (let i = 0; i < text.length; i += step) content += s.push(text.slice(i, i + step));
      const end = s.end();
      content += end.content;
      assert.equal(content, whole.content ?? "", `${syntax} step ${step}: ${JSON.stringify(text)}`);
      assert.deepEqual(end.calls, whole.calls);
    }
  }
  // a forced call's opening: parsed with the output; a malformed call is the output alone
  for (const [out, calls] of [['{"name": "f", "arguments": {"a": 1}}', 1], ['{"name": "f", "argum', 0]]) {
    const s = new ToolStream("qwen", names, "<tool_call>\n");
    assert.equal(s.push(out), "");
    const end = s.end();
    assert.equal(end.calls.length, calls);
    assert.equal(end.content, calls ? "" : out);
  }
  // nothing of a call leaves before the call is complete
  const s = new ToolStream("qwen", names);
  assert.equal(s.push("Hi <tool_"), "Hi");
  assert.equal(s.push('call>\n{"name": "f", "arguments": {}}'), "");
});

for (const name of Object.keys(VOCABS)) {
  test(`${name}: tools and tool turns rendered by our Jinja == @huggingface/jinja`, async (t) => {
    const files = toolModels(t);
    if (!files) return;
    const own = JSON.parse(readFileSync(vocabFiles(name).config, "utf8"));  // the package's tokenizer_config.json
    const config = name === "llama3" ? {...own, chat_template: LLAMA3_TOOLS_TEMPLATE} : own;
    const m = await kw.openModel(kw.bytesSource(readFileSync(files[name]), "m.knot"));
    try {
      const call = {id: "call_1", type: "function", function: {name: "get_weather", arguments: "{\"city\": \"Paris\", \"days\": 2}"}};
      const tools = TOOLS.map((x) => ({type: "function", function: x.function}));
      const chats = [
        {messages: QUESTION, add_generation_prompt: true, extra: {tools}},
        {messages: [{role: "system", content: "Be brief."}, ...QUESTION], add_generation_prompt: true, extra: {tools}},
        {messages: FOLLOW_UP(call, ""), add_generation_prompt: true, extra: {tools}},  // arguments as a string
        {messages: FOLLOW_UP(parsedCall(call), ""), add_generation_prompt: true, extra: {tools}},  // as the handler passes them
      ];
      const bos = VOCABS[name].bos === null ? "" : own.bos_token;
      for (const chat of chats) {
        const expected = await referenceChat(config, chat);
        const ours = m.applyChatTemplate(chat.messages, {addGenerationPrompt: true, vars: chat.extra});
        assert.equal(bos + ours, expected);
        assert.ok(ours.includes("get_weather") && ours.includes("The weather in a city"), "the tools are in the prompt");
      }
    } finally { m.close(); }
  });

  test(`${name}: forced tool calls through the openai client (serve's handler), streamed == not streamed; a tool-role follow-up`, async (t) => {
    const files = toolModels(t);
    if (!files) return;
    const m = await kw.openModel(kw.bytesSource(readFileSync(files[name]), "m.knot"));
    try {
      const handle = createHandler(localBackend(m, {id: "model"}));
      const client = new OpenAI({baseURL: "http://serve/v1", apiKey: "unused", maxRetries: 0,
                                 fetch: async (url, init) => handle(new Request(url, init))});
      const check = argumentChecker();
      for (const tool_choice of ["required", {type: "function", function: {name: "lookup"}}]) {
        const ask = {model: "model", messages: QUESTION, tools: TOOLS, tool_choice, temperature: 0, max_tokens: 120};
        const r = await client.chat.completions.create(ask);
        const [choice] = r.choices;
        assert.equal(choice.finish_reason, "tool_calls", JSON.stringify(choice));
        assert.equal(choice.message.tool_calls.length, 1);
        const call = choice.message.tool_calls[0];
        check(call);
        if (typeof tool_choice === "object") assert.equal(call.function.name, "lookup");
        assert.equal(choice.message.content, null);
        const s = await collect(await client.chat.completions.create({...ask, stream: true}));
        assert.equal(s.finish, "tool_calls");
        assert.equal(s.content, null);
        assert.deepEqual(s.tool_calls.map((c) => c.function), [call.function], "streamed deltas reassemble to the same call");
        assert.match(s.tool_calls[0].id, /^call_/);
        // the next turn: the call and its result, rendered by the template
        const follow = FOLLOW_UP(call);
        const f = await client.chat.completions.create({model: "model", messages: follow, tools: TOOLS, temperature: 0, max_tokens: 2});
        const prompt = m.applyChatTemplate(FOLLOW_UP(parsedCall(call), ""), {vars: {tools: TOOLS}});
        assert.ok(prompt.includes("{\"temp\": 21, \"sky\": \"clear\"}") && prompt.includes(`"${call.function.name}"`), prompt.slice(-300));
        assert.equal(f.usage.prompt_tokens, m.tokenize(prompt, {addBos: true, parseSpecial: true}).length);
      }
      // a forced call cut short by max_tokens: no call, the partial output as content (the same streamed), "length"
      const short = {model: "model", messages: QUESTION, tools: TOOLS, tool_choice: "required", temperature: 0, max_tokens: 3};
      const cut = (await client.chat.completions.create(short)).choices[0];
      assert.equal(cut.finish_reason, "length");
      assert.equal(cut.message.tool_calls, undefined);
      assert.ok(cut.message.content.startsWith("{") && !cut.message.content.includes("<tool_call>"), cut.message.content);
      const cs = await collect(await client.chat.completions.create({...short, stream: true}));
      assert.deepEqual([cs.content, cs.tool_calls, cs.finish], [cut.message.content, [], "length"]);
      // "auto": whatever the (random) model says, the streamed message equals the non-streamed one
      const auto = {model: "model", messages: QUESTION, tools: TOOLS, temperature: 0, max_tokens: 8};
      const a = (await client.chat.completions.create(auto)).choices[0];
      const as = await collect(await client.chat.completions.create({...auto, stream: true}));
      assert.equal(as.content ?? "", a.message.content ?? "");
      assert.deepEqual(as.tool_calls.map((c) => c.function), (a.message.tool_calls ?? []).map((c) => c.function));
      assert.equal(as.finish, a.finish_reason);
      // tool_choice "none": the tools are not offered, plain text comes back
      const none = await client.chat.completions.create({model: "model", messages: QUESTION, tools: TOOLS, tool_choice: "none",
                                                         temperature: 0, max_tokens: 3});
      assert.equal(none.usage.prompt_tokens, m.tokenize(m.applyChatTemplate(QUESTION), {addBos: true, parseSpecial: true}).length);
      assert.equal(none.choices[0].message.tool_calls, undefined);
    } finally { m.close(); }
  });
}

test("`knotwork serve` (the process): a forced call over HTTP, streamed == not streamed", async (t) => {
  const files = toolModels(t);
  if (!files) return;
  const srv = await startServe(files.qwen3, ["--ctx", "512", "--parallel", "1"]);
  try {
    const client = new OpenAI({baseURL: `${srv.url}/v1`, apiKey: "unused", maxRetries: 0});
    const ask = {model: srv.id, messages: QUESTION, tools: TOOLS, tool_choice: {type: "function", function: {name: "get_weather"}},
                 temperature: 0, max_tokens: 120};
    const r = (await client.chat.completions.create(ask)).choices[0];
    assert.equal(r.finish_reason, "tool_calls");
    const args = argumentChecker()(r.message.tool_calls[0]);
    assert.equal(r.message.tool_calls[0].function.name, "get_weather");
    assert.ok(["Paris", "Oslo", "Lima"].includes(args.city) && Number.isInteger(args.days));
    const s = await collect(await client.chat.completions.create({...ask, stream: true}));
    assert.deepEqual(s.tool_calls.map((c) => c.function), [r.message.tool_calls[0].function]);
    assert.equal(s.finish, "tool_calls");
  } finally { await srv.stop(); }
});

test("a template that takes no tools (the @lenml Llama-3 one): the tools in a system message, a forced call in the JSON syntax", async (t) => {
  if (!toolModels(t)) return;
  const file = synthVocabModel("llama3", join(tmpDir("knotwork-tools-"), "plain.knot"), KNOT_BIN);
  const m = await kw.openModel(kw.bytesSource(readFileSync(file), "m.knot"));
  try {
    assert.ok(!/\btools\b/.test(m.chatTemplate().text));
    const handle = createHandler(localBackend(m, {id: "model"}));
    const client = new OpenAI({baseURL: "http://serve/v1", apiKey: "unused", maxRetries: 0, fetch: async (u, i) => handle(new Request(u, i))});
    const r = (await client.chat.completions.create({model: "model", messages: QUESTION, tools: TOOLS, tool_choice: "required",
                                                     temperature: 0, max_tokens: 120})).choices[0];
    assert.equal(r.finish_reason, "tool_calls");
    argumentChecker()(r.message.tool_calls[0]);
    // the prompt: a system message describing the tools, then the question
    const p = await handle(new Request("http://serve/apply-template", {method: "POST", body: JSON.stringify({messages: QUESTION})}));
    const plain = (await p.json()).prompt;
    const follow = [...QUESTION, {role: "assistant", content: null, tool_calls: [r.message.tool_calls[0]]},
                    {role: "tool", tool_call_id: r.message.tool_calls[0].id, content: "21 C"}];
    const f = await client.chat.completions.create({model: "model", messages: follow, tools: TOOLS, temperature: 0, max_tokens: 1});
    const n = (text) => m.tokenize(text, {addBos: true, parseSpecial: true}).length;
    assert.ok(f.usage.prompt_tokens > n(plain) + 100, "the tools' description and the call are in the prompt");
  } finally { m.close(); }
});

test("bad tools are 400s naming the field", async (t) => {
  const files = toolModels(t);
  if (!files) return;
  const m = await kw.openModel(kw.bytesSource(readFileSync(files.qwen3), "m.knot"));
  try {
    const handle = createHandler(localBackend(m, {id: "model"}));
    const post = async (body) => {
      const r = await handle(new Request("http://serve/v1/chat/completions", {method: "POST", headers: {"content-type": "application/json"},
        body: JSON.stringify({model: "model", messages: QUESTION, max_tokens: 1, ...body})}));
      return {status: r.status, error: (await r.json()).error};
    };
    const fn = (f) => [{type: "function", function: f}];
    for (const [body, param] of [
      [{tools: fn({parameters: {type: "object"}})}, "tools[0].function.name"],
      [{tools: [TOOLS[0], {type: "function", function: {name: "x", parameters: "nope"}}]}, "tools[1].function.parameters"],
      [{tools: fn({name: "x", parameters: [1]})}, "tools[0].function.parameters"],
      [{tools: TOOLS, tool_choice: {type: "function", function: {name: "missing"}}}, "tool_choice"],
      [{tools: TOOLS, tool_choice: "sometimes"}, "tool_choice"],
      [{tool_choice: "required"}, "tool_choice"],
      [{tools: {}}, "tools"],
      [{tools: [{type: "retrieval"}]}, "tools[0].type"],
      [{messages: [...QUESTION, {role: "tool", content: "x"}]}, "messages[1].tool_call_id"],
      [{tools: fn({name: "x", parameters: {type: "object", properties: {s: {type: "string", pattern: "^a"}}}}), tool_choice: "required"}, "tools"],
    ]) {
      const r = await post(body);
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.equal(r.error.param, param, r.error.message);
      assert.ok(r.error.message.includes(param), r.error.message);  // the message names the field too
    }
  } finally { m.close(); }
});
