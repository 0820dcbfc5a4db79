// envd's filesystem.Filesystem service on top of NodeApi's file calls.
import { join } from 'node:path/posix';
import type { HandlerContext, ServiceImpl } from '@connectrpc/connect';
import { Code, ConnectError } from './connect.js';
import type { FileStat, FsChange } from '../../runtime/types.js';
import { EventType, type Filesystem } from './gen/filesystem/filesystem_pb.js';
import { entryInfo, listDepth, required, resolvePath, type EntryInfoInit } from './messages.js';
import { sandboxOf, type SandboxCall } from './process.js';
import { withKeepalives } from './rpc.js';

/** envd's event type for each change inotify reports (fsnotify's mapping, as envd's). */
const EVENT_TYPES: Record<FsChange['type'], EventType> = {
  create: EventType.CREATE,
  write: EventType.WRITE,
  remove: EventType.REMOVE,
  rename: EventType.RENAME,
  chmod: EventType.CHMOD,
};

/** The sandbox of the call and `p` resolved for its user (`~`, relative paths). */
function target(ctx: HandlerContext, p: string, what: string) {
  const call = sandboxOf(ctx);
  return { call, path: resolvePath(required(p, what), call.user) };
}

const unsupportedWatcher = async (): Promise<never> => {
  throw new ConnectError('the polling watcher (CreateWatcher, GetWatcherEvents, RemoveWatcher) is not supported: use WatchDir', Code.Unimplemented);
};

/** Entries with their metadata (one helper job for all of them, only in sandboxes that have some). */
async function entries(call: SandboxCall, stats: FileStat[]): Promise<EntryInfoInit[]> {
  const meta = await call.node.readMetadata(call.sandboxID, stats.map((s) => s.path), call.user);
  return stats.map((s, i) => entryInfo(s, meta[i]));
}

async function entry(call: SandboxCall, path: string): Promise<EntryInfoInit> {
  return (await entries(call, [await call.node.statFile(call.sandboxID, path)]))[0]!;
}

/** The entry a change names, when asked for and it still exists (a short-lived file may be gone). */
async function entryOf(call: SandboxCall, dir: string, c: FsChange): Promise<EntryInfoInit | undefined> {
  if (c.type === 'remove' || c.type === 'rename') return undefined;
  return entry(call, join(dir, c.name)).catch(() => undefined);
}

export const filesystemService: ServiceImpl<typeof Filesystem> = {
  async stat(req, ctx) {
    const { call, path } = target(ctx, req.path, 'path');
    return { entry: await entry(call, path) };
  },
  async makeDir(req, ctx) {
    const { call, path } = target(ctx, req.path, 'path');
    if (!(await call.node.makeDir(call.sandboxID, path, call.user))) throw new ConnectError(`directory ${path} already exists`, Code.AlreadyExists);
    return { entry: await entry(call, path) };
  },
  async move(req, ctx) {
    const { call, path: from } = target(ctx, req.source, 'source');
    const to = resolvePath(required(req.destination, 'destination'), call.user);
    return { entry: (await entries(call, [await call.node.movePath(call.sandboxID, from, to)]))[0] };
  },
  async listDir(req, ctx) {
    const { call, path } = target(ctx, req.path, 'path');
    const st = await call.node.statFile(call.sandboxID, path);
    if (st.type !== 'dir') throw new ConnectError(`${path} is not a directory`, Code.InvalidArgument);
    return { entries: await entries(call, await call.node.listDir(call.sandboxID, path, listDepth(req.depth))) };
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
    // allowNetworkMounts needs nothing here: sandboxes mount no network filesystems.
    const changes = await call.node.watchDir(call.sandboxID, { path: dir, recursive: req.recursive, user: call.user });
    yield { event: { case: 'start', value: {} } };
    for await (const c of withKeepalives(changes, 'keepalive' as const, ctx)) {
      if (c === 'keepalive') {
        yield { event: { case: 'keepalive', value: {} } };
        continue;
      }
      const entry = req.includeEntry ? await entryOf(call, dir, c) : undefined;
      yield { event: { case: 'filesystem', value: { name: c.name, type: EVENT_TYPES[c.type], ...(entry ? { entry } : {}) } } };
    }
  },
};
