// Builds the guest side of the microvm runtime into build/microvm/ (skipped when up to date):
//   vmlinuz          the kernel of Debian's linux-image-cloud-amd64, fetched with `apt-get download`
//                    and unpacked with `dpkg-deb -x` into build/microvm/kernel (never installed: the
//                    host's /boot and bootloader are untouched)
//   initramfs.gz     busybox-static, the virtio modules the guest needs (they are modules in Debian's
//                    kernel; those of volumes in lib/modules/volumes, loaded by the agent on demand)
//                    and build/cube-agent, with /init below; reproducible: entries sorted,
//                    fixed mtime, uid/gid 0, and a gzip header without a timestamp
// Needs apt-get, dpkg-deb and busybox-static (install.sh installs them). Where they are missing the
// runtime cannot work anyway: the build says so and stops without failing `npm run build`
// (the microvm tests then skip with the same message).
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const out = join(root, 'build', 'microvm');
const debs = join(out, 'debs');
const agent = join(root, 'build', 'cube-agent');
const BUSYBOX = '/bin/busybox';
const META_PACKAGE = 'linux-image-cloud-amd64';

/** Modules insmod'ed by /init, in dependency order (checked below against each module's `depends=`). */
const MODULES = ['virtio_ring', 'virtio', 'virtio_mmio', 'virtio_blk', 'failover', 'net_failover', 'virtio_net', 'virtio_console', 'overlay'];
/**
 * Modules the agent loads only when the host mounts a volume (virtio-fs), in dependency order
 * after MODULES: a guest without volumes neither loads them nor pays for them at boot.
 */
const VOLUME_MODULES = ['fuse', 'virtiofs'];

// The guest's pid 1 until the root is ready. Disks: vda = the template image (read-only ext4),
// vdb = the sandbox's writable ext4 (overlay upper). Network: eth0 on the TAP, with the address the
// host puts on the command line (cube.ip=, cube.gw=). Then the agent takes over as pid 1.
const INIT = `#!/bin/busybox sh
B=/bin/busybox
$B mount -t proc proc /proc
$B mount -t sysfs sys /sys
$B mount -t devtmpfs dev /dev
for m in ${MODULES.join(' ')}; do $B insmod /lib/modules/$m.ko || echo "cube-init: insmod $m failed"; done
fail() { echo "cube-init: $*"; $B sleep 1; $B poweroff -f; }
for a in $($B cat /proc/cmdline); do case "$a" in cube.ip=*) IP=\${a#cube.ip=};; cube.gw=*) GW=\${a#cube.gw=};; esac; done
i=0; while [ ! -b /dev/vdb ] && [ $i -lt 500 ]; do $B usleep 10000; i=$((i+1)); done
$B mount -t ext4 -o ro /dev/vda /lower || fail "cannot mount the template image (vda)"
$B mount -t ext4 -o noatime /dev/vdb /rw || fail "cannot mount the writable disk (vdb)"
$B mkdir -p /rw/upper /rw/work
$B mount -t overlay overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work /newroot || fail "overlay mount failed"
$B mkdir -p /newroot/proc /newroot/sys /newroot/dev /newroot/tmp
$B mount -t proc proc /newroot/proc
$B mount -t sysfs sys /newroot/sys
$B mount -t devtmpfs dev /newroot/dev
$B mkdir -p /newroot/dev/pts /newroot/dev/shm
$B mount -t devpts -o newinstance,ptmxmode=0666,mode=0620,gid=5 devpts /newroot/dev/pts
$B ln -sf pts/ptmx /newroot/dev/ptmx
$B mount -t tmpfs -o mode=1777 shm /newroot/dev/shm
$B ip link set lo up
if [ -n "$IP" ]; then $B ip addr add "$IP" dev eth0 && $B ip link set eth0 up && $B ip route add default via "$GW"; fi
exec /bin/cube-agent /newroot
`;

const say = (m) => console.log(`build:microvm: ${m}`);
function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', ...opts });
  if (r.error || r.status !== 0) throw new Error(`${cmd} ${args.join(' ')}: ${r.error?.message ?? r.stderr.trim()}`);
  return r.stdout;
}
function have(cmd) {
  return spawnSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' }).status === 0;
}

function missingPrerequisites() {
  const missing = [];
  if (!have('apt-get') || !have('dpkg-deb')) missing.push('apt-get and dpkg-deb (Debian)');
  if (!existsSync(BUSYBOX) || !run('sh', ['-c', `od -An -c -N 4 ${BUSYBOX}`]).includes('E   L   F')) missing.push('busybox-static');
  if (!existsSync(agent)) missing.push('build/cube-agent (npm run build:native)');
  return missing;
}

/** The .deb of `pkg` in build/microvm/debs, downloaded when absent (`apt-get update` once if needed). */
function download(pkg) {
  mkdirSync(debs, { recursive: true });
  const name = pkg.split('=')[0];
  const found = () => readdirSync(debs).find((f) => f.startsWith(`${name}_`) && f.endsWith('.deb'));
  if (found()) return join(debs, found());
  const get = () => spawnSync('apt-get', ['download', '-q', pkg], { cwd: debs, encoding: 'utf8' });
  let r = get();
  if (r.status !== 0) {
    say(`apt-get download ${pkg} failed (${r.stderr.trim().split('\n').pop()}): running apt-get update once`);
    run('apt-get', ['update', '-qq']);
    r = get();
  }
  if (r.status !== 0 || !found()) throw new Error(`apt-get download ${pkg}: ${r.stderr.trim()}`);
  return join(debs, found());
}

/** The kernel: the cloud metapackage names the versioned image package it depends on. */
function fetchKernel() {
  const meta = download(META_PACKAGE);
  const dep = /^(linux-image-[^\s,]+)\s*\(=\s*([^)\s]+)\)/.exec(run('dpkg-deb', ['-f', meta, 'Depends']).trim());
  if (!dep) throw new Error(`${meta}: unexpected Depends`);
  const image = download(`${dep[1]}=${dep[2]}`);
  const kdir = join(out, 'kernel');
  const stamp = join(kdir, '.from');
  if (!existsSync(stamp) || readFileSync(stamp, 'utf8') !== image) {
    rmSync(kdir, { recursive: true, force: true });
    run('dpkg-deb', ['-x', image, kdir]);
    writeFileSync(stamp, image);
  }
  const vmlinuz = readdirSync(join(kdir, 'boot')).find((f) => f.startsWith('vmlinuz-'));
  const kver = vmlinuz.slice('vmlinuz-'.length);
  return { kdir, kver, vmlinuz: join(kdir, 'boot', vmlinuz) };
}

/** `depends=` of a kernel module, from its .modinfo strings. */
function moduleDepends(ko) {
  const m = /\0depends=([^\0]*)\0/.exec(readFileSync(ko).toString('latin1'));
  return m && m[1] ? m[1].split(',') : [];
}

function findModules(kdir, kver) {
  const files = new Map();
  const walk = (d) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      if (e.isDirectory()) walk(join(d, e.name));
      else if (e.name.endsWith('.ko')) files.set(e.name.slice(0, -3), join(d, e.name));
    }
  };
  walk(join(kdir, 'lib', 'modules', kver, 'kernel'));
  const loaded = new Set();
  for (const m of [...MODULES, ...VOLUME_MODULES]) {
    const f = files.get(m);
    if (!f) throw new Error(`kernel ${kver} has no module ${m}`);
    for (const d of moduleDepends(f)) {
      if (!loaded.has(d)) throw new Error(`module ${m} needs ${d}, which MODULES does not load before it`);
    }
    loaded.add(m);
  }
  return [...MODULES.map((m) => [m, files.get(m)]), ...VOLUME_MODULES.map((m) => [`volumes/${m}`, files.get(m)])];
}

// --- cpio (newc), written here so the archive is byte-for-byte reproducible -------------------

const MTIME = 0;
function cpioEntry(name, mode, data = Buffer.alloc(0), rdev = [0, 0]) {
  const hex = (n) => n.toString(16).padStart(8, '0');
  const nameBuf = Buffer.from(`${name}\0`);
  const fields = [0, mode, 0, 0, 1, MTIME, data.length, 0, 0, rdev[0], rdev[1], nameBuf.length, 0];
  const header = Buffer.from(`070701${fields.map(hex).join('')}`);
  const pad = (n) => Buffer.alloc((4 - (n % 4)) % 4);
  return Buffer.concat([header, nameBuf, pad(header.length + nameBuf.length), data, pad(data.length)]);
}

function initramfs(modules) {
  const DIR = 0o040755;
  const FILE = 0o100644;
  const EXE = 0o100755;
  const entries = new Map([
    ['bin', [DIR]],
    ['dev', [DIR]],
    ['dev/console', [0o020600, Buffer.alloc(0), [5, 1]]],
    ['lib', [DIR]],
    ['lib/modules', [DIR]],
    ['lib/modules/volumes', [DIR]],
    ['lower', [DIR]],
    ['newroot', [DIR]],
    ['proc', [DIR]],
    ['rw', [DIR]],
    ['sys', [DIR]],
    ['tmp', [DIR]],
    ['bin/busybox', [EXE, readFileSync(BUSYBOX)]],
    ['bin/sh', [0o120777, Buffer.from('busybox')]],
    ['bin/cube-agent', [EXE, readFileSync(agent)]],
    ['init', [EXE, Buffer.from(INIT)]],
  ]);
  for (const [m, f] of modules) entries.set(`lib/modules/${m}.ko`, [FILE, readFileSync(f)]);
  const names = [...entries.keys()].sort();
  const parts = names.map((n) => cpioEntry(n, ...entries.get(n)));
  parts.push(cpioEntry('TRAILER!!!', 0));
  return gzipSync(Buffer.concat(parts), { level: 6 });
}

function inputsDigest(parts) {
  const h = createHash('sha256');
  for (const p of parts) h.update(typeof p === 'string' && existsSync(p) ? readFileSync(p) : String(p));
  return h.digest('hex');
}

function main() {
  const missing = missingPrerequisites();
  if (missing.length) {
    say(`skipped: missing ${missing.join(', ')} (install.sh installs them); the microvm runtime is unavailable until then`);
    return;
  }
  mkdirSync(out, { recursive: true });
  const { kdir, kver, vmlinuz } = fetchKernel();
  const digest = inputsDigest([fileURLToPath(import.meta.url), agent, BUSYBOX, vmlinuz]);
  const stampFile = join(out, 'inputs.sha256');
  const target = join(out, 'initramfs.gz');
  if (existsSync(target) && existsSync(join(out, 'vmlinuz')) && existsSync(stampFile) && readFileSync(stampFile, 'utf8') === digest) return;
  const modules = findModules(kdir, kver);
  const img = initramfs(modules);
  writeFileSync(`${target}.tmp`, img);
  renameSync(`${target}.tmp`, target);
  rmSync(join(out, 'vmlinuz'), { force: true });
  writeFileSync(join(out, 'vmlinuz.tmp'), readFileSync(vmlinuz));
  renameSync(join(out, 'vmlinuz.tmp'), join(out, 'vmlinuz'));
  writeFileSync(join(out, 'kernel-version'), `${kver}\n`);
  writeFileSync(stampFile, digest);
  say(`built ${target} (${img.length} bytes, sha256 ${createHash('sha256').update(img).digest('hex').slice(0, 16)}) for kernel ${kver}`);
}

try {
  main();
} catch (e) {
  console.error(`build:microvm: ${e.message}`);
  process.exit(1);
}
