// What the microvm runtime needs of its host (pure where it can be): the guest artefacts, a usable
// KVM, the tools on PATH, and the memory and disk a VM takes beyond its guest's.
import { accessSync, constants as fsConstants, existsSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../../config/loader.js';
import { CubeError } from '../../errors.js';

/**
 * A VM disk's subvolume limit: the guest's filesystem is disk_gib, and its qcow2 file can hold a
 * little more (L2 and refcount tables, about 0.2% at 64 KiB clusters, and btrfs's own metadata).
 */
export function diskLimitBytes(diskGiB: number): number {
  return diskGiB * 1024 ** 3 + 64 * 1024 ** 2;
}

/** Why a VM of `memoryMiB` cannot run on a node of `nodeMiB`, or undefined when it fits (pure). */
export function memoryRefusal(memoryMiB: number, nodeMiB: number | undefined): string | undefined {
  if (nodeMiB === undefined || memoryMiB + QEMU_OVERHEAD_MIB <= nodeMiB) return undefined;
  return `a microVM of ${memoryMiB} MiB (+${QEMU_OVERHEAD_MIB} MiB for QEMU) does not fit this node's ${nodeMiB} MiB of memory: guest memory is really allocated, not a limit`;
}

/** Where the driver's guest artefacts are, and whether they are built. */
export function microvmArtifacts(buildDir = join(packageRoot(), 'build', 'microvm')): { kernel: string; initrd: string; missing?: string } {
  const kernel = join(buildDir, 'vmlinuz');
  const initrd = join(buildDir, 'initramfs.gz');
  const missing = [kernel, initrd].filter((p) => !existsSync(p));
  return {
    kernel,
    initrd,
    ...(missing.length ? { missing: `${missing.join(', ')} missing: build them with 'npm run build' (needs busybox-static and apt-get)` } : {}),
  };
}

/**
 * Whether KVM can run our guest: /dev/kvm usable by this process and a hardware backend
 * (kvm_intel or kvm_amd) loaded. A nested host may expose /dev/kvm through kvm_pvm only, which
 * runs PVM-patched guest kernels: Debian's cloud kernel under it stops after "Probing EDD"
 * (measured on these machines: 40 s without a console line), so that counts as no KVM.
 */
export function kvmUsable(modules = '/sys/module'): boolean {
  try {
    accessSync('/dev/kvm', fsConstants.R_OK | fsConstants.W_OK);
  } catch {
    return false;
  }
  return kvmBackend((name) => existsSync(join(modules, name))) !== undefined;
}

/** The hardware KVM backend loaded, if any (pure over `loaded`). */
export function kvmBackend(loaded: (module: string) => boolean): 'kvm_intel' | 'kvm_amd' | undefined {
  return (['kvm_intel', 'kvm_amd'] as const).find(loaded);
}

/** QEMU's own memory beside the guest's (TCG translation cache 32 MiB + device model): the cgroup limit adds it. */
export const QEMU_OVERHEAD_MIB = 160;

export function onPath(cmd: string): boolean {
  return (process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin').split(':').some((d) => existsSync(join(d, cmd)));
}

/**
 * The sandboxes' oom_score_adj (native/launch/init.c SANDBOX_OOM_SCORE_ADJ): a QEMU is a sandbox,
 * so the host's OOM killer takes it before cubed (-900) and host services (0).
 */
const SANDBOX_OOM_SCORE_ADJ = 500;

/**
 * The argv of a process of a sandbox (sh -c WRAPPER sh <n> <n cgroup.procs files> <argv...>): a
 * shell joins the sandbox's cgroups, takes the sandboxes' oom_score_adj, runs `setup` (shell
 * lines) and execs `program` with a bounding set of `caps`; with `after`, it runs the program
 * instead and then those lines (the shell stays, waiting, in the sandbox's cgroups). `netns`: the
 * program enters that network namespace (nsenter), after the cgroups, so nothing of the sandbox
 * is ever in the netns outside them (RuntimeDriver.destroy).
 */
export function sandboxProcess(
  program: string,
  caps: string,
  procs: string[],
  args: string[],
  o: { setup?: string[]; after?: string[]; netns?: string | undefined } = {},
): string[] {
  if (o.netns !== undefined && !/^[\w./-]+$/.test(o.netns)) throw new CubeError('INTERNAL', `unexpected netns path ${JSON.stringify(o.netns)}`);
  const run = `${o.netns !== undefined ? `nsenter --net=${o.netns} -- ` : ''}setpriv --bounding-set ${caps} ${program} "$@"`;
  const wrapper = [
    'n=$1; shift; i=0',
    'while [ $i -lt $n ]; do echo $$ > "$1" || exit 1; shift; i=$((i+1)); done',
    `echo ${SANDBOX_OOM_SCORE_ADJ} > /proc/self/oom_score_adj || exit 1`,
    ...(o.setup ?? []),
    ...(o.after ? [run, ...o.after] : [`exec ${run}`]),
  ].join('\n');
  return ['sh', '-c', wrapper, 'sh', String(procs.length), ...procs, ...args];
}
