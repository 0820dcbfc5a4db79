// The microvm runtime end to end, under emulation here (no /dev/kvm): a real cubed offering
// ns and microvm, the real e2b SDK. Few tests, since every guest boot costs seconds of TCG.
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, readlinkSync, statSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { Sandbox, Volume } from 'e2b';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, startDaemon, type TestDaemon } from '../helpers/daemon.js';
import { CubeError } from '../../src/errors.js';
import { newSandboxID, nodeTag } from '../../src/ids.js';
import { MicrovmDriver } from '../../src/runtime/microvm/driver.js';
import { diskLimitBytes, kvmUsable } from '../../src/runtime/microvm/host.js';
import { Cgroups } from '../../src/runtime/ns/cgroups.js';
import { parentPidsMax } from '../../src/runtime/ns/host-limits.js';
import { TemplateStore } from '../../src/templates/store.js';
import { microvmUnavailable, registerVmTemplate } from '../helpers/microvm.js';
import { defaultNetworkPolicy } from '../helpers/kernel.js';
import { TAP_NAME, tapSetupScript } from '../../src/network/tap.js';

const unavailable = microvmUnavailable();
if (unavailable) console.warn(`microvm tests skipped: ${unavailable}`);

let d: TestDaemon;
let opts: { apiKey: string; apiUrl: string; sandboxUrl: string };
const created: string[] = [];
// The first create of a shape builds the template image and boots the snapshot source: minutes under load.
const VM = { metadata: { 'cube.runtime': 'microvm' }, timeoutMs: 300_000, requestTimeoutMs: 240_000 } as const;

async function create(o: { templateDefault?: boolean } = {}): Promise<Sandbox> {
  const sbx = await Sandbox.create('vmbase', { ...opts, ...VM, ...(o.templateDefault ? { metadata: {} } : {}) });
  created.push(sbx.sandboxId);
  return sbx;
}

/** Processes whose command line (NUL-separated) matches. */
function pidsWhere(match: (cmdline: string) => boolean): number[] {
  return readdirSync('/proc')
    .filter((p) => /^\d+$/.test(p))
    .filter((p) => {
      try {
        return match(readFileSync(`/proc/${p}/cmdline`, 'utf8'));
      } catch {
        return false; // gone meanwhile
      }
    })
    .map(Number);
}

/** QEMU processes of a sandbox (its -name carries the id). */
const qemuOf = (id: string): number[] => pidsWhere((c) => c.includes(`cube-${id},process=cube-vm`));

/** The admin API's answer for a sandbox once it is gone (its tombstone's 404), within 20 s. */
async function ended(id: string): Promise<Awaited<ReturnType<typeof call>>> {
  let got = await call(d, 'GET', `/admin/v1/sandboxes/${id}`);
  for (let i = 0; i < 100 && got.status !== 404; i++) {
    await new Promise((r) => setTimeout(r, 200));
    got = await call(d, 'GET', `/admin/v1/sandboxes/${id}`);
  }
  return got;
}

/** virtiofsd processes of a sandbox (their socket is in its directory). */
const virtiofsdOf = (dir: string): number[] => pidsWhere((c) => c.startsWith('/usr/lib/qemu/virtiofsd\0') && c.includes(`--socket-path=${dir}/`));

/** The btrfs quota group of a subvolume: what it alone holds and its limit, bytes (counted at the commit that sync makes). */
function qgroup(subvolume: string): { exclusive: number; maxExclusive: number } {
  execFileSync('sync', ['-f', subvolume]);
  const id = execFileSync('btrfs', ['inspect-internal', 'rootid', subvolume], { encoding: 'utf8' }).trim();
  const row = execFileSync('btrfs', ['qgroup', 'show', '-re', '--raw', subvolume], { encoding: 'utf8' })
    .split('\n')
    .map((l) => l.trim().split(/\s+/))
    .find((f) => f[0] === `0/${id}`);
  if (!row) throw new Error(`no quota group 0/${id} for ${subvolume}`);
  return { exclusive: Number(row[2]), maxExclusive: Number(row[4]) };
}

/**
 * Fills the guest's writable disk past its 1 GiB and writes it back to the host: dd's own error and
 * exit code. Direct I/O: the emulated guest does not copy the 1.3 GB through its page cache.
 */
const FILL = 'dd if=/dev/zero of=/home/user/fill bs=4M count=325 oflag=direct 2>&1 | grep -v records; echo "rc=${PIPESTATUS[0]}"; sync';

// A counter only in the shell's memory, written by rename: `echo > file` truncates first, and a `cat` that lands
// between the truncate and the write reads nothing (CI read an empty count once under emulation).
const COUNTER = 'i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.2; done';
const CONSOLE_KIB = 16;

/** What the kernel says of a process's identity and confinement. */
function confinement(pid: number): Record<string, string> {
  const status = Object.fromEntries(
    readFileSync(`/proc/${pid}/status`, 'utf8')
      .split('\n')
      .map((l) => l.split(':\t').map((x) => x.trim()) as [string, string]),
  );
  return { Uid: status.Uid!, Gid: status.Gid!, CapEff: status.CapEff!, CapPrm: status.CapPrm!, NoNewPrivs: status.NoNewPrivs!, Seccomp: status.Seccomp! };
}

const pidsMaxOf = (dir: string) => readFileSync(join(dir, 'pids.max'), 'utf8').trim();
const num = (path: string) => Number(readFileSync(path, 'utf8'));

describe.skipIf(unavailable !== undefined)('microvm runtime', () => {
  beforeAll(async () => {
    // A small console bound, so the test's guest passes it in a second of emulated UART.
    d = await startDaemon({ cubelet: { runtime: ['ns', 'microvm'], microvm: { console_log_kib: CONSOLE_KIB } } });
    // The template names microvm as its default runtime: creates without cube.runtime boot a VM too.
    await registerVmTemplate(d.dataDir, 'vmbase', join(d.dataDir, '..', 'vmbase'), { runtime: 'microvm' });
    await d.restart();
    opts = { apiKey: d.apiKey, apiUrl: d.url, sandboxUrl: d.url };
    // The volume content API (the SDK's own URL for it).
    process.env.E2B_VOLUME_API_URL = d.url;
  });

  afterAll(async () => {
    try {
      await Promise.all(created.map((id) => Sandbox.kill(id, opts).catch(() => false)));
    } finally {
      delete process.env.E2B_VOLUME_API_URL;
      await d?.stop();
    }
  });

  it('a volume mounts in a microVM through virtio-fs: shared with ns sandboxes and the volume API, same ids, its size limit holds, destroy leaves no virtiofsd', async () => {
    // Our extension of the create body: its size (64 MiB).
    const made = await call(d, 'POST', '/volumes', { name: 'vm-vol', sizeGiB: 0.0625 });
    expect(made.status).toBe(201);
    const vol = await Volume.connect(made.json.volumeID as string, opts);
    try {
      await vol.writeFile('/from-api.txt', 'written through the API\n');
      const sbx = await Sandbox.create('vmbase', { ...opts, ...VM, volumeMounts: { '/data': vol } });
      created.push(sbx.sandboxId);
      const dir = join(d.dataDir, 'microvm', 'sandboxes', sbx.sandboxId);
      // One virtiofsd (its namespace sandbox: a parent and the child serving in new namespaces), in
      // the sandbox's cgroups at the sandboxes' oom_score_adj, seccomp-filtered once it serves.
      const vfs = virtiofsdOf(dir);
      expect(vfs.length).toBe(2);
      for (const pid of vfs) {
        expect(readFileSync(`/proc/${pid}/cgroup`, 'utf8')).toMatch(new RegExp(`:memory:.*/cube-${d.tag}/${sbx.sandboxId}\n`));
        expect(readFileSync(`/proc/${pid}/oom_score_adj`, 'utf8').trim()).toBe('500');
      }
      const serving = vfs.map(confinement).find((c) => c.Seccomp === '2');
      // CAP_SYS_ADMIN (bit 21), CAP_MKNOD (27) and CAP_SETFCAP (31) are gone once it serves.
      expect(BigInt(`0x${serving!.CapEff}`) & ((1n << 21n) | (1n << 27n) | (1n << 31n))).toBe(0n);
      expect((await sbx.getInfo()).volumeMounts).toEqual([{ name: 'vm-vol', path: '/data' }]);
      expect((await sbx.commands.run('grep " /data " /proc/mounts')).stdout).toMatch(/^cube-vol0 \/data virtiofs rw,nosuid,nodev/);
      // Files keep the ids ns sandboxes and the volume API give them: user 1000, root 0.
      expect((await sbx.commands.run('cat /data/from-api.txt && id -u && stat -c %u /data/from-api.txt')).stdout).toBe('written through the API\n1000\n1000\n');
      await sbx.commands.run('echo from vm > /data/vm.txt');
      await sbx.commands.run('echo root > /data/root.txt', { user: 'root' });
      expect(await vol.readFile('/vm.txt')).toBe('from vm\n');
      const host = join(d.dataDir, 'store', 'volumes', vol.volumeId);
      expect([statSync(join(host, 'vm.txt')).uid, statSync(join(host, 'root.txt')).uid]).toEqual([1000, 0]);
      const ns = await Sandbox.create('host', { ...opts, volumeMounts: { '/mnt/v': 'vm-vol' } });
      created.push(ns.sandboxId);
      try {
        expect((await ns.commands.run('cat /mnt/v/vm.txt && stat -c %U /mnt/v/vm.txt /mnt/v/root.txt')).stdout).toBe('from vm\nuser\nroot\n');
        await ns.commands.run('echo from ns >> /mnt/v/vm.txt');
        // Seen at once in the guest (no cached size: see virtiofs.ts, cache and timeout).
        expect((await sbx.commands.run('cat /data/vm.txt')).stdout).toBe('from vm\nfrom ns\n');
        // The volume's limit holds for the guest's writes: dd fails inside, the guest and the ns sandbox go on.
        const dd = await sbx.commands.run('dd if=/dev/zero of=/data/big bs=1M count=100 2>&1 | grep -v records; echo "rc=${PIPESTATUS[0]}"');
        expect(dd.stdout).toMatch(/^dd: .*(Disk quota exceeded|No space left on device)\nrc=1\n$/);
        await sbx.commands.run('rm /data/big');
        expect((await sbx.commands.run('echo fits > /data/small.txt && cat /data/small.txt')).stdout).toBe('fits\n');
        expect((await ns.commands.run('cat /mnt/v/small.txt')).stdout).toBe('fits\n');
      } finally {
        await ns.kill();
      }
      // kill -9 of cubed: QEMU and virtiofsd run on, the VM is re-adopted with its volume.
      const before = virtiofsdOf(dir);
      await d.kill9();
      await d.restart();
      expect(virtiofsdOf(dir)).toEqual(before);
      expect((await (await Sandbox.connect(sbx.sandboxId, opts)).commands.run('cat /data/small.txt')).stdout).toBe('fits\n');
      // QEMU cannot save a virtio-fs device: E2B's (releasing) pause keeps the memory, as for ns; a snapshot is 409.
      const qemu = qemuOf(sbx.sandboxId);
      expect(await Sandbox.pause(sbx.sandboxId, opts)).toBe(true);
      expect((await call(d, 'GET', `/admin/v1/sandboxes/${sbx.sandboxId}`)).json.state).toBe('paused');
      expect(qemuOf(sbx.sandboxId)).toEqual(qemu);
      const resumed = await Sandbox.connect(sbx.sandboxId, opts);
      expect((await resumed.commands.run('cat /data/small.txt')).stdout).toBe('fits\n');
      await expect(resumed.createSnapshot()).rejects.toThrow(/409.*mounts volumes: no snapshot of it can be taken/);
      expect(await Sandbox.kill(sbx.sandboxId, opts)).toBe(true);
      expect(virtiofsdOf(dir)).toEqual([]);
      expect(existsSync(dir)).toBe(false);
      expect(await vol.readFile('/vm.txt')).toBe('from vm\nfrom ns\n');
      // A mount point the guest cannot make is the caller's 400; the failed create leaves no virtiofsd or directory.
      const bad = await Sandbox.create('vmbase', { ...opts, ...VM, volumeMounts: { '/etc/passwd/data': vol } }).catch((e: unknown) => e);
      expect((bad as Error).message).toMatch(/400: .*the mount point \/etc\/passwd\/data cannot be made in this sandbox: Not a directory/);
      expect(virtiofsdOf(join(d.dataDir, 'microvm', 'sandboxes'))).toEqual([]);
      expect(readdirSync(join(d.dataDir, 'microvm', 'sandboxes'))).toEqual([]);
      // A virtiofsd killed under a running guest (its mount could only hang) takes the sandbox with it, and
      // the reason says so; a QEMU killed takes its virtiofsd (which then ends with 0: the reason is QEMU's).
      for (const victim of ['virtiofsd', 'qemu'] as const) {
        const doomed = await Sandbox.create('vmbase', { ...opts, ...VM, volumeMounts: { '/data': vol } });
        created.push(doomed.sandboxId);
        const doomedDir = join(d.dataDir, 'microvm', 'sandboxes', doomed.sandboxId);
        const pid = victim === 'qemu' ? qemuOf(doomed.sandboxId)[0] : virtiofsdOf(doomedDir).find((p) => confinement(p).Seccomp === '2');
        process.kill(pid!, 'SIGKILL');
        const got = await ended(doomed.sandboxId);
        expect(got.json).toMatchObject({ code: 130414, message: expect.stringMatching(/ended: vm_exited .*QEMU \(pid \d+\) exited/) });
        if (victim === 'virtiofsd')
          expect(got.json.message).toMatch(/exited \(killed with its sandbox: the virtiofsd of volume 0 ended with status [1-9]\d*\)/);
        else expect(got.json.message).not.toMatch(/virtiofsd/);
        expect([qemuOf(doomed.sandboxId), virtiofsdOf(doomedDir), existsSync(doomedDir)]).toEqual([[], [], false]);
      }
      expect(await Volume.destroy(vol.volumeId, opts)).toBe(true);
    } finally {
      // Sandboxes still mounting it first (a failed expectation above): the volume is not deleted under them.
      await Promise.all(created.map((id) => Sandbox.kill(id, opts).catch(() => false)));
      await Volume.destroy(vol.volumeId, opts).catch((e: unknown) => console.error('volume not destroyed', e));
    }
  }, 480_000);

  it('the node offers both runtimes, microvm marked as emulated without a usable KVM', async () => {
    const r = await call(d, 'GET', '/admin/v1/nodes');
    const node = (r.json.nodes ?? r.json)[0];
    expect(node.runtime).toBe('ns');
    expect(node.runtimes).toEqual([{ name: 'ns' }, { name: 'microvm', ...(kvmUsable() ? {} : { emulated: true }), releaseBacked: true, netRaw: true }]);
    // Each mode's pool with its own target (test/helpers/daemon.ts): the console's NIC and TAP pools.
    expect(node.pool).toMatchObject({ target: 4 });
    expect(node.tapPool).toMatchObject({ target: 2 });
  });

  it('runs commands and files through the e2b SDK in a guest with its own kernel', async () => {
    const sbx = await create();
    const info = await call(d, 'GET', `/admin/v1/sandboxes/${sbx.sandboxId}`);
    expect(info.json.runtime).toBe('microvm');
    const uname = await sbx.commands.run('uname -r');
    expect(uname.stdout.trim()).not.toBe(execFileSync('uname', ['-r'], { encoding: 'utf8' }).trim());
    expect(uname.stdout).toMatch(/cloud-amd64/);
    const who = await sbx.commands.run('whoami; pwd; hostname');
    expect(who.stdout).toBe(`user\n/home/user\n${sbx.sandboxId}\n`);
    await sbx.files.write('notes/a.txt', 'hello from the host');
    expect(await sbx.files.read('notes/a.txt')).toBe('hello from the host');
    const cat = await sbx.commands.run('cat /home/user/notes/a.txt; stat -c %U notes/a.txt');
    expect(cat.stdout).toBe('hello from the hostuser\n');
    // A guest writing to its serial console holds at most twice the bound on the host, and the tail is kept.
    await sbx.commands.run(`head -c ${CONSOLE_KIB * 1024 * 6} /dev/zero | tr '\\0' x > /dev/ttyS0; echo; echo console-end > /dev/ttyS0`, {
      user: 'root',
      timeoutMs: 120_000,
    });
    const vmDir = join(d.dataDir, 'microvm', 'sandboxes', sbx.sandboxId);
    // The host reads the serial port as it comes: the command can end before its last line is written (CI under load).
    const tail = () => readFileSync(join(vmDir, 'console.log'), 'utf8').includes('console-end');
    for (let i = 0; i < 150 && !tail(); i++) await new Promise((r) => setTimeout(r, 200));
    for (const f of ['console.log', 'console.log.1']) expect(statSync(join(vmDir, f)).size).toBeLessThanOrEqual(CONSOLE_KIB * 1024);
    expect(readFileSync(join(vmDir, 'console.log'), 'utf8')).toContain('console-end');
    const failed = await sbx.commands.run('echo partial; exit 3').catch((e: unknown) => e as { exitCode: number });
    expect(failed).toMatchObject({ exitCode: 3 });
    // The guest serves on the sandbox's address: the netns forwards the slot's address to it.
    await sbx.commands.run('mkdir -p /tmp/www && echo served > /tmp/www/index.html && httpd -p 8080 -h /tmp/www');
    const ip = info.json.ip as string;
    const page = await fetch(`http://${ip}:8080/index.html`).then((r) => r.text());
    expect(page).toBe('served\n');
  });

  it("the files API acts with its user's permissions in the guest: the agent takes the user's ids (issue 30 item 5)", async () => {
    const sbx = await create();
    const setup = await sbx.commands.run(
      'echo root-only > /etc/cube-secret && chmod 600 /etc/cube-secret && mkdir -p /opt/rootdir && echo r > /opt/rootdir/f && echo r > /root/in-root && chmod 700 /root && echo r > /tmp/root-tmp',
      { user: 'root' },
    );
    expect(setup.exitCode).toBe(0);
    const user = { user: 'user' } as const;
    await expect(sbx.files.read('/etc/cube-secret', user)).rejects.toThrow(/Permission denied/);
    await expect(sbx.files.list('/root', user)).rejects.toThrow(/Permission denied/);
    await expect(sbx.files.getInfo('/root/in-root', user)).rejects.toThrow(/Permission denied/);
    await expect(sbx.files.write('/etc/cube-secret', 'x', user)).rejects.toThrow(/Permission denied/);
    await expect(sbx.files.write('/root/planted', 'x', user)).rejects.toThrow(/Permission denied/);
    await expect(sbx.files.makeDir('/opt/rootdir/made', user)).rejects.toThrow(/Permission denied/);
    await expect(sbx.files.remove('/opt/rootdir/f', user)).rejects.toThrow(/Permission denied/);
    await expect(sbx.files.remove('/tmp/root-tmp', user)).rejects.toThrow(/Operation not permitted/);
    await expect(sbx.files.rename('/opt/rootdir/f', '/home/user/stolen', user)).rejects.toThrow(/Permission denied/);
    const after = await sbx.commands.run(
      'cat /etc/cube-secret /opt/rootdir/f /root/in-root /tmp/root-tmp; ls /root; ls /opt/rootdir; test -e /home/user/stolen || echo not-moved',
      { user: 'root' },
    );
    expect(after.stdout).toBe('root-only\nr\nr\nr\nin-root\nf\nnot-moved\n');
    // Where the user may, and root anywhere.
    await sbx.files.write('/tmp/deep/mine', 'm', user);
    expect((await sbx.commands.run('stat -c %U /tmp/deep /tmp/deep/mine')).stdout).toBe('user\nuser\n');
    expect(await sbx.files.read('/etc/passwd', user)).toMatch(/^root:/);
    expect(await sbx.files.read('/root/in-root', { user: 'root' })).toBe('r\n');
  });

  it('creates clones from the per-shape memory snapshot, each with its own identity, clock and disk', async () => {
    const snapshots = join(d.dataDir, 'microvm', 'snapshots');
    const [key] = readdirSync(snapshots).filter((n) => !n.includes('.tmp'));
    expect(key).toBeDefined();
    expect(readdirSync(join(snapshots, key!)).sort()).toEqual(['console.log', 'disk.qcow2', 'ram', 'state']);
    const [a, b] = await Promise.all([create(), create()]);
    await a.files.write('/tmp/mine', 'a');
    const [ra, rb] = await Promise.all([a.commands.run('hostname; date +%s; cat /tmp/mine'), b.commands.run('hostname; date +%s; cat /tmp/mine 2>&1 || true')]);
    const [hostA, clockA, mine] = ra.stdout.split('\n');
    const [hostB, clockB, missing] = rb.stdout.split('\n');
    expect([hostA, hostB, mine]).toEqual([a.sandboxId, b.sandboxId, 'a']);
    expect(missing).toMatch(/No such file/);
    // A clone's clock starts where the snapshot's stopped; each took the host's (a minute of slack for a loaded host).
    for (const c of [clockA, clockB]) expect(Math.abs(Number(c) - Date.now() / 1000)).toBeLessThan(60);
    const log = readFileSync(join(d.dataDir, '..', 'daemon.log'), 'utf8');
    expect(log).toContain('memory snapshot made');
  });

  it('pause keeps QEMU; the e2b pause releases the memory (QEMU ended, state in a file) and resume keeps files and a running process', async () => {
    const sbx = await create();
    const id = sbx.sandboxId;
    const state = join(d.dataDir, 'microvm', 'sandboxes', id, 'memory.state');
    await sbx.files.write('/tmp/kept', 'before pause');
    // The loop's counter lives only in the shell's memory: it goes on from where it was, or the process was lost.
    await sbx.commands.run(COUNTER, { background: true, timeoutMs: 0 });
    const before = Number((await sbx.commands.run('sleep 1; cat /tmp/count')).stdout);
    expect(before).toBeGreaterThan(0);

    expect((await call(d, 'POST', `/admin/v1/sandboxes/${id}/pause`)).json.state).toBe('paused');
    expect(qemuOf(id)).toHaveLength(1);
    expect((await call(d, 'POST', `/admin/v1/sandboxes/${id}/resume`)).json.state).toBe('running');

    expect(await sbx.pause()).toBe(true);
    expect(qemuOf(id)).toEqual([]);
    expect(statSync(state).size).toBeGreaterThan(1 << 20);
    expect((await call(d, 'GET', `/admin/v1/sandboxes/${id}`)).json.state).toBe('paused');

    const again = await Sandbox.connect(id, { ...opts, ...VM });
    expect(qemuOf(id)).toHaveLength(1);
    expect(existsSync(state)).toBe(false);
    const r = await again.commands.run('cat /tmp/kept; echo; cat /tmp/count; sleep 1; cat /tmp/count');
    const [kept, c1, c2] = r.stdout.trim().split('\n');
    expect(kept).toBe('before pause');
    expect(Number(c1)).toBeGreaterThanOrEqual(before);
    expect(Number(c2)).toBeGreaterThan(Number(c1));
  });

  it('a snapshot of a microVM keeps its processes: a sandbox made from it counts on from where it was, with its own identity', async () => {
    const sbx = await create();
    await sbx.files.write('/tmp/kept', 'from the origin');
    // No command timeout: the SDK's default 60 s killed the loop before the last check (85 s at load 32).
    await sbx.commands.run(COUNTER, { background: true, timeoutMs: 0 });
    const before = Number((await sbx.commands.run('sleep 1; cat /tmp/count')).stdout);
    const snap = await sbx.createSnapshot({ requestTimeoutMs: 240_000 });
    const raw = (await call(d, 'GET', `/snapshots?sandboxID=${sbx.sandboxId}`)).json as Record<string, unknown>[];
    expect(raw).toMatchObject([{ snapshotID: snap.snapshotId, runtime: 'microvm', keeps: 'filesystem+memory', processesKept: true }]);
    const copy = await Sandbox.create(snap.snapshotId, { ...opts, ...VM });
    created.push(copy.sandboxId);
    const r = await copy.commands.run('hostname; cat /tmp/kept; echo; cat /tmp/count; sleep 1; cat /tmp/count');
    const [host, kept, c1, c2] = r.stdout.trim().split('\n');
    expect([host, kept]).toEqual([copy.sandboxId, 'from the origin']);
    expect(Number(c1)).toBeGreaterThanOrEqual(before);
    expect(Number(c2)).toBeGreaterThan(Number(c1));
    // The origin runs on after the snapshot.
    const o1 = Number((await sbx.commands.run('cat /tmp/count')).stdout);
    expect(Number((await sbx.commands.run('sleep 1; cat /tmp/count')).stdout)).toBeGreaterThan(o1);
    expect(await Sandbox.deleteSnapshot(snap.snapshotId, opts)).toBe(true);
    expect(existsSync(join(d.dataDir, 'microvm', 'kept', snap.snapshotId))).toBe(false);
  });

  it('the writable disk of a clone of the memory snapshot and of a sandbox made from a kept snapshot stops at disk_gib: ENOSPC inside, the host untouched', async () => {
    const snapshots = join(d.dataDir, 'microvm', 'snapshots');
    const shapeFiles = () =>
      readdirSync(snapshots).flatMap((k) =>
        readdirSync(join(snapshots, k)).map((f) => `${k}/${f} ${statSync(join(snapshots, k, f)).size} ${statSync(join(snapshots, k, f)).mtimeMs}`),
      );
    const sbx = await create();
    const before = shapeFiles();
    const layer = (id: string) => join(d.dataDir, 'store', 'sandboxes', id);
    // The default spec's 1 GiB: the guest's filesystem ends there, and the host's quota group a little after it.
    const filled = await sbx.commands.run(FILL, { timeoutMs: 200_000 });
    expect(filled.stdout).toMatch(/No space left on device\nrc=1\n/);
    const q = qgroup(layer(sbx.sandboxId));
    expect(q.maxExclusive).toBe(diskLimitBytes(1));
    expect(q.exclusive).toBeGreaterThan(900 * 1024 ** 2);
    expect(q.exclusive).toBeLessThanOrEqual(q.maxExclusive);
    // The snapshot its disk is an overlay on is left as it was, and the guest runs on (QEMU stops a VM whose host disk is full).
    expect(shapeFiles()).toEqual(before);
    expect((await sbx.commands.run('echo alive')).stdout).toBe('alive\n');

    // Made from a kept snapshot of it: a writable copy of its subvolume, limited like a new one, with the full filesystem it had.
    const snap = await sbx.createSnapshot({ requestTimeoutMs: 240_000 });
    const copy = await Sandbox.create(snap.snapshotId, { ...opts, ...VM });
    created.push(copy.sandboxId);
    const more = await copy.commands.run('dd if=/dev/zero of=/home/user/more bs=1M count=64 2>&1 | grep -v records; echo "rc=${PIPESTATUS[0]}"; sync');
    expect(more.stdout).toMatch(/No space left on device\nrc=1\n/);
    const c = qgroup(layer(copy.sandboxId));
    expect(c.maxExclusive).toBe(diskLimitBytes(1));
    expect(c.exclusive).toBeLessThanOrEqual(c.maxExclusive);
    expect((await copy.commands.run('rm /home/user/fill && echo freed')).stdout).toBe('freed\n');
    // The guest keeps the snapshot's disk and memory: a create asking for others is refused.
    const other = await call(d, 'POST', '/admin/v1/sandboxes', { templateID: snap.snapshotId, diskGiB: 2 });
    expect(other.status).toBe(400);
    expect(other.json.message).toMatch(/holds a microVM of 1 GiB of disk and 256 MiB of memory/);
    expect(await Sandbox.deleteSnapshot(snap.snapshotId, opts)).toBe(true);
    await Promise.all([sbx.kill(), copy.kill()]);
    // 1.3 GB through an emulated guest, then a snapshot of it and a restore: 218 s at load 14-27.
  }, 480_000);

  it("destroy leaves no QEMU process or file and gives the TAP slot back (a create naming no runtime takes the template's microvm)", async () => {
    const sbx = await create({ templateDefault: true });
    const id = sbx.sandboxId;
    const slot = (await call(d, 'GET', `/admin/v1/sandboxes/${id}`)).json;
    expect(slot.runtime).toBe('microvm');
    const [pid] = qemuOf(id);
    expect(pid).toBeDefined();
    // QEMU is confined: its own unprivileged ids (the first of a host id range), no capability,
    // no_new_privs, a seccomp filter, an empty root directory (no mount reachable), the sandboxes' oom_score_adj.
    const c = confinement(pid!);
    const uid = Number(c.Uid!.split(/\s+/)[0]);
    expect(uid).toBeGreaterThanOrEqual(1_000_000);
    // The test daemons' ranges start at 1e9 (testHostIdBase: one span per daemon, apart from other tests').
    expect((uid - 1_000_000_000) % 65_536).toBe(0);
    expect(c).toEqual({
      Uid: `${uid}\t${uid}\t${uid}\t${uid}`,
      Gid: `${uid}\t${uid}\t${uid}\t${uid}`,
      CapEff: '0000000000000000',
      CapPrm: '0000000000000000',
      NoNewPrivs: '1',
      Seccomp: '2',
    });
    expect(readlinkSync(`/proc/${pid}/root`)).toBe(join(d.dataDir, 'microvm', 'sandboxes', id, 'jail'));
    expect(readdirSync(join(d.dataDir, 'microvm', 'sandboxes', id, 'jail'))).toEqual([]);
    expect(readFileSync(`/proc/${pid}/mountinfo`, 'utf8')).toBe('');
    expect(readFileSync(`/proc/${pid}/oom_score_adj`, 'utf8').trim()).toBe('500');
    // QEMU sits in the sandbox's cgroups under the node's parent, whose limits hold it.
    const cgroups = readFileSync(`/proc/${pid}/cgroup`, 'utf8');
    for (const h of ['pids', 'memory']) expect(cgroups).toMatch(new RegExp(`:${h}:.*/cube-${d.tag}/${id}\n`));
    expect(pidsMaxOf(new Cgroups(d.tag).parents.pids)).toBe(String(parentPidsMax(num('/proc/sys/kernel/pid_max'), num('/proc/sys/kernel/threads-max'))));
    const dir = join(d.dataDir, 'microvm', 'sandboxes', id);
    expect(existsSync(dir)).toBe(true);
    // Its writable disk lives in its own subvolume of the node's store (held to disk_gib by its quota group).
    const layer = join(d.dataDir, 'store', 'sandboxes', id);
    expect(statSync(join(layer, 'disk.qcow2')).isFile()).toBe(true);
    expect(statSync(layer).ino).toBe(256); // a btrfs subvolume's root directory
    const netns = readFileSync(join(dir, 'netns'), 'utf8');
    expect(await Sandbox.kill(id, opts)).toBe(true);
    expect(qemuOf(id)).toEqual([]);
    expect(existsSync(dir)).toBe(false);
    expect(existsSync(layer)).toBe(false);
    // The slot went back to the TAP pool with its TAP (made anew there by the pool's reset, whose
    // own short-lived tools may be in the netns right now), held by no QEMU.
    // The reset runs after the destroy answered (it deletes the TAP, then makes it again): wait for it.
    const linksNow = () => execFileSync('nsenter', [`--net=${netns}`, '--', 'ip', '-o', 'link'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
    let links = linksNow();
    for (let i = 0; i < 100 && !links.includes(TAP_NAME); i++) {
      await new Promise((r) => setTimeout(r, 100));
      links = linksNow();
    }
    expect(links).toContain(TAP_NAME);
    const inNetns = execFileSync('ip', ['netns', 'pids', basename(netns)], { encoding: 'utf8' })
      .split('\n')
      .filter(Boolean);
    const cmdline = (p: string) => {
      try {
        return readFileSync(`/proc/${p}/cmdline`, 'utf8');
      } catch {
        return ''; // gone meanwhile
      }
    };
    expect(inNetns.filter((p) => cmdline(p).includes('process=cube-vm'))).toEqual([]);
    expect(slot.state).toBe('running');
  });

  it('a microVM whose QEMU dies is ended at once with the reason (vm_exited) and an event; nothing of it stays', async () => {
    const sbx = await create();
    const [pid] = qemuOf(sbx.sandboxId);
    process.kill(pid!, 'SIGKILL');
    const got = await ended(sbx.sandboxId);
    expect(got.json).toMatchObject({ code: 130414, message: expect.stringMatching(/ended: vm_exited .*QEMU \(pid \d+\) exited/) });
    const events = (await call(d, 'GET', '/admin/v1/events?limit=1000')).json as { kind: string; sandboxID?: string; message: string; death?: string }[];
    expect(events.find((e) => e.sandboxID === sbx.sandboxId && e.kind === 'sandbox.error')?.message).toMatch(/QEMU \(pid \d+\) exited/);
    expect(events.find((e) => e.sandboxID === sbx.sandboxId && e.kind === 'sandbox.died')).toMatchObject({
      death: 'vm_exited',
      message: expect.stringMatching(/QEMU \(pid \d+\) exited/),
    });
    expect(existsSync(join(d.dataDir, 'microvm', 'sandboxes', sbx.sandboxId))).toBe(false);
  });

  it('a microVM whose QEMU lives but whose guest agent stops answering is ended with the reason (agent_silent): a pid is not a live sandbox', async () => {
    const sbx = await create();
    const [pid] = qemuOf(sbx.sandboxId);
    // Stopped, not ended: its pid and /proc entry stay, its agent can answer nothing.
    process.kill(pid!, 'SIGSTOP');
    try {
      let got = await call(d, 'GET', `/admin/v1/sandboxes/${sbx.sandboxId}`);
      for (let i = 0; i < 150 && got.status !== 404; i++) {
        await new Promise((r) => setTimeout(r, 200));
        got = await call(d, 'GET', `/admin/v1/sandboxes/${sbx.sandboxId}`);
      }
      expect(got.json).toMatchObject({ code: 130410, message: expect.stringMatching(/ended: agent_silent .*guest agent did not answer/) });
      const events = (await call(d, 'GET', '/admin/v1/events?limit=1000')).json as { kind: string; sandboxID?: string; death?: string }[];
      expect(events.find((e) => e.sandboxID === sbx.sandboxId && e.kind === 'sandbox.died')).toMatchObject({ death: 'agent_silent' });
      expect(qemuOf(sbx.sandboxId)).toEqual([]);
      expect(existsSync(join(d.dataDir, 'microvm', 'sandboxes', sbx.sandboxId))).toBe(false);
    } finally {
      try {
        process.kill(pid!, 'SIGCONT');
      } catch {
        // gone: what the test expects
      }
    }
  });

  it('a microVM with more memory than the node is refused with 400 and leaves nothing', async () => {
    const node = (await call(d, 'GET', '/admin/v1/nodes')).json[0] as { capacity: { memoryMiB: number } };
    const before = readdirSync(join(d.dataDir, 'microvm', 'sandboxes'));
    const r = await call(d, 'POST', '/admin/v1/sandboxes', { templateID: 'vmbase', runtime: 'microvm', memoryMiB: Math.floor(node.capacity.memoryMiB) });
    expect(r.status).toBe(400);
    expect(r.json).toMatchObject({ code: 130400, message: expect.stringMatching(/does not fit this node's \d+ MiB of memory/) });
    expect(readdirSync(join(d.dataDir, 'microvm', 'sandboxes'))).toEqual(before);
  });

  let released: Sandbox | undefined;
  it('AutoPause at the timeout releases the memory: QEMU ends and the sandbox stays paused', async () => {
    const sbx = await Sandbox.create('vmbase', { ...opts, ...VM, timeoutMs: 5_000, lifecycle: { onTimeout: 'pause' } });
    created.push(sbx.sandboxId);
    const state = async () => (await call(d, 'GET', `/admin/v1/sandboxes/${sbx.sandboxId}`)).json.state as string;
    for (let i = 0; i < 300 && (await state()) !== 'paused'; i++) await new Promise((r) => setTimeout(r, 200));
    expect(await state()).toBe('paused');
    expect(qemuOf(sbx.sandboxId)).toEqual([]);
    expect(existsSync(join(d.dataDir, 'microvm', 'sandboxes', sbx.sandboxId, 'memory.state'))).toBe(true);
    released = sbx;
  });

  it('survives kill -9 of cubed: the microVM is re-adopted and answers again, and the released one is resumable', async () => {
    const sbx = await create();
    await sbx.files.write('/tmp/before', 'kept');
    const pids = qemuOf(sbx.sandboxId);
    await d.kill9();
    await d.restart();
    expect(qemuOf(sbx.sandboxId)).toEqual(pids);
    // Its slot is re-adopted into the TAP pool (meta.json says which mode), not swept.
    const node = (await call(d, 'GET', '/admin/v1/nodes')).json;
    expect((node.nodes ?? node)[0].tapPool.inUse).toBeGreaterThanOrEqual(1);
    const again = await Sandbox.connect(sbx.sandboxId, opts);
    const r = await again.commands.run('cat /tmp/before');
    expect(r.stdout).toBe('kept');
    // Re-adopted from its memory file with no QEMU running; connect resumes it.
    expect(released).toBeDefined();
    expect((await call(d, 'GET', `/admin/v1/sandboxes/${released!.sandboxId}`)).json.state).toBe('paused');
    const back = await Sandbox.connect(released!.sandboxId, { ...opts, ...VM });
    expect((await back.commands.run('echo back')).stdout).toBe('back\n');
    expect(qemuOf(released!.sandboxId)).toHaveLength(1);
  });
});

describe.skipIf(unavailable !== undefined)('microvm driver: a guest that does not come up', () => {
  const tag = nodeTag(`test-microvm-boot-${process.pid}`);
  const netnsName = `cube-t-boot-${process.pid}`;
  let dataDir: string;

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'cubed-test-microvm-boot-'));
    // A TAP-mode slot as the network agent's TAP pool makes it.
    execFileSync('ip', ['netns', 'add', netnsName]);
    execFileSync('ip', ['netns', 'exec', netnsName, 'sh', '-c', tapSetupScript(defaultNetworkPolicy().connLimits)]);
  });

  afterAll(async () => {
    execFileSync('ip', ['netns', 'del', netnsName], { stdio: 'ignore' });
    await new Cgroups(tag).removeParents();
    await rm(dataDir, { recursive: true, force: true });
  });

  it("fails the create with the boot timeout code and the console tail, and removes QEMU, the cgroups and the files (the slot's TAP stays its pool's)", async () => {
    // A cold boot (no snapshot) cannot answer within 300 ms even with KVM: a real timeout, nothing faked.
    const driver = new MicrovmDriver({ dataDir, nodeTag: tag, bootTimeoutMs: 300, snapshots: false, declaredMemoryMiB: 4096 });
    await driver.init();
    // A node offering microvm alone limits its parent cgroup like ns does, also when a create makes it again.
    const cg = new Cgroups(tag);
    expect(await cg.removeParents()).toEqual([]);
    await registerVmTemplate(dataDir, 'vmboot', join(dataDir, 'rootfs'));
    const template = await new TemplateStore(dataDir).resolve('vmboot');
    const id = newSandboxID();
    const e = await driver
      .create({ sandboxID: id, template, cpus: 1, memoryMiB: 128, pidsMax: 64, diskGiB: 1, env: {}, netnsPath: `/run/netns/${netnsName}` })
      .catch((x: unknown) => x as CubeError);
    expect(e).toBeInstanceOf(CubeError);
    expect(e).toMatchObject({ code: 130508, http: 504 });
    expect((e as CubeError).message).toMatch(/did not come up within 300 ms; console: /);
    expect(qemuOf(id)).toEqual([]);
    expect(existsSync(join(dataDir, 'microvm', 'sandboxes', id))).toBe(false);
    expect(await cg.list()).toEqual(new Set());
    expect(pidsMaxOf(cg.parents.pids)).toBe(String(parentPidsMax(num('/proc/sys/kernel/pid_max'), num('/proc/sys/kernel/threads-max'))));
    expect(num(join(cg.parents.memory, 'memory.limit_in_bytes'))).toBe(4096 * 1024 ** 2);
    expect(execFileSync('ip', ['-n', netnsName, '-o', 'link'], { encoding: 'utf8' })).toContain(TAP_NAME);
    expect(execFileSync('ip', ['netns', 'pids', netnsName], { encoding: 'utf8' }).trim()).toBe('');
  });
});
