// backend.mjs — the backend of the OpenAI handler (bindings/openai.mjs) over the mesh:
// /v1/models, /health, generate(req), and llama-server's tokenize, detokenize,
// apply-template, props and metrics over the coordinator's text model (no weights).
// Embeddings are refused (501): they need every layer's hidden states, which only the
// stations compute, and the stations have no pooled-hidden-state call yet. A request is tokenized and checked here, once;
// its ids generate in a SessionDO (session.mjs), whose events (bindings/events.mjs) pass
// on unrenamed after `accepted`; an error event is thrown.
import {ApiError} from "../../bindings/openai.mjs";
import {defaultContext, requestOptions} from "../../bindings/options.mjs";
import {jsonBinding} from "../lib/config.mjs";
import {sessionEvents} from "./session.mjs";
import {checkOptions} from "./request.mjs";
import {textModel, promptIds} from "./prompt.mjs";
import {isolateStats} from "./stats.mjs";
import {draftConfig} from "./draft.mjs";
import {toolPrompt} from "../../bindings/tools.mjs";

/** @param {import("./index.mjs").Env} env */
export function meshBackend(env, {created = Math.floor(Date.now() / 1000)} = {}) {
  const t = jsonBinding(env.TOPOLOGY, "TOPOLOGY");
  const id = env.MODEL_ID ?? t.knot.replace(/\.knot$/, "");
  const topo = {kind: "mesh", stations: t.stations.map((s) => ({layers: s.layers, members: s.members.map((m) => m.name)})),
                shards: t.shards.map((s) => ({name: s.name, vocab: s.vocab})), shardGroups: t.shardGroups};
  let model = null;
  const text = async () => (model ??= await textModel(env));
  return {
    async models() {
      const m = await text(), c = m.info.config;
      return [{id, created, owned_by: "knotwork", knotwork: {arch: c.arch, nCtx: defaultContext(c),
               nLayer: c.n_layer, nEmbd: c.n_embd, nVocab: c.n_vocab, format: "knot", mode: "mesh", topology: topo}}];
    },
    async health() { return {model: id, topology: topo, isolates: await isolateStats(env)}; },
    tokenBytes(_model, tok, o) { return model?.tokenBytes(tok, o) ?? new Uint8Array(); },
    async tokenize(content, {addSpecial, parseSpecial}) { return (await text()).tokenize(content, {addBos: addSpecial, parseSpecial}); },
    async detokenize(ids) {
      const m = await text(), V = m.info.config.n_vocab;
      const bad = ids.find((x) => x >= V);
      if (bad !== undefined) throw new ApiError(400, `token id ${bad} is outside the vocabulary (${V} tokens)`, {param: "tokens"});
      return m.detokenize(ids);
    },
    async applyTemplate(messages) { return (await text()).applyChatTemplate(messages, {template: env.CHAT_TEMPLATE ?? ""}); },
    async props() {
      const m = await text(), c = m.info.config, tk = m.info.tokenizer ?? {};
      const tmpl = m.chatTemplate();
      const tokenText = (i) => (i >= 0 ? new TextDecoder().decode(m.tokenBytes(i, {special: true})) : null);
      return {id, modelPath: t.knot, nCtx: defaultContext(c), slots: null, topology: topo,
              chatTemplate: env.CHAT_TEMPLATE ? {name: env.CHAT_TEMPLATE, text: tmpl.text} : tmpl,
              bos: tokenText(tk.bos_id), eos: tokenText(tk.eos_id),
              knotwork: {arch: c.arch, nLayer: c.n_layer, nEmbd: c.n_embd, nVocab: c.n_vocab, format: "knot", mode: "mesh"}};
    },
    embedUnsupported: "the mesh's coordinator holds no layers; pooled hidden states would need a call on the stations that returns the final layer's rows (not implemented)",
    async *generate(req) {
      const m = await text(), c = m.info.config;
      const nCtx = defaultContext(c);
      const param = req.kind === "chat" ? "messages" : "prompt";
      let ids, call = {};  // call: a request with tools' {syntax, prefix, jsonSchema?} (bindings/tools.mjs)
      try {
        if (req.tools) {
          call = toolPrompt(m, req.messages, req.tools, env.CHAT_TEMPLATE ?? "");
          ids = m.tokenize(call.text, {addBos: true, parseSpecial: true});
        } else {
          const body = req.kind === "chat" ? {messages: req.messages}
            : typeof req.prompt === "string" ? {prompt: req.prompt} : {ids: req.prompt};
          ids = promptIds(m, body, env.CHAT_TEMPLATE ?? "");
        }
      } catch (e) { throw new ApiError(400, `could not build the prompt: ${e.message}`, {param}); }
      const bad = ids.find((x) => !(x >= 0 && x < c.n_vocab));
      if (bad !== undefined) throw new ApiError(400, `prompt token id ${bad} is outside the vocabulary (${c.n_vocab} tokens)`, {param});
      if (ids.length >= nCtx || (req.maxTokens !== undefined && ids.length + req.maxTokens > nCtx))
        throw new ApiError(400, `This model's maximum context length is ${nCtx} tokens; the request needs ${ids.length + (req.maxTokens ?? 1)}.`,
                           {param: req.maxTokens !== undefined ? "max_tokens" : param, code: "context_length_exceeded"});
      const seed = req.seed ?? Math.floor(Math.random() * 2 ** 32);
      const options = {...requestOptions(req, {maxTokens: req.maxTokens ?? nCtx - ids.length, seed}), ...(call.jsonSchema ? {jsonSchema: call.jsonSchema} : {}), nCtx};
      for (const k of Object.keys(options)) if (options[k] === undefined) delete options[k];
      try { await checkOptions(m, options, {prefix: "", draftMax: draftConfig(env)?.n ?? 0}); } catch (e) {
        throw call.jsonSchema ? new ApiError(400, `tools: the parameters cannot constrain a forced call: ${e.message}`, {param: "tools"})
          : new ApiError(400, e.message, {param: null});
      }
      yield {type: "accepted", promptTokens: ids.length, nCtx, arch: c.arch, mode: "mesh", seed, topology: topo,
             ...(call.syntax && {toolSyntax: call.syntax, toolPrefix: call.prefix})};
      for await (const e of sessionEvents(env, {ids, options})) {
        if (e.type === "error") throw new Error(`mesh: ${e.error}`);
        yield e;
      }
    },
  };
}
