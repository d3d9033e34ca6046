// thread-worker.mjs — one worker thread of the threaded module (bindings/threads.mjs):
// Node worker_threads or a browser module Worker. Receives {module, memory, block,
// stackTop}, instantiates the module on the shared memory WITHOUT running its constructors
// (the caller's instance did; the data segments are initialised once per memory), moves
// the stack pointer to its own stack, answers {ready}, and serves row jobs in
// kw_thread_main until kw_threads_stop().
import {threadedImports} from "./threads.mjs";

const isNode = typeof process !== "undefined" && !!process.versions?.node;
const port = isNode ? (await import("node:worker_threads")).parentPort : null;
const post = (m) => (port ? port.postMessage(m) : self.postMessage(m));

async function run({module, memory, block, stackTop}) {
  try {
    const holder = {};
    const instance = await WebAssembly.instantiate(module, threadedImports(memory, holder, {isMain: false}));
    holder.exports = instance.exports;
    instance.exports.stackRestore(stackTop);
    post({ready: true});
    instance.exports.kw_thread_main(block);  // returns at kw_threads_stop()
  } catch (e) {
    post({error: String(e?.stack || e)});
  }
}

if (port) port.once("message", run);
else self.onmessage = (e) => run(e.data);
