// The SIMULATION runtime's file system: one in-memory tree per sandbox, with the same path rules
// and errors as the ns runtime's files (relative paths start at /home/user, `..` is refused,
// missing parents are created, owners follow `user`). No symlinks: nothing in a simulated
// sandbox can make one.
import { Readable } from 'node:stream';
import { CubeError } from '../../errors.js';
import { sandboxPath, splitSandboxPath } from '../ns/files.js';
import { SANDBOX_USERS, sandboxUser } from '../../templates/store.js';
import type { FileStat, SandboxFiles, SandboxHandle } from '../types.js';

interface Node {
  type: 'file' | 'dir';
  data: Buffer;
  mode: number;
  uid: number;
  gid: number;
  mtime: Date;
}

/** path ('/a/b') -> node; '/' always exists. */
export type SimTree = Map<string, Node>;

/** A fresh tree with the directories a template shows: /, /tmp, /root, /home/user. */
export function newTree(): SimTree {
  const t: SimTree = new Map();
  const dir = (path: string, owner: { uid: number; gid: number }, mode = 0o755) =>
    t.set(path, { type: 'dir', data: Buffer.alloc(0), mode, uid: owner.uid, gid: owner.gid, mtime: new Date() });
  dir('/', SANDBOX_USERS.root);
  dir('/tmp', SANDBOX_USERS.root, 0o1777);
  dir('/root', SANDBOX_USERS.root, 0o700);
  dir('/home', SANDBOX_USERS.root);
  dir('/home/user', SANDBOX_USERS.user);
  return t;
}

/** Bytes a tree's files hold (the simulated memory use counts them like a tmpfs). */
export function treeBytes(t: SimTree): number {
  let n = 0;
  for (const node of t.values()) n += node.data.length;
  return n;
}

const parentOf = (path: string) => (path.lastIndexOf('/') <= 0 ? '/' : path.slice(0, path.lastIndexOf('/')));

function statOf(path: string, n: Node): FileStat {
  return {
    name: path === '/' ? '/' : path.slice(path.lastIndexOf('/') + 1),
    path,
    type: n.type,
    size: n.data.length,
    mode: n.mode,
    uid: n.uid,
    gid: n.gid,
    mtime: n.mtime,
  };
}

export class SimFiles implements SandboxFiles {
  /** `treeOf` answers 130404 for a sandbox that does not exist. */
  constructor(private readonly treeOf: (h: SandboxHandle) => SimTree) {}

  private existing(h: SandboxHandle, path: string): { tree: SimTree; path: string; node: Node } {
    const tree = this.treeOf(h);
    const p = sandboxPath(splitSandboxPath(path));
    const node = tree.get(p);
    if (!node) throw new CubeError('NOT_FOUND', `'${path}' not found`);
    return { tree, path: p, node };
  }

  /** Creates each missing directory on the way to `path` (inclusive); refuses a file in the way. */
  private makeDirs(tree: SimTree, path: string, owner: { uid: number; gid: number }): void {
    const comps = path.split('/').filter(Boolean);
    for (let i = 1; i <= comps.length; i++) {
      const p = '/' + comps.slice(0, i).join('/');
      const n = tree.get(p);
      if (n?.type === 'file') throw new CubeError('BAD_REQUEST', `'${p}' is not a directory`);
      if (!n) tree.set(p, { type: 'dir', data: Buffer.alloc(0), mode: 0o755, uid: owner.uid, gid: owner.gid, mtime: new Date() });
    }
  }

  async stat(h: SandboxHandle, path: string): Promise<FileStat> {
    const e = this.existing(h, path);
    return statOf(e.path, e.node);
  }

  async list(h: SandboxHandle, path: string, depth = 1): Promise<FileStat[]> {
    const { tree, path: dir, node } = this.existing(h, path);
    if (node.type !== 'dir') throw new CubeError('BAD_REQUEST', `'${path}' is not a directory`);
    const base = dir === '/' ? 0 : dir.split('/').length - 1;
    const prefix = dir === '/' ? '/' : `${dir}/`;
    return [...tree.entries()]
      .filter(([p]) => p !== dir && p.startsWith(prefix) && p.split('/').length - 1 - base <= depth)
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([p, n]) => statOf(p, n));
  }

  async read(h: SandboxHandle, path: string): Promise<Readable> {
    const { node } = this.existing(h, path);
    if (node.type !== 'file') throw new CubeError('BAD_REQUEST', `'${path}' is not a regular file`);
    return Readable.from([node.data]);
  }

  async write(h: SandboxHandle, path: string, data: Readable | Buffer, user?: string): Promise<FileStat> {
    const owner = sandboxUser(user);
    const tree = this.treeOf(h);
    const p = sandboxPath(splitSandboxPath(path));
    if (p === '/') throw new CubeError('BAD_REQUEST', `cannot write to '/'`);
    const old = tree.get(p);
    if (old && old.type !== 'file') throw new CubeError('BAD_REQUEST', `'${path}' is not a regular file`);
    this.makeDirs(tree, parentOf(p), owner);
    const bytes = Buffer.isBuffer(data)
      ? data
      : Buffer.concat((await data.toArray()).map((c: Buffer | string) => (typeof c === 'string' ? Buffer.from(c) : c)));
    const node: Node = {
      type: 'file',
      data: Buffer.from(bytes),
      mode: old?.mode ?? 0o644,
      uid: old?.uid ?? owner.uid,
      gid: old?.gid ?? owner.gid,
      mtime: new Date(),
    };
    tree.set(p, node);
    return statOf(p, node);
  }

  async mkdir(h: SandboxHandle, path: string, user?: string): Promise<boolean> {
    const tree = this.treeOf(h);
    const p = sandboxPath(splitSandboxPath(path));
    const n = tree.get(p);
    if (n) {
      if (n.type === 'dir') return false;
      throw new CubeError('CONFLICT', `'${path}' exists and is not a directory`);
    }
    this.makeDirs(tree, p, sandboxUser(user));
    return true;
  }

  async remove(h: SandboxHandle, path: string): Promise<void> {
    const { tree, path: p } = this.existing(h, path);
    if (p === '/') throw new CubeError('BAD_REQUEST', `cannot remove '/'`);
    for (const k of [...tree.keys()]) if (k === p || k.startsWith(`${p}/`)) tree.delete(k);
  }

  async move(h: SandboxHandle, from: string, to: string): Promise<FileStat> {
    const src = this.existing(h, from);
    if (src.path === '/') throw new CubeError('BAD_REQUEST', `cannot move '/'`);
    const dst = sandboxPath(splitSandboxPath(to));
    if (dst === '/') throw new CubeError('BAD_REQUEST', `cannot move onto '/'`);
    if (dst.startsWith(`${src.path}/`)) throw new CubeError('BAD_REQUEST', `cannot move '${from}' into itself`);
    const { tree } = src;
    const existing = tree.get(dst);
    if (existing?.type === 'dir' && [...tree.keys()].some((k) => k.startsWith(`${dst}/`))) throw new CubeError('CONFLICT', `'${to}' is not empty`);
    this.makeDirs(tree, parentOf(dst), src.node);
    for (const [k, n] of [...tree.entries()]) {
      if (k !== src.path && !k.startsWith(`${src.path}/`)) continue;
      tree.delete(k);
      tree.set(dst + k.slice(src.path.length), n);
    }
    return statOf(dst, tree.get(dst)!);
  }
}
