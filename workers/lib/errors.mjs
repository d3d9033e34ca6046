// errors.mjs — how the workers fail: an HttpError carries its status; a frame that does
// not parse (FrameError) is a 400; anything else a 500. Over HTTP the answer is
// {"error": message} with that status; over a WebSocket link, {reqId, status, error}.
import {FrameError} from "./frame.mjs";

export class HttpError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

/** The HTTP status an error answers with. */
export const errorStatus = (e) => e instanceof FrameError ? 400 : e instanceof HttpError ? e.status : 500;

export function errorResponse(e) {
  return new Response(JSON.stringify({error: e.message ?? String(e)}), {status: errorStatus(e), headers: {"content-type": "application/json"}});
}
