// prompt.mjs — the coordinator's tokenizer: the model's config + tokenizer (no tensors,
// lib/text.mjs), once per isolate and model, and a request's prompt as token ids. A
// request is tokenized once, where it enters: by the OpenAI backend (backend.mjs), or by
// the session DO for POST /v1/mesh/generate with text or messages.
import {openTextModel} from "../lib/text.mjs";
import {r2Source} from "../lib/r2.mjs";
import {jsonBinding} from "../lib/config.mjs";
import {HttpError} from "../lib/errors.mjs";
import {bootCache, initWasm} from "../lib/boot.mjs";

const text = bootCache((m) => m.close());

/** The text model of env.TOPOLOGY's .knot (read from env.MODELS). */
export function textModel(env) {
  const t = jsonBinding(env.TOPOLOGY, "TOPOLOGY");
  return text(t.knot, async () => {
    await initWasm();
    return openTextModel(await r2Source(env.MODELS, t.knot));
  });
}

/**
 * Prompt ids from a request body: ids, or messages through the chat template (`template`:
 * a name, "" for the model's own), or prompt text (special-token text parsed, as `generate`).
 */
export function promptIds(model, body, template = "") {
  if (Array.isArray(body.ids)) return body.ids;
  if (Array.isArray(body.messages))
    return model.tokenize(model.applyChatTemplate(body.messages, {template}), {addBos: true, parseSpecial: true});
  if (typeof body.prompt === "string") return model.tokenize(body.prompt, {parseSpecial: true});
  throw new HttpError(400, "body needs ids (token ids), messages (chat) or prompt (text)");
}
