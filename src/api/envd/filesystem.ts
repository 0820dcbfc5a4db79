// envd's filesystem.Filesystem service on top of NodeApi's file calls.
import { setTimeout as sleep } from 'node:timers/promises';
import type { HandlerContext, ServiceImpl } from '@connectrpc/connect';
import { Code, ConnectError } from './connect.js';
import type { Filesystem } from './gen/filesystem/filesystem_pb.js';
import { entryInfo, listDepth, required, resolvePath } from './messages.js';
import { sandboxOf } from './process.js';
import { withKeepalives } from './rpc.js';
import { diffListings, listingOf, type WatchEvent } from './watch.js';

const WATCH_POLL_MS = 500;
/** Depth of a recursive watch; deeper trees are watched to this depth only. */
const WATCH_RECURSIVE_DEPTH = 16;

/** The sandbox of the call and `p` resolved for its user (`~`, relative paths). */
function target(ctx: HandlerContext, p: string, what: string) {
  const call = sandboxOf(ctx);
  return { call, path: resolvePath(required(p, what), call.user) };
}

const unsupportedWatcher = async (): Promise<never> => {
  throw new ConnectError('the polling watcher (CreateWatcher, GetWatcherEvents, RemoveWatcher) is not supported: use WatchDir', Code.Unimplemented);
};

/** 'start' once the first listing is taken (changes from then on are seen), then batches of changes. */
async function* watchEvents(ctx: HandlerContext, dir: string, depth: number): AsyncGenerator<'start' | WatchEvent[]> {
  const { call } = target(ctx, dir, 'path');
  let before = listingOf(await call.node.listDir(call.sandboxID, dir, depth));
  yield 'start';
  while (!ctx.signal.aborted) {
    await sleep(WATCH_POLL_MS, undefined, { signal: ctx.signal }).catch(() => undefined);
    if (ctx.signal.aborted) return;
    const after = listingOf(await call.node.listDir(call.sandboxID, dir, depth));
    yield diffListings(dir, before, after);
    before = after;
  }
}

export const filesystemService: ServiceImpl<typeof Filesystem> = {
  async stat(req, ctx) {
    const { call, path } = target(ctx, req.path, 'path');
    return { entry: entryInfo(await call.node.statFile(call.sandboxID, path)) };
  },
  async makeDir(req, ctx) {
    const { call, path } = target(ctx, req.path, 'path');
    if (!(await call.node.makeDir(call.sandboxID, path, call.user))) throw new ConnectError(`directory ${path} already exists`, Code.AlreadyExists);
    return { entry: entryInfo(await call.node.statFile(call.sandboxID, path)) };
  },
  async move(req, ctx) {
    const { call, path: from } = target(ctx, req.source, 'source');
    const to = resolvePath(required(req.destination, 'destination'), call.user);
    return { entry: entryInfo(await call.node.movePath(call.sandboxID, from, to)) };
  },
  async listDir(req, ctx) {
    const { call, path } = target(ctx, req.path, 'path');
    const st = await call.node.statFile(call.sandboxID, path);
    if (st.type !== 'dir') throw new ConnectError(`${path} is not a directory`, Code.InvalidArgument);
    return { entries: (await call.node.listDir(call.sandboxID, path, listDepth(req.depth))).map(entryInfo) };
  },
  async remove(req, ctx) {
    const { call, path } = target(ctx, req.path, 'path');
    await call.node.removePath(call.sandboxID, path);
    return {};
  },
  createWatcher: unsupportedWatcher,
  getWatcherEvents: unsupportedWatcher,
  removeWatcher: unsupportedWatcher,
  async *watchDir(req, ctx) {
    const { call, path: dir } = target(ctx, req.path, 'path');
    const st = await call.node.statFile(call.sandboxID, dir);
    if (st.type !== 'dir') throw new ConnectError(`${dir} is not a directory`, Code.InvalidArgument);
    const batches = withKeepalives(watchEvents(ctx, dir, req.recursive ? WATCH_RECURSIVE_DEPTH : 1), 'keepalive' as const, ctx);
    for await (const batch of batches) {
      if (batch === 'start' || batch === 'keepalive') yield { event: { case: batch, value: {} } };
      else for (const ev of batch) yield { event: { case: 'filesystem', value: ev } };
    }
  },
};
