// Host-wide tables (issue 12 item 3): when the host runs out of memory its OOM killer takes
// sandbox processes before the node's daemon (cubed runs at -900), and no sandbox can put itself
// below it; the node's sandboxes together have a pids and a memory limit, the host has pid_max
// headroom, each sandbox an open-file limit, and a share of the conntrack table and a rate of
// new connections.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { nftTableName } from '../../src/network/names.js';
import { fileLimits, hardNofile, parentPidsMax, PID_MAX_TARGET, pidMaxRaise, type FileLimits } from '../../src/runtime/ns/host-limits.js';
import type { SandboxHandle } from '../../src/runtime/types.js';
import { startDaemon } from '../helpers/daemon.js';
import { startWanHost, type WanHost } from '../helpers/wan.js';
import { run, useRig } from '../runtime/harness.js';
import { useNetAgent } from './agent.js';

describe('OOM killer order', () => {
  const rig = useRig('hostile-oom');
  let h: SandboxHandle;
  beforeAll(async () => {
    h = await rig().driver.create(rig().spec());
  });

  it('commands score +500, the init 250 (taken last by its own cgroup killer), and root inside cannot go lower', async () => {
    expect(readFileSync(`/proc/${h.initPid}/oom_score_adj`, 'utf8')).toBe('250\n');
    for (const user of ['root', 'user'] as const) {
      const r = await run(
        rig(),
        h,
        ['sh', '-c', 'cat /proc/self/oom_score_adj; echo -100 > /proc/self/oom_score_adj; echo rc=$?; cat /proc/self/oom_score_adj'],
        { user },
      );
      expect(r.stdout, user).toBe('500\nrc=1\n500\n');
    }
  });
});

describe('the node daemon', () => {
  it('runs at oom_score_adj -900 (where the host grants CAP_SYS_RESOURCE), below every sandbox', async () => {
    const capEff = BigInt('0x' + /CapEff:\s+([0-9a-f]+)/.exec(readFileSync('/proc/self/status', 'utf8'))![1]);
    const d = await startDaemon();
    try {
      const adj = Number(readFileSync(`/proc/${d.pid}/oom_score_adj`, 'utf8'));
      expect(adj).toBeLessThan(500);
      if (capEff & (1n << 24n)) expect(adj).toBe(-900);
    } finally {
      await d.stop();
    }
  });
});

describe('host-wide tables, sized from the host (pure)', () => {
  it.each([
    // pid_max, threads-max -> the node's parent pids.max
    [32_768, 192_730, 28_672],
    [4_194_304, 192_730, 168_639],
    [4_194_304, 8_000_000, 3_670_016],
    [5_000, 100_000, 904],
  ])('parentPidsMax(%i, %i) = %i', (pidMax, threadsMax, want) => {
    expect(parentPidsMax(pidMax, threadsMax)).toBe(want);
  });

  it('raises pid_max only when below the 64-bit ceiling', () => {
    expect([pidMaxRaise(32_768), pidMaxRaise(PID_MAX_TARGET), pidMaxRaise(PID_MAX_TARGET * 2)]).toEqual([PID_MAX_TARGET, undefined, undefined]);
  });

  const F = 2_466_097; // this machine's fs.file-max
  it.each<[string, number, number, number, number, number | undefined, FileLimits | string]>([
    // file-max, share, spec pids, the daemon's hard limit, files asked -> the sandbox's limits
    // Before: 1024 files x 1024 pids, 42% of the table per sandbox.
    ['the default share on this machine: the floor, fewer pids', F, 1 / 16, 1024, Infinity, undefined, { openFiles: 154_131, nofile: 512, pidsMax: 301 }],
    ['few pids: more files each', F, 1 / 16, 64, Infinity, undefined, { openFiles: 154_131, nofile: 2408, pidsMax: 64 }],
    ["no raising past the daemon's own hard limit", F, 1 / 16, 24, 2000, undefined, { openFiles: 154_131, nofile: 2000, pidsMax: 24 }],
    [
      "systemd's file-max: nr_open's default at most",
      9_223_372_036_854_775_807,
      1 / 16,
      1024,
      Infinity,
      undefined,
      { openFiles: Number.MAX_SAFE_INTEGER, nofile: 1_048_576, pidsMax: 1024 },
    ],
    ['a create asking for fewer files', F, 1 / 16, 1024, Infinity, 8192, { openFiles: 8192, nofile: 512, pidsMax: 16 }],
    [
      'more than the share is refused',
      F,
      1 / 16,
      1024,
      Infinity,
      200_000,
      expect.stringMatching(/^open files 200000: from 4096 to this node's share 154131/) as unknown as string,
    ],
    ['under 8 pids of 512 files is refused', F, 1 / 16, 1024, Infinity, 4000, expect.stringMatching(/^open files 4000: from 4096/) as unknown as string],
  ])('%s', (_name, fileMax, share, pids, hard, asked, want) => {
    const got = fileLimits(fileMax, share, pids, hard, asked);
    expect(got).toEqual(want);
    if (typeof got !== 'string') expect(got.nofile * got.pidsMax).toBeLessThanOrEqual(got.openFiles);
  });

  it('reads the hard open-file limit from /proc/self/limits', () => {
    const limits = (hard: string) =>
      `Limit                     Soft Limit           Hard Limit           Units\nMax open files            1024                 ${hard}                files\n`;
    expect([hardNofile(limits('20000')), hardNofile(limits('unlimited'))]).toEqual([20_000, Infinity]);
  });
});

describe("the node's parent cgroup, pid_max and open files", () => {
  const NODE_MEMORY_MIB = 3072;
  const rig = useRig('hostile-tables', { nodeMemoryMiB: NODE_MEMORY_MIB });
  let h: SandboxHandle;
  beforeAll(async () => {
    h = await rig().driver.create(rig().spec());
  });
  const num = (path: string) => Number(readFileSync(path, 'utf8').trim());

  it('limits all sandboxes together: pids at a share of the host tasks, memory at the declared quota', () => {
    // 31 fork bombs at 1024 pids exhausted the host's 32768 pids before.
    expect(num('/proc/sys/kernel/pid_max')).toBeGreaterThanOrEqual(PID_MAX_TARGET);
    const parents = rig().cgroups.parents;
    expect(readFileSync(join(parents.pids, 'pids.max'), 'utf8').trim()).toBe(
      String(parentPidsMax(num('/proc/sys/kernel/pid_max'), num('/proc/sys/kernel/threads-max'))),
    );
    expect(num(join(parents.memory, 'memory.limit_in_bytes'))).toBe(NODE_MEMORY_MIB * 1024 * 1024);
  });

  it('gives commands an open-file limit sized against fs.file-max, for root and user', async () => {
    const want = fileLimits(num('/proc/sys/fs/file-max'), 1 / 16, rig().spec().pidsMax, hardNofile(readFileSync('/proc/self/limits', 'utf8')));
    if (typeof want === 'string') throw new Error(want);
    expect(num(join(rig().cgroups.dir('pids', h.sandboxID), 'pids.max'))).toBe(want.pidsMax);
    for (const user of ['root', 'user'] as const) {
      const r = await run(rig(), h, ['sh', '-c', 'ulimit -n; ulimit -Hn; ulimit -Hn 1048576 2>/dev/null; echo raised=$?'], { user });
      expect(r.stdout, user).toBe(`${want.nofile}\n${want.nofile}\nraised=2\n`); // no CAP_SYS_RESOURCE inside
    }
  });

  it('keeps every process of a sandbox together within its share of the file table (cube.open_files)', async () => {
    // Processes fork until pids.max, each opens files until EMFILE; the parent adds up what
    // they hold at once. Before: 64 pids x 1024 files = 65,536 whatever the share.
    const SHARE = 8192;
    const s = await rig().driver.create(rig().spec({ pidsMax: 64, limits: { openFiles: SHARE } }));
    const flood = [
      'import os',
      'r, w = os.pipe(); hr, hw = os.pipe(); kids = 0',
      'while True:',
      '    try: pid = os.fork()',
      '    except OSError: break',
      '    if pid == 0:',
      '        os.close(hw); n = 0',
      '        try:',
      '            while True: os.open("/dev/null", os.O_RDONLY); n += 1',
      '        except OSError: pass',
      '        os.write(w, b"%d\\n" % n); os.read(hr, 1); os._exit(0)',
      '    kids += 1',
      'os.close(w); held = 0; got = 0',
      'while got < kids:',
      '    for line in os.read(r, 65536).split():',
      '        held += int(line); got += 1',
      'print(kids, held)',
    ].join('\n');
    try {
      const r = await run(rig(), s, ['python3', '-c', flood]);
      const [kids, held] = r.stdout.trim().split(' ').map(Number) as [number, number];
      expect(kids, r.stderr).toBeGreaterThan(1);
      expect(held).toBeGreaterThan(SHARE / 2); // they did open files
      expect(held).toBeLessThanOrEqual(SHARE);
    } finally {
      await rig().driver.destroy(s.sandboxID);
    }
  });
});

describe('conntrack entries and new connections per sandbox', () => {
  const MAX = 50; // under the rate's burst, so both limits act on one flood
  const RATE = 100;
  const agent = useNetAgent('hostile-ct', { connLimits: { maxConnections: MAX, newPerSec: RATE } });
  let wan: WanHost;
  beforeAll(async () => {
    wan = await startWanHost();
  });
  afterAll(async () => {
    await wan?.stop();
  });

  it('keeps one sandbox to its share of the host-wide conntrack table', async () => {
    const slot = await agent.acquire('ct-flood');
    try {
      // 3,000 UDP flows to distinct ports, each a conntrack entry (3,000 in 0.11 s before).
      const flood = `import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\nfor p in range(20000, 23000): s.sendto(b'x', ('${wan.ip}', p))`;
      await execa('ip', ['netns', 'exec', slot.netns, 'python3', '-c', flood]);
      const ct = await execa('conntrack', ['-L', '-s', slot.sandboxIp, '-d', wan.ip], { reject: false });
      const entries = ct.stdout.split('\n').filter((l) => l.includes(`dst=${wan.ip}`)).length;
      expect(entries).toBeGreaterThan(0);
      expect(entries).toBeLessThanOrEqual(MAX);
      // Both rules acted: the rate one on the burst, the count one once the entries reached MAX.
      const table = (await execa('nft', ['list', 'chain', 'inet', nftTableName(slot.netns.split('-')[1]!), 'forward'])).stdout;
      for (const rule of ['@sb_rate', '@sb_conns']) {
        const packets = Number(new RegExp(`${rule} .* counter packets (\\d+)`).exec(table)?.[1]);
        expect(packets, rule).toBeGreaterThan(0);
      }
    } finally {
      await agent.release('ct-flood');
      await execa('conntrack', ['-D', '-s', slot.sandboxIp], { reject: false });
    }
  });
});
