// GET /admin/v1/watch: server-sent events, a full snapshot then one message per delta.
// Deltas that arrive while the snapshot is being built are queued behind it, so nothing is
// lost between the two. A consumer that stops reading is disconnected once its unsent
// backlog passes the cap: it reconnects and starts from a fresh snapshot, and the daemon's
// memory stays bounded.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { WatchMessage } from '../../model/watch.js';
import type { ApiContext } from '../context.js';
import { watchWire } from './wire.js';

const PING_MS = 15_000;
const MAX_BACKLOG_BYTES = 4 << 20;

/** One message as the wire writes it (src/api/types.ts WatchMessage). */
export function sseFrame(m: WatchMessage): string {
  return `event: ${m.type}\ndata: ${JSON.stringify(watchWire(m))}\n\n`;
}

export async function serveWatch(req: IncomingMessage, res: ServerResponse, ctx: ApiContext): Promise<void> {
  const pending: WatchMessage[] = [];
  let ready = false;
  let closed = false;
  const write = (m: WatchMessage) => {
    if (closed) return;
    res.write(sseFrame(m));
    if (res.writableLength > MAX_BACKLOG_BYTES) {
      ctx.log.warn({ backlog: res.writableLength }, 'watch consumer too slow: disconnected');
      close();
    }
  };
  const unsubscribe = ctx.cp.watch((m) => (ready ? write(m) : pending.push(m)));
  const ping = setInterval(() => !closed && res.write(': ping\n\n'), PING_MS);
  const close = () => {
    if (closed) return;
    closed = true;
    unsubscribe();
    clearInterval(ping);
    res.destroy();
  };
  req.on('close', close);
  res.on('error', close);
  try {
    const snapshot = await ctx.cp.snapshot();
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive', 'x-accel-buffering': 'no' });
    write({ type: 'snapshot', snapshot });
    for (const m of pending.splice(0)) write(m);
    ready = true;
  } catch (e) {
    unsubscribe();
    clearInterval(ping);
    throw e;
  }
}
