// envd's process.Process service on top of NodeApi's process table.
import { createContextKey, type HandlerContext, type ServiceImpl } from '@connectrpc/connect';
import type { NodeApi, ProcessEvent as ProcessEventOf, ProcessStream } from '../../cubelet/types.js';
import { Code, ConnectError } from './connect.js';
import type { Process } from './gen/process/process_pb.js';
import {
  KEEPALIVE_EVENT,
  inputBytes,
  processEvent,
  processInfo,
  ptySize,
  resolvePath,
  selector,
  signalName,
  startOptions,
  userFromAuthorization,
} from './messages.js';
import { callOf, withKeepalives } from './rpc.js';

/** Who a call is for: the sandbox, its node, and the user the SDK asked for (Authorization: Basic). */
export interface SandboxCall {
  node: NodeApi;
  sandboxID: string;
  user: string;
}

/** The sandbox a Connect call is for, bound by the envd entry point. */
export const SANDBOX = createContextKey<Omit<SandboxCall, 'user'> | undefined>(undefined);

export function sandboxOf(ctx: HandlerContext): SandboxCall {
  return { ...callOf(ctx, SANDBOX), user: userFromAuthorization(ctx.requestHeader.get('authorization') ?? undefined) };
}

/** Pids as the SDK sees them; a tag is looked up in the process table. */
async function pidOf(call: SandboxCall, sel: ReturnType<typeof selector>): Promise<number> {
  if ('pid' in sel) return sel.pid;
  const found = (await call.node.listProcesses(call.sandboxID)).find((p) => p.tag === sel.tag);
  if (!found) throw new ConnectError(`no process with tag ${JSON.stringify(sel.tag)}`, Code.NotFound);
  return found.pid;
}

/**
 * `timeoutMs`: the Start call's own deadline. Its process killed for it (the node's timer can fire
 * a moment before Connect's) ends the stream with `deadline_exceeded`, as envd ends it, not with
 * an end event: the SDKs raise their TimeoutError for that code only.
 */
async function* responses(events: AsyncIterable<ProcessEventOf>, timeoutMs?: number): AsyncGenerator<{ event: ReturnType<typeof processEvent> }> {
  for await (const ev of events) {
    if (ev.type === 'end' && ev.timedOut && timeoutMs !== undefined)
      throw new ConnectError(`the command ran past its timeout of ${timeoutMs} ms and was killed`, Code.DeadlineExceeded);
    yield { event: processEvent(ev) };
  }
}

/** A process's events as Start/Connect responses, with keepalives while it is quiet. */
const stream = (ctx: HandlerContext, ps: ProcessStream, timeoutMs?: number) => withKeepalives(responses(ps.events, timeoutMs), { event: KEEPALIVE_EVENT }, ctx);

export const processService: ServiceImpl<typeof Process> = {
  async list(_req, ctx) {
    const call = sandboxOf(ctx);
    return { processes: (await call.node.listProcesses(call.sandboxID)).map(processInfo) };
  },
  async sendInput(req, ctx) {
    const call = sandboxOf(ctx);
    await call.node.sendInput(call.sandboxID, await pidOf(call, selector(req.process)), inputBytes(req.input));
    return {};
  },
  async streamInput(reqs, ctx) {
    const call = sandboxOf(ctx);
    let pid: number | undefined;
    for await (const r of reqs) {
      if (r.event.case === 'start') pid = await pidOf(call, selector(r.event.value.process));
      else if (r.event.case === 'data') {
        if (pid === undefined) throw new ConnectError('StreamInput: the start event (which process) must come first', Code.FailedPrecondition);
        await call.node.sendInput(call.sandboxID, pid, inputBytes(r.event.value.input));
      }
    }
    return {};
  },
  async closeStdin(req, ctx) {
    const call = sandboxOf(ctx);
    await call.node.closeStdin(call.sandboxID, await pidOf(call, selector(req.process)));
    return {};
  },
  async sendSignal(req, ctx) {
    const call = sandboxOf(ctx);
    await call.node.signalProcess(call.sandboxID, await pidOf(call, selector(req.process)), signalName(req.signal));
    return {};
  },
  async update(req, ctx) {
    const call = sandboxOf(ctx);
    if (!req.pty) return {}; // nothing to change
    const { cols, rows } = ptySize(req.pty, 'pty');
    await call.node.resizeProcess(call.sandboxID, await pidOf(call, selector(req.process)), cols, rows);
    return {};
  },
  async *start(req, ctx) {
    const call = sandboxOf(ctx);
    const r = startOptions(req);
    const timeoutMs = ctx.timeoutMs();
    // Connect-Timeout-Ms is the process lifetime (as in envd): the node kills it at the deadline.
    const ps = await call.node.startProcess(call.sandboxID, {
      argv: r.argv,
      env: r.env,
      // No cwd: the node's default (the template's workdir, else the user's home).
      ...(r.cwd ? { cwd: resolvePath(r.cwd, call.user) } : {}),
      user: call.user,
      stdin: r.stdin,
      ...(r.pty ? { pty: r.pty } : {}),
      ...(r.tag ? { tag: r.tag } : {}),
      ...(timeoutMs !== undefined ? { timeoutMs } : {}),
    });
    yield* stream(ctx, ps, timeoutMs);
  },
  async *connect(req, ctx) {
    const call = sandboxOf(ctx);
    yield* stream(ctx, await call.node.connectProcess(call.sandboxID, selector(req.process)));
  },
};
