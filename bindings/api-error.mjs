// api-error.mjs — the error an OpenAI-compatible request ends with: an HTTP status and the
// OpenAI error object's type, code and param (bindings/openai.mjs renders it; bindings/tools.mjs
// and the backends throw it).
export class ApiError extends Error {
  /** @param {number} status @param {string} message @param {{type?: string, code?: string|null, param?: string|null}} [o] */
  constructor(status, message, {type, code = null, param = null} = {}) {
    super(message);
    this.status = status;
    this.type = type ?? (status === 401 ? "invalid_request_error" : status >= 500 ? "server_error" : "invalid_request_error");
    this.code = code;
    this.param = param;
  }
}
