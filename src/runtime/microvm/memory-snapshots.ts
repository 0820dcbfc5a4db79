// Memory snapshots: per VM shape (kernel, initrd, template image, cpus, memory, disk), a guest
// booted once and saved, whose RAM file and device state later creates restore as copy-on-write
// clones instead of booting (design.md §4).
import { createHash } from 'node:crypto';
import { existsSync, statSync } from 'node:fs';
import { mkdir, rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from 'pino';
import type { HostIdRanges } from '../ns/ids.js';
import { CONSOLE_SOCKET, type ConsoleLog, consoleTail } from './console.js';
import { overlayDisk } from './images.js';
import { AgentConnection, T } from './protocol.js';
import { withQmp } from './qmp.js';
import { JAIL, type VmShape, killPid, launchQemu, migrationSocket, qemuArgs, saveState } from './qemu.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Waits for `pid` to end, then kills it (a QEMU past `timeoutMs`). */
export async function waitGone(pid: number, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (existsSync(`/proc/${pid}`) && Date.now() < deadline) await sleep(10);
  killPid(pid);
}

export class MemorySnapshots {
  /** Memory snapshots by shape key: made or being made. */
  private readonly made = new Map<string, Promise<string>>();

  constructor(
    private readonly o: {
      dataDir: string;
      ids: HostIdRanges;
      bootTimeoutMs: number;
      openConsole: (id: string, dir: string) => ConsoleLog;
      closeConsole: (id: string) => void;
      log?: Logger;
    },
  ) {}

  /**
   * The memory snapshot of a VM of this shape, booted and saved on first use (concurrent creates
   * share the one boot): guest RAM in a file the clones map privately, and the device state,
   * which with x-ignore-shared holds no RAM (57 KB, saved in 25 ms: runtime-probe.md §6.4).
   * Undefined (cold boot) when it cannot be made; the reason is logged.
   */
  get(shape: VmShape, blank: string, diskGiB: number): Promise<string | undefined> {
    const stamp = [shape.kernel, shape.initrd].map((f) => statSync(f).mtimeMs).join(':');
    const key = createHash('sha256')
      .update(JSON.stringify({ ...shape, diskGiB, stamp }))
      .digest('hex')
      .slice(0, 16);
    const final = join(this.o.dataDir, 'microvm', 'snapshots', key);
    let p = this.made.get(key);
    if (!p) {
      p = existsSync(join(final, 'state')) ? Promise.resolve(final) : this.makeSnapshot(shape, blank, final);
      this.made.set(key, p);
      p.catch(() => undefined); // not unhandled while nobody waits: every awaiter gets the error
    }
    return p.catch((e: unknown) => {
      this.made.delete(key);
      this.o.log?.warn({ err: e, key }, 'memory snapshot could not be made: this create boots cold');
      return undefined;
    });
  }

  private async makeSnapshot(shape: VmShape, blank: string, final: string): Promise<string> {
    const t0 = performance.now();
    const dir = `${final}.${process.pid}.tmp`;
    await rm(dir, { recursive: true, force: true });
    await mkdir(dir, { recursive: true });
    let pid = 0;
    const idBase = this.o.ids.take();
    try {
      await overlayDisk(blank, join(dir, 'disk.qcow2'), 'raw');
      const args = qemuArgs({
        ...shape,
        id: 'snapshot',
        dir,
        disk: join(dir, 'disk.qcow2'),
        net: 'hub',
        uid: idBase,
        ram: { path: join(dir, 'ram'), shared: true },
      });
      pid = await launchQemu(dir, args, {
        procs: [],
        files: { image: shape.image, disk: join(dir, 'disk.qcow2') },
        console: this.o.openConsole(`snapshot-${process.pid}`, dir),
      });
      const conn = await AgentConnection.open(join(dir, 'a.sock'));
      try {
        await conn.request(T.PING, Buffer.from('boot'), this.o.bootTimeoutMs).catch((e: unknown) => {
          throw new Error(`snapshot source did not come up: ${(e as Error).message}; console: ${consoleTail(dir, 15)}`);
        });
      } finally {
        conn.close();
      }
      await withQmp(join(dir, 'q.sock'), async (q) => {
        await q.run('stop');
        await saveState(q, join(dir, 'state'), { ...migrationSocket(dir, args), uid: idBase });
        // The state is saved; a QEMU that does not take 'quit' is killed with its cgroup below.
        await q.run('quit').catch(() => undefined);
      });
      await waitGone(pid);
      this.o.closeConsole(`snapshot-${process.pid}`);
      // What a chrooted QEMU could not unlink at its exit.
      await Promise.all([JAIL, 'a.sock', 'q.sock', CONSOLE_SOCKET].map((f) => rm(join(dir, f), { recursive: true, force: true })));
      await rm(final, { recursive: true, force: true });
      await rename(dir, final);
      this.o.log?.info({ snapshot: final, ms: Math.round(performance.now() - t0) }, 'memory snapshot made');
      return final;
    } catch (e) {
      if (pid) killPid(pid);
      this.o.closeConsole(`snapshot-${process.pid}`);
      await rm(dir, { recursive: true, force: true });
      throw e;
    } finally {
      this.o.ids.release(idBase);
    }
  }
}
