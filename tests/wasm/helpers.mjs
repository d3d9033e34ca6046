// helpers.mjs — shared by tests/wasm/*.test.mjs (not a test file itself).
import {existsSync, readFileSync, readdirSync, statSync, createReadStream, mkdtempSync, rmSync} from "node:fs";
import {createServer} from "node:http";
import {spawn} from "node:child_process";
import {tmpdir} from "node:os";
import {join, dirname, extname, resolve} from "node:path";
import {fileURLToPath} from "node:url";

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
export const WASM_PATH = join(ROOT, "build/wasm/knotwork.wasm");
export const MODELS = process.env.KNOT_SHARED_MODELS || resolve(ROOT, "../shared/models");
export const KNOT_BIN = process.env.KNOT_BIN || join(ROOT, "build/bin/knot");

/**
 * Path of a shared test model. Missing: under CI the test FAILS (throws), otherwise it
 * is skipped (returns null after t.skip).
 */
export function sharedModel(t, name) {
  const p = join(MODELS, name);
  if (existsSync(p)) return p;
  if (process.env.CI) throw new Error(`shared model ${p} is missing (CI is set: not skipping)`);
  t.skip(`shared model ${p} missing`);
  return null;
}

/**
 * Whether every file exists (shared models, build outputs). Missing: under CI the test FAILS
 * (throws, naming the file), otherwise it is skipped (false after t.skip).
 */
export function haveFiles(t, ...paths) {
  const missing = paths.filter((p) => !existsSync(p));
  if (!missing.length) return true;
  if (process.env.CI) throw new Error(`${missing.join(", ")} missing (CI is set: not skipping)`);
  t.skip(`${missing.join(", ")} missing`);
  return false;
}

let refs;
export function referenceOutputs() {
  refs ??= JSON.parse(readFileSync(join(MODELS, "reference-outputs.json"), "utf8"));
  return refs;
}

const tmpDirs = [];
process.on("exit", () => { for (const d of tmpDirs) rmSync(d, {recursive: true, force: true}); });
/** A fresh temp dir, removed when the test process exits. */
export function tmpDir(prefix = "knotwork-wasm-") {
  const d = mkdtempSync(join(tmpdir(), prefix));
  tmpDirs.push(d);
  return d;
}

const MIME = {".html": "text/html; charset=utf-8", ".mjs": "text/javascript", ".js": "text/javascript",
              ".wasm": "application/wasm", ".json": "application/json"};

/** serveFiles headers of a cross-origin isolated page (SharedArrayBuffer: the threaded module). */
export const ISOLATED = Object.freeze({"Cross-Origin-Opener-Policy": "same-origin",
                                       "Cross-Origin-Embedder-Policy": "require-corp"});

/** serveFiles routes for every module of bindings/ (what a page importing the JS API loads). */
export function bindingsRoutes() {
  const dir = join(ROOT, "bindings");
  return Object.fromEntries(readdirSync(dir).filter((f) => f.endsWith(".mjs")).map((f) => [`/bindings/${f}`, join(dir, f)]));
}

/**
 * Tiny static server on 127.0.0.1 (ephemeral port) with single-range Range support.
 * routes: {"/url/path": "/abs/file/path"}. Records every request in `log`.
 * headers: sent with every answer (e.g. COOP/COEP for a cross-origin isolated page).
 */
export async function serveFiles(routes, {headers: extra = {}} = {}) {
  const log = [];
  const server = createServer((req, res) => {
    const url = new URL(req.url, "http://x");
    const file = routes[url.pathname];
    log.push({method: req.method, path: url.pathname, range: req.headers.range || null});
    if (!file || !existsSync(file)) { res.writeHead(404, extra); res.end("not found"); return; }
    const size = statSync(file).size;
    const headers = {"Content-Type": MIME[extname(file)] || "application/octet-stream",
                     "Accept-Ranges": "bytes", "Cache-Control": "no-store", ...extra};
    const m = /^bytes=(\d*)-(\d*)$/.exec(req.headers.range || "");
    if (m && (m[1] !== "" || m[2] !== "")) {
      let start, end;
      if (m[1] === "") { start = Math.max(0, size - Number(m[2])); end = size - 1; }
      else { start = Number(m[1]); end = m[2] === "" ? size - 1 : Math.min(Number(m[2]), size - 1); }
      if (start >= size || start > end) {
        res.writeHead(416, {"Content-Range": `bytes */${size}`}); res.end(); return;
      }
      res.writeHead(206, {...headers, "Content-Range": `bytes ${start}-${end}/${size}`,
                          "Content-Length": end - start + 1});
      if (req.method === "HEAD") { res.end(); return; }
      createReadStream(file, {start, end}).pipe(res);
      return;
    }
    res.writeHead(200, {...headers, "Content-Length": size});
    if (req.method === "HEAD") { res.end(); return; }
    createReadStream(file).pipe(res);
  });
  await new Promise((ok) => server.listen(0, "127.0.0.1", ok));
  const {port} = server.address();
  return {
    url: `http://127.0.0.1:${port}`,
    log,
    close: () => new Promise((ok) => { server.closeAllConnections?.(); server.close(() => ok()); }),
  };
}

/** Start `knotwork serve`; resolves {url, id, proc, stderr, stop()} once it listens. */
export async function startServe(model, args = []) {
  const proc = spawn(process.execPath, [join(ROOT, "bin/knotwork.mjs"), "serve", model, "--port", "0", ...args], {stdio: ["ignore", "pipe", "pipe"]});
  let stderr = "";
  const url = await new Promise((ok, fail) => {
    proc.stderr.on("data", (d) => {
      stderr += d;
      const m = /serving (\S+) at (http:\/\/\S+)/.exec(stderr);
      if (m) ok(m[2]);
    });
    proc.on("exit", (code) => fail(new Error(`serve exited with ${code}: ${stderr}`)));
  });
  const id = /serving (\S+) at/.exec(stderr)[1];
  return {url, id, proc, get stderr() { return stderr; },
          stop: () => new Promise((ok) => {
            if (proc.exitCode !== null || proc.signalCode !== null) return ok();
            proc.once("exit", ok);
            proc.kill("SIGTERM");
          })};
}


/** The Chromium the browser tests drive (CHROMIUM_PATH overrides /usr/bin/chromium). */
export const CHROMIUM = process.env.CHROMIUM_PATH || "/usr/bin/chromium";

/** True when CHROMIUM exists. Missing: under CI the test FAILS (throws), otherwise it is skipped
 *  (returns false after t.skip), as sharedModel. */
export function haveChromium(t) {
  if (existsSync(CHROMIUM)) return true;
  if (process.env.CI) throw new Error(`${CHROMIUM} missing (CI is set: not skipping)`);
  t.skip(`no chromium at ${CHROMIUM}`);
  return false;
}

/** Headless CHROMIUM as a playwright-core persistent context on a fresh temp profile (removed at
 *  exit): no sandbox, no GPU, no background networking, component updates or first-run UI.
 *  options: further launchPersistentContext options (viewport, …). The caller closes it. */
export async function launchChromium(options = {}) {
  const {chromium} = await import("playwright-core");
  return chromium.launchPersistentContext(tmpDir("knotwork-chromium-"), {
    executablePath: CHROMIUM, headless: true, ...options,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--no-first-run", ...(options.args ?? [])],
  });
}
