// Compiles the C helpers into build/ (each skipped when its binary is newer than its source):
// native/launch/*.c -> build/cube-launch (the ns runtime's launcher, host side: one binary, a file
// per concern, native/launch/launch.h between them),
// native/cube-agent.c -> build/cube-agent (the microvm guest agent, packed into the initramfs),
// native/cube-layer.c -> build/cube-layer (overlayfs whiteouts and opaque dirs for the layer store).
// Linked statically: cube-launch runs as host root with an environment chosen inside the sandbox,
// so no dynamic loader may act on it (see the header of the C file); cube-agent runs in a guest
// whose root filesystem is the template's, which may have no (or another) libc.
import { spawnSync } from 'node:child_process';
import { mkdirSync, readdirSync, renameSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const launchDir = join(root, 'native', 'launch');
const launchFiles = readdirSync(launchDir).sort();
/** Each program's sources (compiled together) and the files its binary depends on (headers too). */
const programs = [
  {
    name: 'cube-launch',
    sources: launchFiles.filter((f) => f.endsWith('.c')).map((f) => join(launchDir, f)),
    inputs: launchFiles.map((f) => join(launchDir, f)),
  },
  ...['cube-agent', 'cube-layer'].map((name) => {
    const src = join(root, 'native', `${name}.c`);
    return { name, sources: [src], inputs: [src] };
  }),
];

function mtime(path) {
  try {
    return statSync(path).mtimeMs;
  } catch {
    return -1;
  }
}

const cc = process.env.CC || 'cc';
let checked = false;
for (const { name, sources, inputs } of programs) {
  const out = join(root, 'build', name);
  if (inputs.every((input) => mtime(out) >= mtime(input))) continue;
  if (!checked && spawnSync(cc, ['--version'], { stdio: 'ignore' }).error) {
    console.error(`build:native: no C compiler ('${cc}' not found): install one, e.g. apt-get install gcc libc6-dev`);
    process.exit(1);
  }
  checked = true;
  mkdirSync(dirname(out), { recursive: true });
  // Built beside and renamed into place: test files may build concurrently while another runs the helper.
  const tmp = `${out}.${process.pid}.tmp`;
  const args = ['-O2', '-Wall', '-Wextra', '-static', '-o', tmp, ...sources];
  const r = spawnSync(cc, args, { stdio: 'inherit' });
  if (r.status !== 0) {
    console.error(`build:native: '${cc} ${args.join(' ')}' failed (a static build needs libc6-dev's libc.a)`);
    process.exit(1);
  }
  renameSync(tmp, out);
  console.log(`build:native: built ${out}`);
}
