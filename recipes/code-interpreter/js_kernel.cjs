// The JavaScript context of the code interpreter: one Node process (Debian's nodejs) per context,
// started by server.py, evaluating each cell in one vm context so that declarations persist.
//
// Cells arrive on stdin as JSON lines {code, env}. console.log and process.stdout go to this
// process's stdout (a pipe, which Node writes synchronously on Linux), so server.py streams them as
// they come. Per cell, one JSON line on fd 3 (the status channel) says how it ended: {result} with
// the inspected value of its last expression, or {error} with name, value and traceback.
'use strict';
const fs = require('node:fs');
const { createRequire } = require('node:module');
const readline = require('node:readline');
const util = require('node:util');
const vm = require('node:vm');

const STATUS_FD = Number(process.argv[2]);
// The context has its own builtins (Array, JSON...); Node's globals (console, process, Buffer,
// setTimeout, fetch...) are lent from this one, and require resolves from the context's cwd.
const sandbox = vm.createContext({ require: createRequire(`${process.cwd()}/`) });
const builtins = new Set(vm.runInContext('Object.getOwnPropertyNames(globalThis)', sandbox));
for (const name of Object.getOwnPropertyNames(globalThis)) {
  if (!builtins.has(name)) Object.defineProperty(sandbox, name, Object.getOwnPropertyDescriptor(globalThis, name));
}
sandbox.console = console; // the context's own console writes nowhere
sandbox.global = sandbox;
let interrupt = null; // rejects the cell awaiting a promise when SIGINT comes

// SIGINT interrupts the cell: breakOnSigint stops synchronous code, `interrupt` a pending promise.
// Without a listener Node would exit on it instead.
process.on('SIGINT', () => interrupt?.(Object.assign(new Error('Script execution was interrupted by `SIGINT`'), { name: 'Interrupted' })));

function report(status) {
  fs.writeSync(STATUS_FD, JSON.stringify(status) + '\n');
}

/** The stack down to the cell: the frames of this runner below it say nothing about the user's code. */
function traceback(stack) {
  const lines = String(stack ?? '').split('\n');
  const ours = lines.findIndex((l) => l.includes('(node:vm:') || l.includes(__filename));
  return (ours < 0 ? lines : lines.slice(0, ours)).join('\n');
}

function errorStatus(e) {
  if (e && typeof e === 'object' && 'stack' in e) {
    return { error: { name: String(e.name ?? 'Error'), value: String(e.message ?? ''), traceback: traceback(e.stack) } };
  }
  return { error: { name: 'Error', value: util.inspect(e), traceback: '' } }; // `throw 'text'`
}

async function runCell(code) {
  let value = vm.runInContext(code, sandbox, { filename: 'cell.js', breakOnSigint: true });
  // A cell whose value is a promise shows what it resolves to (there is no top-level await).
  if (value && typeof value.then === 'function') {
    value = await Promise.race([value, new Promise((_, reject) => (interrupt = reject))]);
  }
  return value === undefined ? {} : { result: util.inspect(value) };
}

async function main() {
  for await (const line of readline.createInterface({ input: process.stdin, crlfDelay: Infinity })) {
    const { code, env } = JSON.parse(line);
    const saved = Object.fromEntries(Object.keys(env).map((k) => [k, process.env[k]]));
    Object.assign(process.env, env); // for this cell only, as in the Python context
    let status;
    try {
      status = await runCell(code);
    } catch (e) {
      status = errorStatus(e);
    } finally {
      interrupt = null;
      for (const [k, v] of Object.entries(saved)) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    }
    report(status);
  }
}

main();
