#!/usr/bin/env node
// chat-once.mjs — one chat completion through an OpenAI-compatible endpoint with the official
// `openai` client, streamed to stdout as it arrives, then usage and speed on stderr.
//   usage: node scripts/chat-once.mjs BASE_URL "message" [max_tokens]   (OPENAI_API_KEY if the server needs one)
import OpenAI from "openai";

const [base, message = "Tell me a story.", max = "64"] = process.argv.slice(2);
if (!base) { process.stderr.write("usage: node scripts/chat-once.mjs BASE_URL MESSAGE [MAX_TOKENS]\n"); process.exit(2); }
const client = new OpenAI({baseURL: new URL("/v1", base).href, apiKey: process.env.OPENAI_API_KEY || "none", maxRetries: 0});
const [model] = (await client.models.list()).data;
process.stderr.write(`chat: ${model.id} <- ${JSON.stringify(message)}\n`);
const t0 = Date.now();
let usage = null, finish = null, first = 0;
const stream = await client.chat.completions.create({model: model.id, messages: [{role: "user", content: message}],
  max_tokens: Number(max), temperature: 0, stream: true, stream_options: {include_usage: true}});
for await (const c of stream) {
  const d = c.choices[0]?.delta?.content;
  if (d) { first ||= Date.now(); process.stdout.write(d); }
  finish = c.choices[0]?.finish_reason ?? finish;
  usage = c.usage ?? usage;
}
process.stdout.write("\n");
const s = (Date.now() - t0) / 1000;
process.stderr.write(`chat: ${usage?.completion_tokens} tokens (finish ${finish}) in ${s.toFixed(2)} s; first token after ` +
                     `${((first - t0) / 1000).toFixed(2)} s; prompt ${usage?.prompt_tokens} tokens\n`);
