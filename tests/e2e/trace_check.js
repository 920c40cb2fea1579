'use strict';
// Loads a metrics.trace file into Perfetto's trace processor, the engine ui.perfetto.dev opens
// traces with (its WebAssembly build, as shipped in a PyPI wheel's copy of the Perfetto UI), and
// checks what a person would look for there, through the engine's own SQL tables:
//   node trace_check.js ENGINE_DIR TRACE RANKS STEPS
// ENGINE_DIR holds engine_bundle.js and trace_processor.wasm. The trace must hold RANKS processes,
// each with steps 1..STEPS, each step with data wait, forward, backward (each holding a span per
// layer), sync and optimizer inside
// it and every all-reduce bucket's span starting inside it; spans nest on every track (the engine
// drops and counts any that overlap part-way); at least one bucket starts before its step's backward
// ends (communication overlapped with compute); the data reader's reads are on a track of their own;
// rank 0 shows the final checkpoint and evaluation.
const fs = require('fs');
const path = require('path');
const vm = require('vm');

const [engineDir, tracePath, ranksArg, stepsArg] = process.argv.slice(2);
const ranks = Number(ranksArg), steps = Number(stepsArg);
let failures = 0;
function check(ok, what) {
  if (ok) return;
  ++failures;
  console.error('FAIL: ' + what);
}

// --- The engine: its bundle runs in a context shaped like the web worker the UI starts it in. ---
const readEngineFile = (url) => fs.readFileSync(path.join(engineDir, String(url).replace(/^.*\//, '')));
const worker = {
  console: {log() {}, warn() {}, error: console.error},
  setTimeout, clearTimeout, queueMicrotask, TextDecoder, TextEncoder, performance, URL,
  importScripts() {},
  WorkerGlobalScope: function WorkerGlobalScope() {},
  location: {href: 'http://localhost/engine_bundle.js'},
  XMLHttpRequest: class {
    open(method, url) { this.url = url; }
    send() {
      const bytes = readEngineFile(this.url);
      this.response = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length);
      this.status = 200;
    }
  },
  fetch: async (url) => new Response(readEngineFile(url), {headers: {'Content-Type': 'application/wasm'}}),
};
worker.self = worker;
vm.createContext(worker);
// The engine adds its reply callback to the function table right before it sets up its request
// buffer: from then on it takes requests.
vm.runInContext(`{ const grow = WebAssembly.Table.prototype.grow;
  WebAssembly.Table.prototype.grow = function(...args) { self.engineReady = true; return grow.apply(this, args); }; }`,
worker);
vm.runInContext(fs.readFileSync(path.join(engineDir, 'engine_bundle.js'), 'utf8'), worker,
                {filename: 'engine_bundle.js'});
const EngineBytes = vm.runInContext('Uint8Array', worker);

// --- Protocol buffers, as much as the RPC (trace_processor.proto) needs. ---
const encoder = new TextEncoder(), decoder = new TextDecoder();
function varint(value) {
  let v = BigInt.asUintN(64, BigInt(value));
  const out = [];
  do {
    let byte = Number(v & 0x7fn);
    v >>= 7n;
    if (v) byte |= 0x80;
    out.push(byte);
  } while (v);
  return out;
}
const varintField = (number, value) => [...varint(number << 3), ...varint(value)];
const bytesField = (number, bytes) => [...varint((number << 3) | 2), ...varint(bytes.length), ...bytes];
// Field number -> list of values: varints as BigInt, the rest as byte arrays.
function decode(buffer) {
  const fields = {};
  let i = 0;
  const readVarint = () => {
    let value = 0n, shift = 0n, byte;
    do {
      byte = buffer[i++];
      value |= BigInt(byte & 0x7f) << shift;
      shift += 7n;
    } while (byte & 0x80);
    return value;
  };
  while (i < buffer.length) {
    const key = Number(readVarint()), wire = key & 7;
    let value;
    if (wire === 0) {
      value = readVarint();
    } else if (wire === 2) {
      const n = Number(readVarint());
      value = buffer.subarray(i, i + n);
      i += n;
    } else if (wire === 1 || wire === 5) {
      value = buffer.subarray(i, i + (wire === 1 ? 8 : 4));
      i += wire === 1 ? 8 : 4;
    } else {
      throw new Error('unexpected wire type ' + wire);
    }
    (fields[key >> 3] = fields[key >> 3] || []).push(value);
  }
  return fields;
}
function packedVarints(chunks) {
  const out = [];
  for (const bytes of chunks || []) {
    let i = 0;
    while (i < bytes.length) {
      let value = 0n, shift = 0n, byte;
      do {
        byte = bytes[i++];
        value |= BigInt(byte & 0x7f) << shift;
        shift += 7n;
      } while (byte & 0x80);
      out.push(Number(BigInt.asIntN(64, value)));
    }
  }
  return out;
}

// --- The RPC: a stream of TraceProcessorRpc messages each way, each as field 1 of the stream. ---
const replies = [];
let unparsed = new Uint8Array(0);
const port = {
  onmessage: null,  // set by the engine: where requests go
  postMessage(data) {  // the engine's replies, as it answers a request
    const joined = new Uint8Array(unparsed.length + data.length);
    joined.set(unparsed);
    joined.set(data, unparsed.length);
    let at = 0;
    for (;;) {
      let i = at + 1, size = 0, shift = 0, byte = 0x80;
      while (i < joined.length && (byte & 0x80)) {
        byte = joined[i++];
        size += (byte & 0x7f) * 2 ** shift;
        shift += 7;
      }
      if (at >= joined.length || (byte & 0x80) || i + size > joined.length) break;
      replies.push(decode(joined.subarray(i, i + size)));
      at = i + size;
    }
    unparsed = joined.slice(at);
  },
};
worker.onmessage({data: port});  // as the UI hands its worker the port
let sequence = 0;
// TraceProcessorRpc: seq = 1, request = 2; the argument fields are the method's.
function request(method, args) {
  const message = [...varintField(1, ++sequence), ...varintField(2, method), ...args];
  port.onmessage({data: new EngineBytes(bytesField(1, message))});
  const reply = replies.shift();
  if (!reply) throw new Error('no reply to request ' + method);
  if (reply[5]) throw new Error('trace processor: ' + decoder.decode(reply[5][0]));
  return reply;
}
const TPM_APPEND_TRACE_DATA = 1, TPM_FINALIZE_TRACE_DATA = 2, TPM_QUERY_STREAMING = 3;

function load(bytes) {
  for (let at = 0; at < bytes.length; at += 1 << 24) {
    const reply = request(TPM_APPEND_TRACE_DATA, bytesField(101, bytes.subarray(at, at + (1 << 24))));
    const result = reply[201] ? decode(reply[201][0]) : {};
    if (result[2]) throw new Error('loading the trace: ' + decoder.decode(result[2][0]));
  }
  request(TPM_FINALIZE_TRACE_DATA, []);
}

// Rows as objects. QueryResult: column_names = 1, error = 2, batch = 3; a batch: cell types = 1,
// varints = 2, doubles = 3, strings = 5 (each NUL-terminated), last batch = 6.
function query(sql) {
  let reply = request(TPM_QUERY_STREAMING, bytesField(103, bytesField(1, [...encoder.encode(sql)])));
  let columns = [];
  const cells = [];
  for (;;) {
    const result = decode(reply[203][0]);
    if (result[2]) throw new Error('query failed: ' + decoder.decode(result[2][0]) + '\n' + sql);
    if (result[1]) columns = result[1].map((c) => decoder.decode(c));
    let last = false;
    for (const raw of result[3] || []) {
      const batch = decode(raw);
      const types = packedVarints(batch[1]), ints = packedVarints(batch[2]), doubles = [];
      for (const chunk of batch[3] || []) {
        const view = new DataView(chunk.buffer, chunk.byteOffset, chunk.length);
        for (let k = 0; k < chunk.length; k += 8) doubles.push(view.getFloat64(k, true));
      }
      const strings = batch[5] ? decoder.decode(batch[5][0]).split('\0') : [];
      let vi = 0, di = 0, si = 0;
      for (const type of types)
        cells.push(type === 2 ? ints[vi++] : type === 3 ? doubles[di++] : type === 4 ? strings[si++] : null);
      if (batch[6] && batch[6][0] === 1n) last = true;
    }
    if (last) break;
    reply = replies.shift();
    if (!reply) throw new Error('the query result ended without its last batch');
  }
  const rows = [];
  for (let i = 0; i + columns.length <= cells.length; i += columns.length)
    rows.push(Object.fromEntries(columns.map((c, k) => [c, cells[i + k]])));
  return rows;
}

// --- The checks. ---
async function main() {
  while (!worker.engineReady) await new Promise((resolve) => setTimeout(resolve, 10));
  await new Promise((resolve) => setTimeout(resolve, 10));
  load(fs.readFileSync(tracePath));

  const problems = query("select name, value from stats where value > 0 and severity in ('error', 'data_loss')");
  check(problems.length === 0,
        'the trace processor reports import problems: ' + problems.map((p) => `${p.name} = ${p.value}`).join(', '));

  const processes = query('select pid, name from process where name is not null order by pid');
  check(processes.length === ranks && processes.every((p, r) => p.pid === r && p.name.startsWith(`rank ${r} (`)),
        `a process per rank, named: ${JSON.stringify(processes)}`);

  const slices = query(`select s.id, s.ts, s.dur, s.name, s.depth, s.parent_id as parent, t.tid, t.name as thread,
      p.pid as rank, extract_arg(s.arg_set_id, 'args.step') as step,
      extract_arg(s.arg_set_id, 'args.bytes') as bytes
    from slice s join thread_track tt on s.track_id = tt.id join thread t using (utid) join process p using (upid)`);
  const byId = new Map(slices.map((s) => [s.id, s]));
  const within = (inner, outer) => inner.ts >= outer.ts && inner.ts + inner.dur <= outer.ts + outer.dur;

  // Nesting, as the engine built it and by the times: on each track two spans are apart or one
  // holds the other.
  const tracks = new Map();
  for (const s of slices) {
    const key = `${s.rank}/${s.tid}`;
    if (!tracks.has(key)) tracks.set(key, []);
    tracks.get(key).push(s);
  }
  for (const [key, list] of tracks) {
    list.sort((a, b) => a.ts - b.ts || b.dur - a.dur);
    const open = [];
    let bad = null;
    for (const s of list) {
      while (open.length && open[open.length - 1].ts + open[open.length - 1].dur <= s.ts) open.pop();
      if (open.length && !within(s, open[open.length - 1])) bad = bad || [open[open.length - 1], s];
      open.push(s);
    }
    check(!bad, `spans on track ${key} overlap part-way: ${JSON.stringify(bad)}`);
  }

  let overlapped = 0, bucketSpans = 0;
  for (let r = 0; r < ranks; ++r) {
    const mine = slices.filter((s) => s.rank === r);
    const main = mine.filter((s) => s.thread === 'main');
    const stepSpans = main.filter((s) => s.name === 'step' && s.depth === 0).sort((a, b) => a.step - b.step);
    check(JSON.stringify(stepSpans.map((s) => s.step)) === JSON.stringify([...Array(steps).keys()].map((k) => k + 1)),
          `rank ${r}: steps ${stepSpans.map((s) => s.step)}, expected 1..${steps}`);
    const buckets = mine.filter((s) => s.thread.startsWith('allreduce bucket '));
    const bucketTracks = new Set(buckets.map((s) => s.tid));
    check(bucketTracks.size >= 1, `rank ${r}: no all-reduce bucket track`);
    bucketSpans += buckets.length;
    for (const step of stepSpans) {
      const inside = main.filter((s) => s.parent === step.id);
      const phase = (name) => inside.filter((s) => s.name === name);
      for (const name of ['data wait', 'forward', 'backward', 'sync', 'optimizer'])
        check(phase(name).length === 1, `rank ${r} step ${step.step}: ${phase(name).length} '${name}' span(s) in it`);
      const backward = phase('backward')[0];
      // Each layer's forward and backward inside the step's (the MLP: fc1, relu1, ...).
      for (const [name, span] of [['forward', phase('forward')[0]], ['backward', backward]]) {
        const layers = span ? main.filter((s) => s.parent === span.id).map((s) => s.name) : [];
        check(layers.includes('fc1') && layers.includes('fc3'),
              `rank ${r} step ${step.step}: the ${name} span holds layers [${layers}], expected fc1 ... fc3`);
      }
      const started = buckets.filter((b) => b.ts >= step.ts && b.ts < step.ts + step.dur);
      check(started.length === bucketTracks.size && started.every((b) => within(b, step) && b.bytes > 0),
            `rank ${r} step ${step.step}: ${started.length} bucket span(s) inside it, expected ${bucketTracks.size}`);
      if (backward && started.some((b) => b.ts < backward.ts + backward.dur)) ++overlapped;
    }
    check(mine.some((s) => s.thread === 'data reader' && s.name === 'read batch'),
          `rank ${r}: no 'read batch' span on the data reader's track`);
  }
  check(overlapped > 0, 'no all-reduce bucket started before its step\'s backward ended (sync.overlap = true)');
  const rank0 = slices.filter((s) => s.rank === 0 && s.depth === 0);
  for (const name of ['checkpoint', 'evaluation'])
    check(rank0.some((s) => s.name === name), `rank 0 shows no '${name}' span`);

  console.log(`trace processor: ${processes.length} ranks, ${slices.length} spans (${bucketSpans} all-reduce buckets), ` +
              `${overlapped} step(s) with a bucket started during backward`);
  if (failures > 0) process.exit(1);
}

main().catch((e) => {
  console.error('FAIL: ' + (e.stack || e));
  process.exit(1);
});
