// envd's filesystem.Filesystem service on top of NodeApi's file calls.
import { join } from 'node:path/posix';
import type { MessageInitShape } from '@bufbuild/protobuf';
import type { HandlerContext, ServiceImpl } from '@connectrpc/connect';
import { stoppable } from '../../runtime/stoppable.js';
import type { FileStat, FsChange } from '../../runtime/types.js';
import { Code, ConnectError } from './connect.js';
import { EventType, type Filesystem, type FilesystemEventSchema } from './gen/filesystem/filesystem_pb.js';
import { entryInfo, listDepth, required, resolvePath, type EntryInfoInit } from './messages.js';
import { sandboxOf, type SandboxCall } from './process.js';
import { withKeepalives } from './rpc.js';
import { Watchers } from './watchers.js';

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

type EventInit = MessageInitShape<typeof FilesystemEventSchema>;

/** A directory's changes as envd's FilesystemEvents, with their entries when asked for. */
async function* events(call: SandboxCall, dir: string, changes: AsyncIterable<FsChange>, includeEntry: boolean): AsyncGenerator<EventInit> {
  for await (const c of changes) {
    const entry = includeEntry ? await entryOf(call, dir, c) : undefined;
    yield { name: c.name, type: EVENT_TYPES[c.type], ...(entry ? { entry } : {}) };
  }
}

/** The watch a WatchDir or CreateWatcher asks for, set (changes from now on are seen). */
async function watch(ctx: HandlerContext, req: { path: string; recursive: boolean; includeEntry: boolean }) {
  const { call, path: dir } = target(ctx, req.path, 'path');
  // allowNetworkMounts needs nothing here: sandboxes mount no network filesystems.
  const changes = await call.node.watchDir(call.sandboxID, { path: dir, recursive: req.recursive, user: call.user });
  const it = changes[Symbol.asyncIterator]();
  // Ending the events ends the watch at once (return() goes to the watch, not queued behind a change).
  return {
    call,
    events: stoppable(events(call, dir, { [Symbol.asyncIterator]: () => it }, req.includeEntry)[Symbol.asyncIterator](), () => void it.return?.()),
  };
}

const watchers = new Watchers<EventInit>();
// Forgotten watchers go even when no new one is made (which sweeps too).
setInterval(() => watchers.sweep(), 60_000).unref();

/** Entries with their metadata (one helper job for all of them, only in sandboxes that have some). */
async function entries(call: SandboxCall, stats: FileStat[]): Promise<EntryInfoInit[]> {
  const meta = await call.node.readMetadata(
    call.sandboxID,
    stats.map((s) => s.path),
    call.user,
  );
  return stats.map((s, i) => entryInfo(s, meta[i]));
}

async function entry(call: SandboxCall, path: string): Promise<EntryInfoInit> {
  return (await entries(call, [await call.node.statFile(call.sandboxID, path, call.user)]))[0]!;
}

/** The entry a change names, when asked for and it still exists (a short-lived file may be gone). */
async function entryOf(call: SandboxCall, dir: string, c: FsChange): Promise<EntryInfoInit | undefined> {
  if (c.type === 'remove' || c.type === 'rename') return undefined;
  // Gone by the time it is looked at (a short-lived file): the change is sent without its entry.
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
    return { entry: (await entries(call, [await call.node.movePath(call.sandboxID, from, to, call.user)]))[0] };
  },
  async listDir(req, ctx) {
    const { call, path } = target(ctx, req.path, 'path');
    const st = await call.node.statFile(call.sandboxID, path, call.user);
    if (st.type !== 'dir') throw new ConnectError(`${path} is not a directory`, Code.InvalidArgument);
    return { entries: await entries(call, await call.node.listDir(call.sandboxID, path, listDepth(req.depth), call.user)) };
  },
  async remove(req, ctx) {
    const { call, path } = target(ctx, req.path, 'path');
    await call.node.removePath(call.sandboxID, path, call.user);
    return {};
  },
  async createWatcher(req, ctx) {
    const { call, events: evs } = await watch(ctx, req);
    return { watcherId: watchers.add(call.sandboxID, evs) };
  },
  async getWatcherEvents(req, ctx) {
    return { events: watchers.take(sandboxOf(ctx).sandboxID, req.watcherId) };
  },
  async removeWatcher(req, ctx) {
    watchers.remove(sandboxOf(ctx).sandboxID, req.watcherId);
    return {};
  },
  async *watchDir(req, ctx) {
    const { events: evs } = await watch(ctx, req);
    yield { event: { case: 'start', value: {} } };
    for await (const e of withKeepalives(evs, 'keepalive' as const, ctx)) {
      yield e === 'keepalive' ? { event: { case: 'keepalive', value: {} } } : { event: { case: 'filesystem', value: e } };
    }
  },
};
