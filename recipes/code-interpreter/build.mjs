#!/usr/bin/env node
// Builds the code-interpreter-v1 template image from Debian packages: a minbase bookworm root
// filesystem with python3-ipykernel and python3-jupyter-client (mmdebstrap, from the machine's
// Debian mirror), our interpreter server (server.py) and the `user` account, written as a
// docker-archive that `cubectl template import` takes.
//
//   node recipes/code-interpreter/build.mjs [--out FILE]   builds; prints the archive's path
//   node recipes/code-interpreter/build.mjs --import       builds, then imports it into the cubed that
//                                                          cubectl reaches (CUBE_API_URL), with its start
//                                                          and ready commands (npm run template:code-interpreter)
//
// The root filesystem and the archive are cached under /var/cache/cubed/templates (CUBE_TEMPLATE_CACHE):
// a second run costs nothing. The first one downloads about 100 MB of packages (mmdebstrap took 8.8 min
// here while the machine ran a load of 14; its own CPU time was under 2 min).
import { createHash } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { copyFileSync, createReadStream, existsSync, linkSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const NAME = 'code-interpreter-v1';
const PACKAGES = ['python3-ipykernel', 'python3-jupyter-client', 'ca-certificates', 'procps'];
const START_CMD = 'python3 /opt/cube/code-interpreter/server.py';
const READY_CMD = "python3 -c \"import urllib.request; urllib.request.urlopen('http://127.0.0.1:49999/health', timeout=2)\"";

function die(msg) {
  console.error(`build code-interpreter: ${msg}`);
  process.exit(1);
}

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { stdio: ['ignore', 'inherit', 'inherit'], ...opts });
  if (r.error) die(`${cmd}: ${r.error.message}${r.error.code === 'ENOENT' ? ' (install.sh installs it)' : ''}`);
  if (r.status !== 0) die(`${cmd} ${args.join(' ')} exited ${r.status}`);
}

async function sha256File(path) {
  const h = createHash('sha256');
  for await (const chunk of createReadStream(path)) h.update(chunk);
  return h.digest('hex');
}

const server = join(here, 'server.py');
const hooks = [
  '--customize-hook=mkdir -p "$1/opt/cube/code-interpreter"',
  `--customize-hook=copy-in ${server} /opt/cube/code-interpreter`,
  '--customize-hook=chroot "$1" useradd --create-home --uid 1000 --user-group --shell /bin/bash user',
  // Logs and caches of the build are not part of the template.
  '--customize-hook=rm -rf "$1"/var/log/apt/* "$1"/var/log/dpkg.log "$1"/var/cache/debconf/*-old',
];
const config = {
  architecture: 'amd64',
  os: 'linux',
  created: '1970-01-01T00:00:00Z',
  config: {
    Env: ['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', 'LANG=C.UTF-8'],
    WorkingDir: '/home/user',
    User: 'user',
    Cmd: ['/bin/bash'],
  },
};
const hash = (...parts) => createHash('sha256').update(JSON.stringify(parts)).digest('hex').slice(0, 16);
// Cached by what goes into them, not by this script's text: the root filesystem (the slow part)
// by its packages, hooks and server; the archive by that and the image config.
const layerKey = hash(PACKAGES, hooks.map((h) => h.replace(server, 'server.py')), readFileSync(server, 'utf8'));
const outArg = process.argv.indexOf('--out');
const cacheDir = process.env.CUBE_TEMPLATE_CACHE ?? '/var/cache/cubed/templates';
const out = outArg > 0 ? process.argv[outArg + 1] : join(cacheDir, `${NAME}-${hash(layerKey, config)}.tar`);
if (!out) die('--out needs a file name');
const layer = join(cacheDir, `${NAME}-rootfs-${layerKey}.tar`);

/**
 * One build at a time per cache (npm test starts one early, in the background, and the test that
 * needs the image runs this again): a second run waits for the first, then finds its archive. A
 * lock whose process is gone (killed) is taken over.
 */
async function lockCache() {
  mkdirSync(cacheDir, { recursive: true });
  const lock = join(cacheDir, `${NAME}.lock`);
  for (;;) {
    try {
      writeFileSync(lock, String(process.pid), { flag: 'wx' });
      process.on('exit', () => rmSync(lock, { force: true }));
      return;
    } catch (e) {
      if (e.code !== 'EEXIST') throw e;
    }
    const holder = Number(readFileSync(lock, 'utf8'));
    let alive = false;
    try {
      alive = holder > 0 && process.kill(holder, 0);
    } catch {
      alive = false; // ESRCH: its process is gone
    }
    if (!alive) rmSync(lock, { force: true });
    else await new Promise((r) => setTimeout(r, 500));
  }
}

if (!existsSync(out)) await lockCache();
if (!existsSync(out)) {
  if (process.getuid?.() !== 0) die('run as root (mmdebstrap builds the root filesystem with chroot)');
  mkdirSync(dirname(out), { recursive: true });
  if (!existsSync(layer)) {
    const tmp = `${layer}.${process.pid}.tmp`;
    // --format: mmdebstrap infers the format from the target's name, and `.tmp` made it a directory.
    run('mmdebstrap', ['--variant=minbase', '--format=tar', '--quiet', `--include=${PACKAGES.join(',')}`, ...hooks, 'bookworm', tmp]);
    renameSync(tmp, layer);
  }
  const work = mkdtempSync(join(dirname(out), `.${NAME}-`));
  try {
    const diffID = await sha256File(layer);
    const image = { ...config, rootfs: { type: 'layers', diff_ids: [`sha256:${diffID}`] } };
    const configJson = JSON.stringify(image);
    const configName = `${createHash('sha256').update(configJson).digest('hex')}.json`;
    writeFileSync(join(work, configName), configJson);
    writeFileSync(join(work, 'manifest.json'), JSON.stringify([{ Config: configName, RepoTags: [`${NAME}:latest`], Layers: ['layer.tar'] }]));
    const tmp = `${out}.${process.pid}.tmp`;
    try {
      linkSync(layer, join(work, 'layer.tar'));
    } catch {
      copyFileSync(layer, join(work, 'layer.tar')); // --out on another filesystem
    }
    run('tar', ['--sort=name', '--mtime=@0', '--owner=0', '--group=0', '--numeric-owner', '-cf', tmp, '-C', work, 'manifest.json', configName, 'layer.tar']);
    renameSync(tmp, out);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}
console.log(out);
console.error(`build code-interpreter: ${out} (${Math.round(statSync(out).size / 2 ** 20)} MiB)`);
if (process.argv.includes('--import')) {
  const cubectl = join(here, '..', '..', 'bin', 'cubectl');
  run(process.execPath, [cubectl, 'template', 'import', out, '--name', NAME, '--start-cmd', START_CMD, '--ready-cmd', READY_CMD]);
}
