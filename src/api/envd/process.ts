// envd's process.Process service on top of NodeApi's process table.
import type { NodeApi, ProcessStream } from '../../cubelet/types.js';
import { ConnectError } from './connect.js';
import {
  KEEPALIVE_EVENT,
  asObject,
  parseInput,
  parsePty,
  parseSelector,
  parseSignal,
  parseStartRequest,
  processEventJson,
  processInfoJson,
  resolvePath,
} from './messages.js';
import { untilAborted, type CallInfo, type Service, type StreamSink } from './rpc.js';

/** Who a call is for: the sandbox, its node, and the user the SDK asked for (Authorization: Basic). */
export interface SandboxCall {
  node: NodeApi;
  sandboxID: string;
  user: string;
}

type Call = SandboxCall & CallInfo;

/** Pids as the SDK sees them; a tag is looked up in the process table. */
async function pidOf(call: Call, sel: unknown): Promise<number> {
  const s = parseSelector(sel);
  if (s.pid !== undefined) return s.pid;
  const found = (await call.node.listProcesses(call.sandboxID)).find((p) => p.tag === s.tag);
  if (!found) throw new ConnectError('not_found', `no process with tag ${JSON.stringify(s.tag)}`);
  return found.pid;
}

async function pipeEvents(call: Call, stream: ProcessStream, out: StreamSink): Promise<void> {
  for await (const ev of untilAborted(stream.events, call.signal)) await out.send(processEventJson(ev));
}

export const processService: Service<SandboxCall> = {
  unary: {
    async List(call) {
      const ps = await call.node.listProcesses(call.sandboxID);
      return { processes: ps.map(processInfoJson) };
    },
    async SendInput(call, msg) {
      const o = asObject(msg, 'SendInputRequest');
      await call.node.sendInput(call.sandboxID, await pidOf(call, o.process), parseInput(o.input));
      return {};
    },
    async CloseStdin(call, msg) {
      await call.node.closeStdin(call.sandboxID, await pidOf(call, asObject(msg, 'CloseStdinRequest').process));
      return {};
    },
    async SendSignal(call, msg) {
      const o = asObject(msg, 'SendSignalRequest');
      const signal = parseSignal(o.signal);
      await call.node.signalProcess(call.sandboxID, await pidOf(call, o.process), signal);
      return {};
    },
    async Update(call, msg) {
      const o = asObject(msg, 'UpdateRequest');
      if (o.pty === undefined || o.pty === null) return {}; // nothing to change
      const { cols, rows } = parsePty(o.pty, 'pty');
      await call.node.resizeProcess(call.sandboxID, await pidOf(call, o.process), cols, rows);
      return {};
    },
    async StreamInput() {
      throw new ConnectError('unimplemented', 'StreamInput (client streaming) is not supported: use SendInput');
    },
  },
  stream: {
    Start: {
      keepalive: KEEPALIVE_EVENT,
      async run(call, msg, out) {
        const r = parseStartRequest(msg);
        // Connect-Timeout-Ms is the process lifetime (as in envd): the node kills it at the deadline.
        const stream = await call.node.startProcess(call.sandboxID, {
          argv: r.argv,
          env: r.env,
          // No cwd: the node's default (the template's workdir, else the user's home).
          ...(r.cwd ? { cwd: resolvePath(r.cwd, call.user) } : {}),
          user: call.user,
          stdin: r.stdin,
          ...(r.pty ? { pty: r.pty } : {}),
          ...(r.tag ? { tag: r.tag } : {}),
          ...(call.timeoutMs !== undefined ? { timeoutMs: call.timeoutMs } : {}),
        });
        await pipeEvents(call, stream, out);
      },
    },
    Connect: {
      keepalive: KEEPALIVE_EVENT,
      async run(call, msg, out) {
        const sel = parseSelector(asObject(msg, 'ConnectRequest').process);
        await pipeEvents(call, await call.node.connectProcess(call.sandboxID, sel), out);
      },
    },
  },
};
