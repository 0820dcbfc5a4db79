// envd's filesystem.Filesystem service on top of NodeApi's file calls.
import { setTimeout as sleep } from 'node:timers/promises';
import { ConnectError } from './connect.js';
import { asObject, entryInfo, parseDepth, requiredStr, resolvePath } from './messages.js';
import type { SandboxCall } from './process.js';
import type { Service } from './rpc.js';
import { diffListings, listingOf } from './watch.js';

const WATCH_POLL_MS = 500;
/** Depth of a recursive watch; deeper trees are watched to this depth only. */
const WATCH_RECURSIVE_DEPTH = 16;

const pathArg = (msg: unknown, what: string, key = 'path'): string => requiredStr(asObject(msg, what), key, what);

export const filesystemService: Service<SandboxCall> = {
  unary: {
    async Stat(call, msg) {
      return { entry: entryInfo(await call.node.statFile(call.sandboxID, resolvePath(pathArg(msg, 'StatRequest'), call.user))) };
    },
    async MakeDir(call, msg) {
      const p = resolvePath(pathArg(msg, 'MakeDirRequest'), call.user);
      if (!(await call.node.makeDir(call.sandboxID, p, call.user))) throw new ConnectError('already_exists', `directory ${p} already exists`);
      return { entry: entryInfo(await call.node.statFile(call.sandboxID, p)) };
    },
    async Move(call, msg) {
      const from = resolvePath(pathArg(msg, 'MoveRequest', 'source'), call.user);
      const to = resolvePath(pathArg(msg, 'MoveRequest', 'destination'), call.user);
      return { entry: entryInfo(await call.node.movePath(call.sandboxID, from, to)) };
    },
    async ListDir(call, msg) {
      const o = asObject(msg, 'ListDirRequest');
      const p = resolvePath(requiredStr(o, 'path', 'ListDirRequest'), call.user);
      const st = await call.node.statFile(call.sandboxID, p);
      if (st.type !== 'dir') throw new ConnectError('invalid_argument', `${p} is not a directory`);
      const entries = await call.node.listDir(call.sandboxID, p, parseDepth(o.depth));
      return { entries: entries.map(entryInfo) };
    },
    async Remove(call, msg) {
      await call.node.removePath(call.sandboxID, resolvePath(pathArg(msg, 'RemoveRequest'), call.user));
      return {};
    },
    async CreateWatcher() {
      throw new ConnectError('unimplemented', 'CreateWatcher is not supported: use watchDir');
    },
    async GetWatcherEvents() {
      throw new ConnectError('unimplemented', 'GetWatcherEvents is not supported: use watchDir');
    },
    async RemoveWatcher() {
      throw new ConnectError('unimplemented', 'RemoveWatcher is not supported: use watchDir');
    },
  },
  stream: {
    WatchDir: {
      keepalive: { keepalive: {} },
      async run(call, msg, out) {
        const o = asObject(msg, 'WatchDirRequest');
        const dir = resolvePath(requiredStr(o, 'path', 'WatchDirRequest'), call.user);
        const depth = o.recursive === true ? WATCH_RECURSIVE_DEPTH : 1;
        const st = await call.node.statFile(call.sandboxID, dir);
        if (st.type !== 'dir') throw new ConnectError('invalid_argument', `${dir} is not a directory`);
        let before = listingOf(await call.node.listDir(call.sandboxID, dir, depth));
        await out.send({ start: {} });
        while (!call.signal.aborted) {
          await sleep(WATCH_POLL_MS, undefined, { signal: call.signal }).catch(() => undefined);
          if (call.signal.aborted) return;
          const after = listingOf(await call.node.listDir(call.sandboxID, dir, depth));
          for (const ev of diffListings(dir, before, after)) await out.send({ filesystem: ev });
          before = after;
        }
      },
    },
  },
};
