// socket.mjs — frames over a WebSocket, the server side of a link (lib/link.mjs is the
// client): each binary message is one frame, answered by one binary frame or, when
// handling it throws, a text message {reqId, status, error} (lib/errors.mjs status).
import {requestId} from "./frame.mjs";
import {errorStatus} from "./errors.mjs";

/** A binary WebSocket message as bytes (workerd may hand over an ArrayBuffer or a Blob). */
export async function messageBytes(data) {
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  return new Uint8Array(await data.arrayBuffer());
}

/**
 * Accept a WebSocket and answer every frame on it with answer(bytes) (a promise of the
 * answer's bytes); onClose() when the peer hangs up. Returns the 101 response.
 */
export function serveFrames(answer, onClose) {
  const [client, server] = Object.values(new WebSocketPair());
  server.accept();
  server.addEventListener("close", () => {
    try { server.close(1000, "closed"); } catch {}  // the close handshake's answer: the peer's close completes
    onClose();
  });
  server.addEventListener("message", async (ev) => {
    const bytes = await messageBytes(ev.data);
    try {
      server.send(await answer(bytes));
    } catch (e) {
      if (e.drop) return server.close(1011, "injected fault: link dropped");  // lib/faults.mjs {drop}
      server.send(JSON.stringify({reqId: requestId(bytes), status: errorStatus(e), error: e.message}));
    }
  });
  return new Response(null, {status: 101, webSocket: client});
}
