import type { Readable } from 'node:stream';
import { CubeError } from '../../errors.js';
import { sandboxUser } from '../../templates/store.js';
import { sandboxPath, splitSandboxPath } from '../ns/files.js';
import type { FileAccess, FileStat, SandboxFiles, SandboxHandle } from '../types.js';
import { type AgentConnection, T, agentActsAsUser, asField, fields, parseStats } from './protocol.js';

/**
 * The files API over the guest agent; paths normalised as for the ns runtime. A request made for
 * a user other than root with `as.permissions` carries that user's ids, and the agent runs it
 * with them (native/cube-agent.c take_identity): the guest kernel decides, as for the user's own
 * process. An agent from before that (a sandbox or kept snapshot of an older cubed) is refused
 * such requests (409) rather than acting as guest root for the user.
 */
export class MicrovmFiles implements SandboxFiles {
  private readonly actsAsUser = new WeakMap<AgentConnection, Promise<boolean>>();

  constructor(private readonly agent: (h: SandboxHandle) => Promise<AgentConnection>) {}

  private path(p: string): string {
    return sandboxPath(splitSandboxPath(p));
  }

  /** The agent, and the identity field its request takes for `user` (none for root or without `as.permissions`). */
  private async as(h: SandboxHandle, user: string | undefined, as: FileAccess | undefined): Promise<{ conn: AgentConnection; id: string[] }> {
    const conn = await this.agent(h);
    const u = sandboxUser(user);
    if (!as?.permissions || u.uid === 0) return { conn, id: [] };
    let acts = this.actsAsUser.get(conn);
    if (!acts) this.actsAsUser.set(conn, (acts = agentActsAsUser(conn)));
    if (!(await acts)) {
      throw new CubeError(
        'CONFLICT',
        `sandbox ${h.sandboxID}'s guest agent is from an older cubed and cannot act as '${user ?? 'user'}': use the files API as root, or a new sandbox`,
      );
    }
    return { conn, id: [asField(u.uid, u.gid)] };
  }

  async stat(h: SandboxHandle, path: string, user?: string, as?: FileAccess): Promise<FileStat> {
    const { conn, id } = await this.as(h, user, as);
    const st = parseStats(await conn.request(T.STAT, fields(this.path(path), ...id)))[0];
    if (!st) throw new CubeError('INTERNAL', `no stat of ${path}`);
    return st;
  }

  async list(h: SandboxHandle, path: string, depth = 1, user?: string, as?: FileAccess): Promise<FileStat[]> {
    const { conn, id } = await this.as(h, user, as);
    return parseStats(await conn.request(T.LIST, fields(this.path(path), depth, ...id)));
  }

  async read(h: SandboxHandle, path: string, user?: string, as?: FileAccess): Promise<Readable> {
    const { conn, id } = await this.as(h, user, as);
    return conn.read(this.path(path), id[0]);
  }

  async write(h: SandboxHandle, path: string, data: Readable | Buffer, user?: string, _mode?: number, as?: FileAccess): Promise<FileStat> {
    const u = sandboxUser(user);
    const { conn, id } = await this.as(h, user, as);
    return conn.write(this.path(path), u.uid, u.gid, data, id[0]);
  }

  async mkdir(h: SandboxHandle, path: string, user?: string, as?: FileAccess): Promise<boolean> {
    const u = sandboxUser(user);
    const { conn, id } = await this.as(h, user, as);
    const r = await conn.request(T.MKDIR, fields(this.path(path), u.uid, u.gid, ...id));
    return r.toString().startsWith('1');
  }

  async remove(h: SandboxHandle, path: string, user?: string, as?: FileAccess): Promise<void> {
    const { conn, id } = await this.as(h, user, as);
    await conn.request(T.REMOVE, fields(this.path(path), ...id));
  }

  async move(h: SandboxHandle, from: string, to: string, user?: string, as?: FileAccess): Promise<FileStat> {
    const { conn, id } = await this.as(h, user, as);
    const st = parseStats(await conn.request(T.RENAME, fields(this.path(from), this.path(to), ...id)))[0];
    if (!st) throw new CubeError('INTERNAL', `no stat of ${to}`);
    return st;
  }
}
