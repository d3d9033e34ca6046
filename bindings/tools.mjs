// tools.mjs — OpenAI tool calling for the chat API (bindings/openai.mjs), the same for
// `serve` and the mesh's entry: checking `tools` / `tool_choice` and the tool turns of
// `messages`, rendering them through the model's own chat template, forcing a call with
// the core's JSON-schema sampler, and parsing calls out of the generated text.
//
// Contract:
//   * parseTools(body) -> null (no tools, or tool_choice "none") | {list, choice}
//       list: [{name, description?, parameters}] (parameters default {type: "object"});
//       choice: "auto" | "required" | {name}. Bad input is a 400 naming the field
//       (tools[i].function.name, tools[i].function.parameters, tool_choice, ...).
//   * toolMessage(m, i) -> the message as the template reads it, for role "tool"
//       ({role, tool_call_id, content}) and an assistant message carrying tool_calls
//       ({role, content, tool_calls: [{id, type, function: {name, arguments}}]}, arguments the
//       parsed object when the string is a JSON object);
//       null for any other message (openai.mjs checks those).
//   * toolPrompt(model, messages, tools, template) -> {text, syntax, prefix, jsonSchema?}
//       text: the prompt (model.applyChatTemplate); syntax: the call syntax the template
//       teaches — "qwen" (<tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>, a
//       template that mentions <tool_call>) or "json" ({"name": ..., "parameters": ...},
//       Llama-3.1's); a template that takes no `tools` variable (or a built-in format) gets
//       the tools described in a system message in the "json" syntax, and its tool turns
//       as text. With a forced call (choice "required" or {name}) the prompt ends with the
//       syntax's opening (`prefix`: "<tool_call>\n" for qwen) and jsonSchema is the call
//       object's schema ({name: const, arguments|parameters: the tool's parameters}, anyOf
//       over the allowed tools), so generation can only produce a valid call.
//   * parseToolCalls(text, syntax, names) -> {content: string|null, calls: [{name, arguments}]}
//       arguments: a JSON string (JSON.stringify of the parsed object). Text that does not
//       parse as calls of the declared `names` is plain content (calls []), never an error.
//   * ToolStream(syntax, names, prefix): the streamed form. push(text) -> content safe to send now (text that
//       cannot be the start of a call); end() -> {content: the rest of the content, calls},
//       so the streamed content and calls equal parseToolCalls of prefix + the whole text
//       (plain content: the text without the prefix, as the non-streamed message).
//   * openaiToolCalls(calls, id) -> message.tool_calls [{id, type: "function", function}].
import {ApiError} from "./api-error.mjs";

const bad = (message, param, code = null) => new ApiError(400, message, {param, code});
const isObject = (x) => x !== null && typeof x === "object" && !Array.isArray(x);
const NAME = /^[A-Za-z0-9_-]{1,64}$/;

/** `tools` and `tool_choice` of a chat request body, checked. */
export function parseTools(body) {
  const {tools, tool_choice: choice} = body;
  if (tools !== undefined && tools !== null && !Array.isArray(tools)) throw bad("'tools' must be an array of tools", "tools");
  const list = (tools ?? []).map((t, i) => {
    if (!isObject(t)) throw bad(`tools[${i}] must be an object {type: "function", function: {...}}`, `tools[${i}]`);
    if (t.type !== "function") throw bad(`tools[${i}].type must be "function", got ${JSON.stringify(t.type)}`, `tools[${i}].type`);
    const f = t.function;
    if (!isObject(f)) throw bad(`tools[${i}].function must be an object {name, description?, parameters?}`, `tools[${i}].function`);
    if (typeof f.name !== "string" || !NAME.test(f.name))
      throw bad(`tools[${i}].function.name must be a string of 1 to 64 letters, digits, _ or -, got ${JSON.stringify(f.name)}`,
                `tools[${i}].function.name`);
    if (f.description !== undefined && typeof f.description !== "string")
      throw bad(`tools[${i}].function.description must be a string`, `tools[${i}].function.description`);
    if (f.parameters !== undefined && !isObject(f.parameters))
      throw bad(`tools[${i}].function.parameters must be a JSON Schema object, got ${JSON.stringify(f.parameters)}`,
                `tools[${i}].function.parameters`);
    return {name: f.name, ...(f.description !== undefined && {description: f.description}),
            parameters: f.parameters ?? {type: "object", properties: {}}};
  });
  const seen = new Set();
  list.forEach((t, i) => {
    if (seen.has(t.name)) throw bad(`tools[${i}].function.name ${JSON.stringify(t.name)} is declared twice`, `tools[${i}].function.name`);
    seen.add(t.name);
  });
  let c = choice ?? "auto";
  if (isObject(c)) {
    if (c.type !== "function" || !isObject(c.function) || typeof c.function.name !== "string")
      throw bad('\'tool_choice\' must be "none", "auto", "required" or {type: "function", function: {name}}', "tool_choice");
    if (!seen.has(c.function.name))
      throw bad(`'tool_choice' names the function ${JSON.stringify(c.function.name)}, which is not in 'tools' (${[...seen].join(", ") || "none"})`,
                "tool_choice");
    c = {name: c.function.name};
  } else if (!["none", "auto", "required"].includes(c)) {
    throw bad(`'tool_choice' must be "none", "auto", "required" or {type: "function", function: {name}}, got ${JSON.stringify(c)}`, "tool_choice");
  }
  if (c === "required" && !list.length) throw bad("'tool_choice' \"required\" needs 'tools'", "tool_choice");
  if (body.parallel_tool_calls != null && typeof body.parallel_tool_calls !== "boolean")
    throw bad("'parallel_tool_calls' must be a boolean", "parallel_tool_calls");
  if (c === "none" || !list.length) return null;
  return {list, choice: c};
}

const contentText = (content, i) => {
  if (typeof content === "string") return content;
  if (content === null || content === undefined) return "";
  if (Array.isArray(content) && content.every((p) => p?.type === "text" && typeof p.text === "string"))
    return content.map((p) => p.text).join("");
  throw bad(`messages[${i}].content must be a string or an array of text parts`, `messages[${i}].content`);
};

/** A tool turn (role tool, or an assistant message with tool_calls) as the template reads it; else null. */
export function toolMessage(m, i) {
  if (m.role === "tool") {
    if (typeof m.tool_call_id !== "string" || !m.tool_call_id)
      throw bad(`messages[${i}].tool_call_id must be the id of the call this answers (a string)`, `messages[${i}].tool_call_id`);
    return {role: "tool", tool_call_id: m.tool_call_id, content: contentText(m.content, i)};
  }
  if (m.role !== "assistant" || m.tool_calls == null) return null;
  if (!Array.isArray(m.tool_calls)) throw bad(`messages[${i}].tool_calls must be an array`, `messages[${i}].tool_calls`);
  const calls = m.tool_calls.map((c, j) => {
    const at = `messages[${i}].tool_calls[${j}]`;
    if (!isObject(c) || !isObject(c.function) || typeof c.function.name !== "string")
      throw bad(`${at} must be {id, type: "function", function: {name, arguments}}`, at);
    const args = c.function.arguments ?? "{}";
    if (typeof args !== "string") throw bad(`${at}.function.arguments must be a JSON string`, `${at}.function.arguments`);
    // the template gets the arguments as an object (transformers' convention: Llama-3.1's
    // template applies tojson to them), or the string when it is not a JSON object
    let parsed;
    try { parsed = JSON.parse(args); } catch { parsed = null; }
    return {id: typeof c.id === "string" ? c.id : `call_${j}`, type: "function",
            function: {name: c.function.name, arguments: isObject(parsed) ? parsed : args}};
  });
  const out = {role: "assistant", content: contentText(m.content, i)};
  if (calls.length) out.tool_calls = calls;
  return out;
}

// ---- rendering ---------------------------------------------------------------------------

const callJson = (syntax, name, args) =>
  syntax === "qwen" ? `<tool_call>\n{"name": ${JSON.stringify(name)}, "arguments": ${args}}\n</tool_call>`
                    : `{"name": ${JSON.stringify(name)}, "parameters": ${args}}`;

// The instructions for a template that takes no tools (the "json" syntax, as Llama-3.1's).
function toolsSystemText(list) {
  return "You can call these functions. To call one, answer with only a JSON object in the format " +
    '{"name": function name, "parameters": dictionary of argument name and its value}.\n\n' +
    list.map((t) => JSON.stringify({type: "function", function: t}, null, 4)).join("\n\n");
}

/** The prompt of a chat request with tools; see the header. */
export function toolPrompt(model, messages, tools, template = "") {
  const t = model.chatTemplate();
  const name = template || t.name;
  const takesTools = name === "jinja" && /\btools\b/.test(t.text);
  const syntax = takesTools && t.text.includes("<tool_call>") ? "qwen" : "json";
  let text;
  if (takesTools) {
    text = model.applyChatTemplate(messages, {template, vars: {tools: tools.list.map((f) => ({type: "function", function: f}))}});
  } else {
    // tool turns as text, the tools in the system message
    const flat = messages.map((m) => m.tool_calls
      ? {role: "assistant", content: [m.content, ...m.tool_calls.map((c) => callJson(syntax, c.function.name,
          typeof c.function.arguments === "string" ? c.function.arguments : JSON.stringify(c.function.arguments)))]
          .filter(Boolean).join("\n")}
      : {role: m.role, content: m.content});
    const sys = toolsSystemText(tools.list);
    if (flat[0]?.role === "system") flat[0] = {role: "system", content: `${flat[0].content}\n\n${sys}`};
    else flat.unshift({role: "system", content: sys});
    text = model.applyChatTemplate(flat, {template});
  }
  if (tools.choice === "auto") return {text, syntax, prefix: ""};
  const allowed = tools.choice === "required" ? tools.list : tools.list.filter((f) => f.name === tools.choice.name);
  const argsKey = syntax === "qwen" ? "arguments" : "parameters";
  const one = (f) => ({type: "object", properties: {name: {const: f.name}, [argsKey]: f.parameters},
                       required: ["name", argsKey], additionalProperties: false});
  const prefix = syntax === "qwen" ? "<tool_call>\n" : "";
  return {text: text + prefix, syntax, prefix, jsonSchema: allowed.length === 1 ? one(allowed[0]) : {anyOf: allowed.map(one)}};
}

// ---- parsing -----------------------------------------------------------------------------

// {name, arguments} of one call object, or null
function callOf(obj, names) {
  if (!isObject(obj) || typeof obj.name !== "string" || !names.includes(obj.name)) return null;
  const args = obj.arguments ?? obj.parameters ?? {};
  const parsed = typeof args === "string" ? (() => { try { return JSON.parse(args); } catch { return null; } })() : args;
  if (!isObject(parsed)) return null;
  return {name: obj.name, arguments: JSON.stringify(parsed)};
}

const tryJson = (s) => { try { return {ok: true, v: JSON.parse(s)}; } catch { return {ok: false}; } };

const OPEN = "<tool_call>", CLOSE = "</tool_call>", PYTHON_TAG = "<|python_tag|>";

/** Tool calls in generated text; see the header. */
export function parseToolCalls(text, syntax, names) {
  const plain = {content: text, calls: []};
  if (syntax === "qwen") {
    const first = text.indexOf(OPEN);
    if (first < 0) return plain;
    const calls = [];
    let rest = "", at = first;
    while (at >= 0) {
      const end = text.indexOf(CLOSE, at + OPEN.length);
      const body = text.slice(at + OPEN.length, end < 0 ? text.length : end);
      const j = tryJson(body.trim());
      const call = j.ok ? callOf(j.v, names) : null;
      if (!call) return plain;
      calls.push(call);
      if (end < 0) break;  // a call the output ended in (a forced call stops at its JSON's end)
      const next = text.indexOf(OPEN, end + CLOSE.length);
      rest += text.slice(end + CLOSE.length, next < 0 ? text.length : next);
      at = next;
    }
    const content = text.slice(0, first).trimEnd() + rest.trim();
    return {content: content.trim() ? content : null, calls};
  }
  let s = text.trim();
  if (s.startsWith(PYTHON_TAG)) s = s.slice(PYTHON_TAG.length).trim();
  if (!s.startsWith("{") && !s.startsWith("[")) return plain;
  const j = tryJson(s);
  if (!j.ok) return plain;
  const calls = (Array.isArray(j.v) ? j.v : [j.v]).map((o) => callOf(o, names));
  if (!calls.length || calls.some((c) => !c)) return plain;
  return {content: null, calls};
}

/** Streamed parsing; see the header. */
export class ToolStream {
  // prefix: a forced call's opening, which the prompt ended with (parsed with the output,
  // not part of plain content)
  constructor(syntax, names, prefix = "") {
    Object.assign(this, {syntax, names, prefix, text: prefix, sent: 0, held: prefix !== ""});
  }
  // the end of the text that is safe to send: before anything that may start a call
  #safe() {
    const t = this.text;
    if (this.held) return this.sent;
    if (this.syntax === "qwen") {
      const at = t.indexOf(OPEN);
      if (at >= 0) { this.held = true; return Math.max(this.sent, t.slice(0, at).trimEnd().length); }
      let keep = t.length;
      for (let k = Math.min(OPEN.length - 1, t.length); k > 0; k--)
        if (OPEN.startsWith(t.slice(t.length - k))) { keep = t.length - k; break; }
      return Math.max(this.sent, t.slice(0, keep).trimEnd().length);  // trailing space may precede a call
    }
    const s = t.trimStart();
    if (!s) return this.sent;  // only whitespace so far
    if (s[0] === "{" || s[0] === "[" || s.startsWith(PYTHON_TAG)) { this.held = true; return this.sent; }
    if (PYTHON_TAG.startsWith(s)) return this.sent;  // may still become the tag
    return t.length;
  }
  push(text) {
    this.text += text;
    const upto = this.#safe();
    const out = this.text.slice(this.sent, upto);
    this.sent = upto;
    return out;
  }
  end() {
    const r = parseToolCalls(this.text, this.syntax, this.names);
    const content = r.calls.length ? r.content ?? "" : this.text.slice(this.prefix.length);
    // what was sent is a prefix of the content: before a call's tag, or the plain text
    return {content: content.slice(this.sent), calls: r.calls};
  }
}

/** message.tool_calls of parsed calls. */
export function openaiToolCalls(calls, id) {
  return calls.map((c, i) => ({id: `call_${id}_${i}`, type: "function", function: {name: c.name, arguments: c.arguments}}));
}
