// metrics.mjs — the counters of one OpenAI handler (openai.mjs) and their Prometheus text
// exposition (GET /metrics, format 0.0.4). The handler counts what it answers (requests by
// route and status, the prompt, cached and generated tokens and the time spent on them, by
// finish reason); the backend adds gauges of its own (backend.metrics?(): sessions
// running, requests queued, slots).
//
//   const m = new Metrics();
//   m.request("/v1/chat/completions", 200);
//   m.generation(summaryEvent, acceptedEvent);
//   const text = m.render(await backend.metrics?.());
//
// In a mesh every coordinator isolate counts its own requests: /metrics there is that
// isolate's view (Prometheus sums a scrape of each).

// Routes named in the `route` label; anything else counts as "other" (bounded cardinality).
const ROUTES = new Set(["/", "/health", "/props", "/metrics", "/tokenize", "/detokenize", "/apply-template",
  "/v1/models", "/v1/chat/completions", "/v1/completions", "/v1/embeddings"]);

const esc = (v) => String(v).replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/"/g, '\\"');
const labels = (o) => {
  const e = Object.entries(o);
  return e.length ? `{${e.map(([k, v]) => `${k}="${esc(v)}"`).join(",")}}` : "";
};
const fmt = (x) => Number.isFinite(x) ? String(x) : x > 0 ? "+Inf" : x < 0 ? "-Inf" : "NaN";

export class Metrics {
  constructor() {
    this.requests = new Map();     // "route\tstatus" -> count
    this.finished = new Map();     // reason -> generations
    this.promptTokens = 0;
    this.cachedTokens = 0;
    this.generatedTokens = 0;
    this.promptSeconds = 0;
    this.decodeSeconds = 0;
    this.decodedTokens = 0;        // tokens whose forward pass decodeSeconds timed
    this.embeddingTokens = 0;
    this.embeddingInputs = 0;
  }

  /** One answered request (the status its response carried). */
  request(path, status) {
    const k = `${ROUTES.has(path) || /^\/v1\/models\/./.test(path) ? path.replace(/^\/v1\/models\/.+$/, "/v1/models/{id}") : "other"}\t${status}`;
    this.requests.set(k, (this.requests.get(k) ?? 0) + 1);
  }

  /** One generation that ended with a summary (bindings/events.mjs). */
  generation(s, accepted = {}) {
    this.promptTokens += s.nPrompt ?? 0;
    this.cachedTokens += s.cachedTokens ?? accepted.cachedTokens ?? 0;
    this.generatedTokens += s.nGenerated ?? 0;
    this.promptSeconds += (s.prefillMs ?? 0) / 1000;
    this.decodeSeconds += (s.decodeMs ?? 0) / 1000;
    this.decodedTokens += s.nDecoded ?? Math.max(0, (s.nGenerated ?? 0) - 1);
    this.finished.set(s.reason, (this.finished.get(s.reason) ?? 0) + 1);
  }

  /** One embeddings request: inputs embedded, their tokens. */
  embeddings(inputs, tokens) { this.embeddingInputs += inputs; this.embeddingTokens += tokens; }

  /**
   * The Prometheus text. gauges: the backend's {name: number | {value, help}} (names
   * without the prefix), e.g. {requests_processing: 1, requests_queued: 2}.
   */
  render(gauges = {}) {
    const out = [];
    const metric = (name, type, help, samples) => {
      out.push(`# HELP knotwork_${name} ${help}`, `# TYPE knotwork_${name} ${type}`);
      for (const [l, v] of samples) out.push(`knotwork_${name}${labels(l)} ${fmt(v)}`);
    };
    metric("requests_total", "counter", "HTTP requests answered, by route and status.",
           [...this.requests].map(([k, v]) => { const [route, status] = k.split("\t"); return [{route, status}, v]; }));
    metric("generations_total", "counter", "Generations that ended, by finish reason (eog, stop, length, context).",
           [...this.finished].map(([reason, v]) => [{reason}, v]));
    metric("prompt_tokens_total", "counter", "Prompt tokens of finished generations.", [[{}, this.promptTokens]]);
    metric("cached_tokens_total", "counter", "Prompt tokens reused from a cache instead of prefilled.", [[{}, this.cachedTokens]]);
    metric("generated_tokens_total", "counter", "Tokens generated.", [[{}, this.generatedTokens]]);
    metric("prompt_seconds_total", "counter", "Time spent prefilling prompts.", [[{}, this.promptSeconds]]);
    metric("decode_seconds_total", "counter", "Time spent decoding (the forward passes after the prefill).", [[{}, this.decodeSeconds]]);
    metric("prompt_tokens_per_second", "gauge", "Average prefill throughput (prompt tokens / prompt seconds).",
           [[{}, this.promptSeconds > 0 ? (this.promptTokens - this.cachedTokens) / this.promptSeconds : 0]]);
    metric("generated_tokens_per_second", "gauge", "Average decode throughput (decoded tokens / decode seconds).",
           [[{}, this.decodeSeconds > 0 ? this.decodedTokens / this.decodeSeconds : 0]]);
    metric("embedding_inputs_total", "counter", "Inputs embedded (/v1/embeddings).", [[{}, this.embeddingInputs]]);
    metric("embedding_tokens_total", "counter", "Tokens of embedded inputs.", [[{}, this.embeddingTokens]]);
    for (const [name, g] of Object.entries(gauges ?? {})) {
      const {value, help} = typeof g === "number" ? {value: g, help: name.replace(/_/g, " ") + "."} : g;
      if (!/^[a-z_][a-z0-9_]*$/.test(name)) throw new Error(`metrics: bad gauge name ${JSON.stringify(name)}`);
      metric(name, "gauge", help, [[{}, value]]);
    }
    return out.join("\n") + "\n";
  }
}
