// node-http.mjs — serve a fetch-style handler `(Request) => Promise<Response>` (openai.mjs)
// with node:http. Streams the response body as it is produced (SSE), and when the client
// goes away mid-response cancels the body (which ends the generation and frees its
// session) and aborts the Request's signal.
import {createServer} from "node:http";

/**
 * @param {(request: Request) => Promise<Response>} handle
 * @param {{port?: number, host?: string, maxBody?: number}} [o]  maxBody: larger request bodies get a 413
 * @returns {Promise<import("node:http").Server>} listening
 */
export async function serveHandler(handle, {port = 8080, host = "127.0.0.1", maxBody = 16 << 20} = {}) {
  const server = createServer((req, res) => { onRequest(handle, req, res, maxBody).catch(() => res.destroy()); });
  await new Promise((ok, fail) => {
    server.once("error", fail);
    server.listen(port, host, () => { server.off("error", fail); ok(); });
  });
  return server;
}

async function onRequest(handle, req, res, maxBody) {
  req.socket.setNoDelay(true);  // small SSE events go out at once
  const ac = new AbortController();
  let gone = false;
  res.on("close", () => { if (!res.writableFinished) { gone = true; ac.abort(); } });
  const chunks = [];
  let size = 0;
  for await (const c of req) {  // past maxBody: read on (so the client gets the answer), keep nothing
    size += c.length;
    if (size <= maxBody) chunks.push(c);
  }
  if (size > maxBody) {
    res.writeHead(413, {"content-type": "application/json"});
    res.end(JSON.stringify({error: {message: `request body larger than ${maxBody} bytes`, type: "invalid_request_error",
                                    param: null, code: "request_too_large"}}));
    return;
  }
  const headers = new Headers();
  for (const [k, v] of Object.entries(req.headers)) headers.set(k, Array.isArray(v) ? v.join(", ") : v);
  const hasBody = req.method !== "GET" && req.method !== "HEAD";
  const request = new Request(`http://${req.headers.host || "localhost"}${req.url}`,
                              {method: req.method, headers, body: hasBody ? Buffer.concat(chunks) : undefined, signal: ac.signal});
  const response = await handle(request);
  if (gone) { await response.body?.cancel(); return; }
  res.writeHead(response.status, Object.fromEntries(response.headers));
  if (!response.body) { res.end(); return; }
  res.flushHeaders();
  const reader = response.body.getReader();
  const cancel = () => reader.cancel().catch(() => {});
  res.on("close", () => { if (gone) cancel(); });
  for (;;) {
    const {done, value} = await reader.read();
    if (done) break;
    if (gone) return;
    if (!res.write(value))
      await new Promise((ok) => { res.once("drain", ok); res.once("close", ok); });
  }
  res.end();
}
