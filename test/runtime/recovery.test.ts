import { spawn } from 'node:child_process';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { newSandboxID } from '../../src/ids.js';
import { NsDriver } from '../../src/runtime/ns/driver.js';
import { findLeaks, run, useRig } from './harness.js';

const repo = join(import.meta.dirname, '..', '..');

describe('ns driver scan and cleanup after a crash', () => {
  const rig = useRig('recovery');

  it('re-adopts what a killed daemon created and removes the rest', { timeout: 120_000 }, async () => {
    // node itself with tsx's loader: the tsx CLI would put a second process between us and the daemon.
    const daemon = spawn(process.execPath, ['--import', 'tsx', join(import.meta.dirname, 'fixtures/create-burst.ts'), rig().dataDir, rig().tag], {
      cwd: repo,
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const created: string[] = [];
    await new Promise<void>((resolve, reject) => {
      daemon.stdout.on('data', (b: Buffer) => {
        created.push(...b.toString().split('\n').filter(Boolean));
        if (created.length >= 15) resolve(); // mid-way through its second burst
      });
      daemon.once('exit', (code) => reject(new Error(`burst daemon exited early (${code})`)));
    });
    daemon.kill('SIGKILL');
    await new Promise((r) => daemon.once('exit', r));

    // A create that died before its launcher ran: a directory and cgroups with nothing inside.
    const half = newSandboxID();
    await mkdir(join(rig().dataDir, 'sandboxes', half, 'upper'), { recursive: true });
    await mkdir(rig().cgroups.dir('memory', half));
    // One killed between taking its subvolume and anything else: a writable layer and nothing more.
    const orphan = newSandboxID();
    await rig().driver.storage.create(orphan, 1024 ** 2);

    const restarted = new NsDriver({ dataDir: rig().dataDir, nodeTag: rig().tag });
    await restarted.init();
    const found = await restarted.scan();
    const ids = found.map((h) => h.sandboxID);
    expect(ids).toEqual(expect.arrayContaining(created));
    expect(ids).not.toContain(half);
    const keep = found.find((h) => h.sandboxID === created[0])!;
    const r = await run({ ...rig(), driver: restarted }, keep, ['sh', '-c', 'echo $BURST; hostname']);
    expect(r.stdout).toBe(`yes\n${keep.sandboxID}\n`);

    const { removed } = await restarted.cleanup(new Set([keep.sandboxID]));
    expect(removed).toContain(half);
    expect(removed).toContain(orphan);
    expect(removed).not.toContain(keep.sandboxID);
    expect((await restarted.scan()).map((h) => h.sandboxID)).toEqual([keep.sandboxID]);
    const leaks = findLeaks(rig().tag, rig().dataDir);
    expect(leaks.dirs).toEqual([keep.sandboxID]);
    // The writable layers too: the kept sandbox's subvolume stays, the half-made ones are deleted.
    expect(await restarted.storage.list()).toEqual([keep.sandboxID]);
    expect((await restarted.storage.diskUsed([keep.sandboxID])).has(keep.sandboxID)).toBe(true);
    expect(leaks.cgroups.sort()).toEqual([...(rig().cgroups.blkio ? ['blkio'] : []), 'cpu', 'memory', 'pids', 'unified'].map((h) => `${h}/${keep.sandboxID}`));
  });
});
