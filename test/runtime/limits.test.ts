import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { keyedValue } from '../../src/runtime/ns/cgroups.js';
import { run, useRig } from './harness.js';

describe('ns driver limits', () => {
  const rig = useRig('limits');

  it('OOM-kills a memory hog inside the sandbox and reports it', async () => {
    const h = await rig().driver.create(rig().spec({ memoryMiB: 64 }));
    for (const f of ['memory.limit_in_bytes', 'memory.memsw.limit_in_bytes']) {
      expect(await readFile(join(rig().cgroups.dir('memory', h.sandboxID), f), 'utf8')).toBe(`${64 * 1024 * 1024}\n`);
    }
    const hog = 'a = []\nwhile True:\n    a.append(bytearray(1 << 20))\n';
    const r = await run(rig(), h, ['python3', '-c', hog]);
    expect(r.oomKilled).toBe(true);
    expect(r.signal).toBe('SIGKILL');
    expect(r.exitCode).toBe(137);
    expect(rig().driver.alive(h)).toBe(true); // only the hog died
    const after = await run(rig(), h, ['true']);
    expect(after).toMatchObject({ exitCode: 0, oomKilled: false });
    expect((await rig().driver.stats(h)).oomKills).toBeGreaterThanOrEqual(1);
    await rig().driver.destroy(h.sandboxID);
  });

  it('keeps its init through a storm of small writers filling its memory (the OOM killer takes them)', async () => {
    const h = await rig().driver.create(rig().spec({ memoryMiB: 128, pidsMax: 256 }));
    // Memory the killer cannot free (tmpfs) filled by many small writers: each kill frees little.
    const storm = 'for i in $(seq 16); do (head -c 4m /dev/zero > /dev/shm/f$i; sleep 30) & (head -c 4m /dev/zero > /tmp/f$i; sleep 30) & done; sleep 3';
    await run(rig(), h, ['sh', '-c', storm]);
    expect(rig().driver.alive(h)).toBe(true);
    expect((await rig().driver.stats(h)).oomKills).toBeGreaterThanOrEqual(1);
    expect(await run(rig(), h, ['echo', 'ok'])).toMatchObject({ exitCode: 0, stdout: 'ok\n' });
    await rig().driver.destroy(h.sandboxID);
  });

  it('stops a bounded fork bomb at pids.max', async () => {
    const h = await rig().driver.create(rig().spec({ pidsMax: 24 }));
    const bomb = [
      'import os, time',
      'ok = failed = 0',
      'for i in range(100):',
      '    try:',
      '        if os.fork() == 0:',
      '            time.sleep(3); os._exit(0)',
      '        ok += 1',
      '    except OSError:',
      '        failed += 1',
      'print(ok, failed)',
    ].join('\n');
    const r = await run(rig(), h, ['python3', '-c', bomb]);
    const [ok, failed] = r.stdout.trim().split(' ').map(Number);
    expect(ok! + failed!).toBe(100);
    expect(ok).toBeLessThan(24);
    expect(failed).toBeGreaterThan(0);
    const events = await readFile(join(rig().cgroups.dir('pids', h.sandboxID), 'pids.events'), 'utf8');
    expect(keyedValue(events, 'max')).toBeGreaterThan(0);
    await rig().driver.destroy(h.sandboxID);
  });

  it('throttles a CPU loop to its quota', async () => {
    const h = await rig().driver.create(rig().spec({ cpus: 0.2 }));
    const quota = await readFile(join(rig().cgroups.dir('cpu', h.sandboxID), 'cpu.cfs_quota_us'), 'utf8');
    expect(Number(quota)).toBe(20_000);
    const r = await run(rig(), h, ['sh', '-c', 'timeout 1 sh -c "while :; do :; done"; echo done']);
    expect(r.stdout).toBe('done\n');
    const stat = await readFile(join(rig().cgroups.dir('cpu', h.sandboxID), 'cpu.stat'), 'utf8');
    expect(keyedValue(stat, 'nr_throttled')).toBeGreaterThan(0);
    await rig().driver.destroy(h.sandboxID);
  });

  it('refuses nonsense limits', async () => {
    await expect(rig().driver.create(rig().spec({ memoryMiB: 0 }))).rejects.toMatchObject({ kind: 'BAD_REQUEST' });
    await expect(rig().driver.create(rig().spec({ sandboxID: '../x' }))).rejects.toMatchObject({ kind: 'BAD_REQUEST' });
  });
});
