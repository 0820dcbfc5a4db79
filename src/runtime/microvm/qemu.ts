// QEMU for the microvm runtime: its argv, its confined start and the migration of its state.
// QEMU runs as an unprivileged id of its own in an empty root, under a seccomp filter, with the
// disks and any saved state handed to it open (issue 29 item 1; docs/security.md).
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { chmod, chown, mkdir, open, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { CubeError } from '../../errors.js';
import { GATEWAY_IP, GUEST_IP, TAP_NAME } from '../../network/tap.js';
import { CONSOLE_SOCKET, type ConsoleLog } from './console.js';
import { Qmp, withQmp } from './qmp.js';
import { sandboxProcess } from './host.js';
import { volumeDeviceArgs } from './virtiofs.js';

export const QEMU = 'qemu-system-x86_64';
/**
 * Without these the emulated guest hangs calibrating its TSC (runtime-probe.md §6.2); `quiet`
 * because every console line costs 30-40 ms on the emulated UART.
 */
const TCG_APPEND = 'tsc_early_khz=2000000 no_timer_check lpj=4000000';
/** QEMU's own start (files opened, chroot, uid change), before any guest code runs: 0.1-1 s here under load. */
const LAUNCH_TIMEOUT_MS = 30_000;

/** The disks QEMU is handed open (qemuArgs FD_*). */
export interface VmFiles {
  image: string;
  disk: string;
}

export interface VmShape {
  kernel: string;
  initrd: string;
  image: string;
  cpus: number;
  memoryMiB: number;
  kvm: boolean;
}

/**
 * QEMU's argv (pure). `net`: the TAP of the TAP-mode slot QEMU runs in, or a hub port with nothing on it
 * (a snapshot's source VM, which needs the same devices as its clones but no network).
 * `ram`: guest memory in a file: shared (the snapshot source writes it) or private (a clone's
 * copy-on-write view of it). `incoming`: wait for a migrate-incoming (a clone).
 */
export function qemuArgs(
  o: VmShape & {
    id: string;
    dir: string;
    disk: string;
    net: 'tap' | 'hub';
    uid: number;
    ram?: { path: string; shared: boolean };
    incoming?: boolean;
    volumes?: number;
  },
): string[] {
  // Volumes: virtiofsd maps the guest's memory, so it must be shared: an anonymous memfd (a
  // cold boot: a snapshot clone's private file mapping cannot be shared, see driver.ts).
  const backend = o.ram
    ? `memory-backend-file,id=mem,size=${o.memoryMiB}M,mem-path=${o.ram.path},share=${o.ram.shared ? 'on' : 'off'}`
    : o.volumes
      ? `memory-backend-memfd,id=mem,size=${o.memoryMiB}M,share=on`
      : undefined;
  const append = ['console=ttyS0', 'quiet', 'panic=-1', ...(o.kvm ? [] : [TCG_APPEND]), `cube.ip=${GUEST_IP}/24`, `cube.gw=${GATEWAY_IP}`];
  return [
    '-name',
    `cube-${o.id},process=cube-vm`,
    '-M',
    backend ? 'microvm,memory-backend=mem' : 'microvm',
    ...(backend ? ['-object', backend] : []),
    '-accel',
    o.kvm ? 'kvm' : 'tcg,tb-size=32',
    '-m',
    String(o.memoryMiB),
    '-smp',
    String(Math.max(1, Math.ceil(o.cpus))),
    '-nodefaults',
    '-no-user-config',
    '-display',
    'none',
    '-no-reboot',
    // Confinement: a seccomp filter without new processes, resource control or obsolete calls;
    // an unprivileged uid of its own once it opened its files (which drops every capability;
    // libseccomp sets no_new_privs); an empty root directory. QEMU 7.2 installs the filter before
    // it changes uid, so `elevateprivileges=deny` kills it at -runas's setgid (SIGSYS, measured
    // here), and with -daemonize at setsid: it runs in the foreground and may call set*id, which
    // without a capability only moves between its own ids (execve is denied, so no setuid binary).
    '-sandbox',
    'on,obsolete=deny,spawn=deny,resourcecontrol=deny',
    '-runas',
    `${o.uid}:${o.uid}`,
    '-chroot',
    join(o.dir, JAIL),
    '-chardev',
    `socket,id=con,path=${join(o.dir, CONSOLE_SOCKET)},server=on,wait=off`,
    '-serial',
    'chardev:con',
    '-kernel',
    o.kernel,
    '-initrd',
    o.initrd,
    '-append',
    append.join(' '),
    // The disks as descriptors launchQemu() opens (FD_*): a chrooted QEMU cannot reopen them by path,
    // which it does to drop write access at the end of a migration out and to take it back at
    // the end of one in ("bdrv_inactivate_all() failed"); a set holds a descriptor per access mode.
    // No image locking: the two descriptors are two open files of one disk, whose locks then
    // refuse the write access back after a snapshot's migration ('Failed to get "write" lock'
    // at `cont`); each writable disk is its VM's alone, and the template image is read-only.
    '-add-fd',
    `fd=${FD_IMAGE},set=1`,
    '-add-fd',
    `fd=${FD_DISK_RW},set=2`,
    '-add-fd',
    `fd=${FD_DISK_RO},set=2`,
    '-drive',
    'file=/dev/fdset/1,format=raw,if=none,readonly=on,id=root,file.locking=off',
    '-device',
    'virtio-blk-device,drive=root',
    '-drive',
    'file=/dev/fdset/2,format=qcow2,if=none,id=rw,discard=unmap,file.locking=off',
    '-device',
    'virtio-blk-device,drive=rw',
    '-netdev',
    o.net === 'tap' ? `tap,id=n0,ifname=${TAP_NAME},script=no,downscript=no,vhost=off` : 'hubport,id=n0,hubid=0',
    '-device',
    'virtio-net-device,netdev=n0,mac=02:00:0a:00:02:0f',
    '-device',
    'virtio-serial-device',
    '-chardev',
    `socket,id=agent,path=${join(o.dir, 'a.sock')},server=on,wait=off`,
    '-device',
    'virtserialport,chardev=agent,name=cube.agent',
    ...volumeDeviceArgs(o.dir, o.volumes ?? 0),
    '-qmp',
    `unix:${join(o.dir, 'q.sock')},server=on,wait=off`,
    ...(o.incoming ? ['-incoming', 'defer'] : []),
  ];
}

/** Descriptors QEMU starts with (launchQemu): a saved state to load (else /dev/null), the template image, the writable disk read-write and read-only. */
const FD_STATE = 3;
const FD_IMAGE = 4;
const FD_DISK_RW = 5;
const FD_DISK_RO = 6;

/** QEMU's root directory after its start (empty, root's; the only thing made in it is a migration's socket). */
export const JAIL = 'jail';
/** The socket a VM's state is migrated through (in its jail: QEMU sees it at `/m.sock`). */
const MIGRATION_SOCKET = 'm.sock';
/**
 * What QEMU may use as root before it drops to its uid: chroot, the uid change, and the TAP
 * (TUNSETIFF on a device it does not own). Everything else is out of its bounding set.
 */
const QEMU_CAPS = '-all,+setuid,+setgid,+sys_chroot,+net_admin';

/** Where QEMU of `dir` migrates through: the host's path and QEMU's (inside its jail, or the same for an older cubed's unconfined QEMU). */
export function migrationSocket(dir: string, args: readonly string[]): { host: string; qemu: string } {
  return args.includes('-chroot')
    ? { host: join(dir, JAIL, MIGRATION_SOCKET), qemu: `/${MIGRATION_SOCKET}` }
    : { host: join(dir, MIGRATION_SOCKET), qemu: join(dir, MIGRATION_SOCKET) };
}

/** An older cubed's argv (QEMU daemonized itself): run in the foreground as launchQemu() expects. */
function foreground(args: readonly string[]): string[] {
  const out = [...args];
  const pidfile = out.indexOf('-pidfile');
  if (pidfile >= 0) out.splice(pidfile, 2);
  return out.filter((a) => a !== '-daemonize');
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Starts QEMU in the foreground of a process of its own (its own session: it outlives cubed):
 * a shell joins the sandbox's cgroups, takes the sandboxes' oom_score_adj, enters the slot's
 * netns (when given: its TAP is ready there; after the cgroups, so nothing of the sandbox is ever
 * in the netns outside them: RuntimeDriver.destroy) and execs QEMU with a bounding set of what it
 * needs as root before it drops to its uid. `state`: a saved VM state handed to QEMU as fd 3,
 * for `restore`. Resolves with QEMU's pid once it serves QMP (its start is over: files open,
 * chroot and uid change done); its stderr goes to the VM's console log.
 */
export async function launchQemu(
  dir: string,
  args: string[],
  o: { netnsPath?: string | undefined; procs: string[]; files: VmFiles | undefined; state?: string; console: ConsoleLog },
): Promise<number> {
  const { netnsPath, procs, files, state } = o;
  await mkdir(join(dir, JAIL), { recursive: true, mode: 0o711 });
  await chmod(join(dir, JAIL), 0o711);
  const [cmd, ...argv] = sandboxProcess(QEMU, QEMU_CAPS, procs, foreground(args), { netns: netnsPath });
  // At FD_STATE, FD_IMAGE, FD_DISK_RW, FD_DISK_RO.
  const fds = await Promise.all([
    open(state ?? '/dev/null', 'r'),
    open(files?.image ?? '/dev/null', 'r'),
    open(files?.disk ?? '/dev/null', 'r+'),
    open(files?.disk ?? '/dev/null', 'r'),
  ]);
  let child: ChildProcess;
  try {
    child = spawn(cmd!, argv, { stdio: ['ignore', 'ignore', 'pipe', ...fds.map((f) => f.fd)], cwd: dir, detached: true });
  } finally {
    await Promise.all(fds.map((f) => f.close()));
  }
  child.unref();
  const con = o.console;
  let err = '';
  child.stderr!.on('data', (d: Buffer) => {
    if (err.length < 4096) err += d.toString();
    con.write(d);
  });
  (child.stderr as unknown as { unref?: () => void }).unref?.();
  const exited = new Promise<never>((_, reject) => {
    child.once('error', reject);
    child.once('exit', (code, signal) => reject(new CubeError('CREATE_FAILED', `QEMU did not start (${signal ?? `exit ${code}`}): ${err.trim()}`)));
  });
  exited.catch(() => undefined); // raced below against the launch; not unhandled when QEMU outlives it
  const deadline = Date.now() + LAUNCH_TIMEOUT_MS;
  for (;;) {
    const ready = await Promise.race([
      Qmp.open(join(dir, 'q.sock'), 2000).then(
        (q) => (q.close(), true),
        () => false,
      ),
      exited,
    ]);
    if (ready) break;
    if (Date.now() > deadline) {
      killPid(child.pid!);
      throw new CubeError('CREATE_FAILED', `QEMU did not answer on QMP: ${err.trim()}`);
    }
    await Promise.race([sleep(10), exited]);
  }
  con.attach();
  return child.pid!;
}

/**
 * Migrates the stopped VM to `path` (the stream `restore` loads), through a socket the daemon
 * listens on (`via`: QEMU may not start a process, so no `exec:`; a confined QEMU reaches it in
 * its jail, as its uid: the socket is that uid's alone). With x-ignore-shared, RAM in a shared file
 * (a snapshot source) is left out; private RAM is written. Unthrottled: QEMU's default migration
 * bandwidth (128 MiB/s) would make a release pause of a 512 MiB guest take seconds.
 */
export async function saveState(q: Qmp, path: string, via: { host: string; qemu: string; uid?: number }): Promise<void> {
  await rm(via.host, { force: true });
  const server = createServer();
  let written: Promise<void> | undefined;
  const connected = new Promise<void>((resolve) =>
    server.once('connection', (sock) => {
      server.close();
      written = pipeline(sock, createWriteStream(path));
      written.catch(() => undefined); // awaited by the caller, who reports its error
      resolve();
    }),
  );
  await new Promise<void>((resolve, reject) => server.once('error', reject).listen(via.host, resolve));
  try {
    if (via.uid !== undefined) await chown(via.host, via.uid, via.uid);
    await chmod(via.host, 0o600);
    await q.run('migrate-set-capabilities', { capabilities: [{ capability: 'x-ignore-shared', state: true }] });
    await q.run('migrate-set-parameters', { 'max-bandwidth': 64 * 1024 ** 3 });
    await q.run('migrate', { uri: `unix:${via.qemu}` });
    for (;;) {
      const m = await q.run<{ status?: string; 'error-desc'?: string }>('query-migrate');
      if (m.status === 'completed') break;
      if (m.status === 'failed' || m.status === 'cancelled') throw new Error(`saving the VM state: ${m['error-desc'] ?? m.status}`);
      await sleep(10);
    }
    await connected;
    await written;
  } finally {
    server.close();
    await rm(via.host, { force: true });
  }
}

/** Loads the saved state QEMU was given as fd 3 (a clone from the snapshot, or a resume from released memory) and runs it. */
export async function restore(qmpSock: string): Promise<void> {
  await withQmp(qmpSock, async (q) => {
    await q.run('migrate-set-capabilities', { capabilities: [{ capability: 'x-ignore-shared', state: true }] });
    await q.run('migrate-incoming', { uri: `fd:${FD_STATE}` });
    // The source was stopped when saved, so the clone stays paused until `cont` (runtime-probe.md §6.4).
    for (;;) {
      const s = await q.run<{ status: string }>('query-status');
      if (s.status === 'paused' || s.status === 'postmigrate' || s.status === 'prelaunch') break;
      if (s.status !== 'inmigrate') throw new Error(`loading the saved state: VM is ${s.status}`);
      await sleep(5);
    }
    await q.run('cont');
  });
}

export function killPid(pid: number): void {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // already gone
  }
}
