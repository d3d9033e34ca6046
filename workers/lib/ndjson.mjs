// ndjson.mjs — events as NDJSON: one JSON object a line. The session DO streams a
// generation's events (bindings/events.mjs) this way, to the HTTP client of
// POST /v1/mesh/generate as they are, and to the coordinator's OpenAI backend, which
// reads them back with ndjsonEvents.

const enc = new TextEncoder();

/** One event as its NDJSON line's bytes. */
export const ndjsonLine = (e) => enc.encode(JSON.stringify(e) + "\n");

/** The events of an NDJSON byte stream, parsed, in order. */
export async function* ndjsonEvents(stream) {
  const reader = stream.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  try {
    for (;;) {
      const {value, done} = await reader.read();
      if (value) buf += value;
      let nl;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (line) yield JSON.parse(line);
      }
      if (done) break;
    }
  } finally { await reader.cancel().catch(() => {}); }  // a consumer that stops early ends the stream
}
