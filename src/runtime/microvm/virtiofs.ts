// Volumes in microVMs: each mount is a virtio-fs device (QEMU's vhost-user-fs-device, the
// virtio-mmio form `-M microvm` takes) served by a virtiofsd of its own (QEMU 7.2's C daemon,
// package qemu-system-common) whose shared directory is the volume's subvolume. The guest agent
// loads fuse and virtiofs and mounts the device's tag (native/cube-agent.c, T_MOUNT).
//
// virtiofsd runs as root (it creates files with the ids the guest asks for, so a volume's files keep
// 0 and 1000 on disk, as ns sandboxes store them through their idmapped mounts: a volume moves
// between runtimes unchanged; it has no uid translation to give it a sandbox's range instead).
// It is confined as far as it goes: its own mount, pid and net namespaces with the volume as its
// root (sandbox=namespace), its seccomp filter, a bounding set of what that needs, then its
// capabilities dropped to the file ones minus mknod and setfcap; in the sandbox's cgroups (its
// memory and pids count there, and the cgroup's kill ends it with QEMU) at the sandboxes'
// oom_score_adj, with a bounded number of descriptors (it holds one per inode the guest knows).
import { spawn } from 'node:child_process';
import { open, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { CubeError } from '../../errors.js';
import type { LaunchSpec, VolumeHost } from '../types.js';
import type { Cgroups } from '../ns/cgroups.js';
import { sandboxProcess } from './host.js';

export const VIRTIOFSD = '/usr/lib/qemu/virtiofsd';

/** A volume mounted in a VM: its host directory and the path inside the guest. */
export interface VmVolume {
  volumeID: string;
  source: string;
  path: string;
}

/** The virtio-fs tag of the VM's `i`-th volume (what the guest mounts). */
export const volumeTag = (i: number): string => `cube-vol${i}`;

/** The vhost-user socket of the VM's `i`-th volume, in its directory (QEMU connects before it chroots). */
export const volumeSocket = (dir: string, i: number): string => join(dir, `vfs${i}.sock`);

/** The longest socket name in a VM's directory (for the path-length check). */
export const LONGEST_SOCKET = 'vfs99.sock';

/** Descriptors a virtiofsd may hold: an O_PATH one per inode the guest looked up, plus open files. */
const VIRTIOFSD_NOFILE = 65_536;
/**
 * What virtiofsd needs as root before it drops to its file capabilities: namespaces and
 * pivot_root (sys_admin), dropping its bounding set (setpcap), then the file ones it keeps.
 */
const VIRTIOFSD_CAPS = '-all,+sys_admin,+setpcap,+chown,+dac_override,+fowner,+fsetid,+setgid,+setuid';
const READY_TIMEOUT_MS = 10_000;

/**
 * virtiofsd's argv (pure). cache=auto with timeout=0: the guest asks again for a file's attributes
 * and names at each stat and lookup and drops a file's cached data at each open, so it sees the
 * writes of the other sandboxes sharing the volume as an ns sandbox does (at its next open or
 * stat; with the default one-second timeout a read right after another sandbox appended stopped
 * at the old size). cache=none would also send every read through the emulated virtqueue and
 * refuse shared mappings of the volume's files (FUSE direct I/O: SQLite's WAL index fails).
 * no_posix_lock, no_flock: locks would hold in this guest only. No xattrs (nor ACLs): ns
 * sandboxes have none on volumes, and the guest could otherwise set trusted.* names on the host.
 */
export function virtiofsdArgs(socket: string, source: string): string[] {
  return [
    `--socket-path=${socket}`,
    '-o',
    `source=${source},sandbox=namespace,cache=auto,timeout=0,no_xattr,no_posix_lock,no_flock,modcaps=-mknod:-setfcap`,
    '--rlimit-nofile=0',
  ];
}

/**
 * QEMU's devices for `n` volumes (pure): a vhost-user chardev and a virtio-fs device each. The
 * virtio-mmio transports speak virtio 1.0 then (QEMU 7.2 gives legacy ones by default, which
 * virtiofsd refuses: "virtio legacy devices aren't supported by libvhost-user"); a VM without
 * volumes keeps legacy ones, as its memory snapshot was made with.
 */
export function volumeDeviceArgs(dir: string, n: number): string[] {
  if (!n) return [];
  return [
    '-global',
    'virtio-mmio.force-legacy=false',
    ...Array.from({ length: n }, (_, i) => [
      '-chardev',
      `socket,id=vfs${i},path=${volumeSocket(dir, i)}`,
      '-device',
      `vhost-user-fs-device,chardev=vfs${i},tag=${volumeTag(i)}`,
    ]).flat(),
  ];
}

/** Whether /proc/net/unix (`table`) shows a socket listening at `path` (pure): __SO_ACCEPTCON in its flags. */
export function listening(table: string, path: string): boolean {
  return table.split('\n').some((line) => {
    const f = line.trim().split(/\s+/);
    return f.length >= 8 && f[7] === path && (parseInt(f[3]!, 16) & 0x10000) !== 0;
  });
}

/**
 * The host directories of the volumes a create mounts, checked before anything is made: 422 on
 * a node without volumes or virtiofsd, or from a kept snapshot (its guest resumes without the devices, which
 * virtio-mmio cannot add to a running guest), 404 for a volume gone meanwhile.
 */
export function volumeSources(spec: Pick<LaunchSpec, 'volumes' | 'fromSnapshot'>, volumes: VolumeHost | undefined): VmVolume[] {
  const asked = spec.volumes ?? [];
  if (!asked.length) return [];
  if (!volumes) throw new CubeError('VOLUME_RUNTIME', 'the microvm runtime of this node cannot mount volumes: it has no store (a node offering ns too)');
  // QEMU 7.2's C daemon (Debian 12's qemu-system-common); later QEMUs ship none (a separate virtiofsd, other options).
  if (!existsSync(VIRTIOFSD))
    throw new CubeError('VOLUME_RUNTIME', `the microvm runtime of this node cannot mount volumes: ${VIRTIOFSD} (package qemu-system-common) is missing`);
  if (spec.fromSnapshot !== undefined)
    throw new CubeError('VOLUME_RUNTIME', 'a microVM made from a snapshot cannot mount volumes: its guest resumes without the virtio-fs devices');
  return asked.map((v) => {
    const source = volumes!.dir(v.volumeID);
    if (!existsSync(source)) throw new CubeError('NOT_FOUND', `volumeMounts: volume ${v.volumeID} was deleted while the sandbox was being made`);
    return { volumeID: v.volumeID, source, path: v.path };
  });
}

/**
 * QEMU 7.2 cannot migrate a virtio-fs device (vhost-user-fs is unmigratable): a VM with volumes
 * cannot save its memory and device state, so a snapshot of it is refused with 409 before
 * anything is stopped (a releasing pause keeps its memory instead: driver.ts pause).
 */
export function assertMigratable(sandboxID: string, volumes: unknown[] | undefined): void {
  if (volumes?.length)
    throw new CubeError('CONFLICT', `sandbox ${sandboxID} mounts volumes: no snapshot of it can be taken (QEMU cannot save a virtio-fs device)`);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** What the shell that started a virtiofsd writes in its log when it ends (then its status). */
const ENDED = 'virtiofsd ended with status';

/**
 * Why a VM with volumes died, when a virtiofsd of it ended abnormally and took the sandbox with it
 * (its log says so, with a status other than 0: a virtiofsd whose QEMU went first ends with 0),
 * as a clause for the death reason; '' otherwise.
 */
export function virtiofsdEnded(dir: string): string {
  try {
    for (const f of readdirSync(dir).filter((n) => /^vfs\d+\.log$/.test(n))) {
      const status = new RegExp(`${ENDED} (\\d+)`).exec(readFileSync(join(dir, f), 'utf8'))?.[1];
      if (status !== undefined && status !== '0') return ` (killed with its sandbox: the virtiofsd of volume ${f.slice(3, -4)} ended with status ${status})`;
    }
  } catch {
    // its directory gone meanwhile: nothing to add
  }
  return '';
}

/**
 * Starts the virtiofsd of the VM's `i`-th volume as a process of its own session (it outlives
 * cubed, as QEMU does, and ends when QEMU closes its socket or the sandbox's cgroup is killed),
 * its messages in <dir>/vfs<i>.log. A virtiofsd that ends otherwise (killed, crashed) kills the
 * sandbox's cgroup (`cgroups` of sandbox `id`): the guest's mount could only hang, so the sandbox
 * dies with QEMU, its death seen and reported as any QEMU's. Started before QEMU, whose chardev
 * connects at its start; resolves with its pid once it listens (a probe connection would be taken
 * as QEMU's).
 */
export async function startVirtiofsd(dir: string, i: number, source: string, cgroups: Pick<Cgroups, 'procsFiles' | 'dir'>, id: string): Promise<number> {
  const socket = volumeSocket(dir, i);
  const log = await open(join(dir, `vfs${i}.log`), 'a');
  let pid: number | undefined;
  let exited: string | undefined;
  try {
    const [cmd, ...argv] = sandboxProcess(VIRTIOFSD, VIRTIOFSD_CAPS, cgroups.procsFiles(id), virtiofsdArgs(socket, source), {
      // Its soft limit raised to the hard one it has (a raise past that needs CAP_SYS_RESOURCE), at most VIRTIOFSD_NOFILE.
      setup: [`h=$(ulimit -Hn); if [ "$h" = unlimited ] || [ "$h" -gt ${VIRTIOFSD_NOFILE} ]; then h=${VIRTIOFSD_NOFILE}; fi; ulimit -n $h || exit 1`],
      after: [`echo "${ENDED} $?: the sandbox's cgroup is killed"`, `echo 1 > ${join(cgroups.dir('unified', id), 'cgroup.kill')}`],
    });
    const child = spawn(cmd!, argv, {
      stdio: ['ignore', log.fd, log.fd],
      cwd: dir,
      detached: true,
    });
    child.once('exit', (code, signal) => (exited = signal ?? `exit ${code}`));
    child.once('error', (e) => (exited = e.message));
    child.unref();
    pid = child.pid;
  } finally {
    await log.close();
  }
  const deadline = Date.now() + READY_TIMEOUT_MS;
  for (;;) {
    if (exited !== undefined || pid === undefined) {
      const said = await readFile(join(dir, `vfs${i}.log`), 'utf8').catch(() => '');
      throw new CubeError('CREATE_FAILED', `virtiofsd of volume ${i} did not start (${exited ?? 'no pid'}): ${said.trim().slice(-500)}`);
    }
    if (listening(await readFile('/proc/net/unix', 'utf8'), socket)) return pid;
    if (Date.now() > deadline) throw new CubeError('CREATE_FAILED', `virtiofsd of volume ${i} did not listen on ${socket} within ${READY_TIMEOUT_MS} ms`);
    await sleep(5);
  }
}
