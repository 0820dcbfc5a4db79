#!/usr/bin/env node
// Builds the code-interpreter-v1 template image from Debian packages: a minbase bookworm root
// filesystem with python3-ipykernel, python3-jupyter-client, python3-matplotlib and nodejs
// (mmdebstrap, from the machine's Debian mirror) and the `user` account, then our interpreter
// (server.py, cube_charts.py, js_kernel.cjs) as a layer of its own, written as a docker-archive
// that `cubectl template import` takes.
//
//   node recipes/code-interpreter/build.mjs [--out FILE]   builds; prints the archive's path
//   node recipes/code-interpreter/build.mjs --import       builds, then imports it into the cubed that
//                                                          cubectl reaches (CUBE_API_URL), with its start
//                                                          and ready commands (npm run template:code-interpreter)
//
// The root filesystem and the archive are cached under /var/cache/cubed/templates (CUBE_TEMPLATE_CACHE):
// a second run costs nothing, and one after editing the interpreter's files about 2 s. The first one
// downloads the packages: 3.1 min here at a load of 10 (69 s of CPU), for a 695 MiB archive; without
// matplotlib and nodejs it was 2.3 min (42 s of CPU) and 342 MiB.
import { createHash } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { copyFileSync, createReadStream, existsSync, linkSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const NAME = 'code-interpreter-v1';
// python3-munkres: it satisfies python3-fonttools' `python3-scipy | python3-munkres` (matplotlib
// needs fonttools), which apt would otherwise take with scipy and, through pythran, gcc, g++ and
// boost: the root filesystem was 1.36 GB that way (4.7 min to build), 729 MB with munkres.
const PACKAGES = ['python3-ipykernel', 'python3-jupyter-client', 'python3-matplotlib', 'python3-munkres', 'nodejs', 'ca-certificates', 'procps'];
// The interpreter's own files, a second layer over the packages' root filesystem: editing them
// rebuilds that small layer in a second, not the root filesystem (minutes of mmdebstrap).
const APP_FILES = ['server.py', 'cube_charts.py', 'js_kernel.cjs'];
const APP_DIR = 'opt/cube/code-interpreter';
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

const hooks = [
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
// by its packages and hooks; the archive by that, the interpreter's files and the image config.
const layerKey = hash(PACKAGES, hooks);
const appFiles = APP_FILES.map((name) => [name, readFileSync(join(here, name), 'utf8')]);
const outArg = process.argv.indexOf('--out');
const cacheDir = process.env.CUBE_TEMPLATE_CACHE ?? '/var/cache/cubed/templates';
const out = outArg > 0 ? process.argv[outArg + 1] : join(cacheDir, `${NAME}-${hash(layerKey, appFiles, config)}.tar`);
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
    const app = join(work, APP_DIR);
    mkdirSync(app, { recursive: true });
    for (const [name, text] of appFiles) writeFileSync(join(app, name), text);
    const tarOpts = ['--sort=name', '--mtime=@0', '--owner=0', '--group=0', '--numeric-owner'];
    run('tar', [...tarOpts, '--mode=go-w', '-cf', join(work, 'app.tar'), '-C', work, 'opt']);
    const diffIDs = [await sha256File(layer), await sha256File(join(work, 'app.tar'))];
    const image = { ...config, rootfs: { type: 'layers', diff_ids: diffIDs.map((d) => `sha256:${d}`) } };
    const configJson = JSON.stringify(image);
    const configName = `${createHash('sha256').update(configJson).digest('hex')}.json`;
    writeFileSync(join(work, configName), configJson);
    writeFileSync(join(work, 'manifest.json'), JSON.stringify([{ Config: configName, RepoTags: [`${NAME}:latest`], Layers: ['layer.tar', 'app.tar'] }]));
    const tmp = `${out}.${process.pid}.tmp`;
    try {
      linkSync(layer, join(work, 'layer.tar'));
    } catch {
      copyFileSync(layer, join(work, 'layer.tar')); // --out on another filesystem
    }
    run('tar', [...tarOpts, '-cf', tmp, '-C', work, 'manifest.json', configName, 'layer.tar', 'app.tar']);
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
