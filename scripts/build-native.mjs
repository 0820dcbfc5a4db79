// Compiles native/cube-launch.c into build/cube-launch (skipped when the binary is newer than the source).
// Linked statically: the helper runs as host root with an environment chosen inside the sandbox,
// so no dynamic loader may act on it (see the header of the C file).
import { spawnSync } from 'node:child_process';
import { mkdirSync, renameSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const src = join(root, 'native', 'cube-launch.c');
const out = join(root, 'build', 'cube-launch');

function mtime(path) {
  try {
    return statSync(path).mtimeMs;
  } catch {
    return -1;
  }
}

if (mtime(out) >= mtime(src)) process.exit(0);

const cc = process.env.CC || 'cc';
if (spawnSync(cc, ['--version'], { stdio: 'ignore' }).error) {
  console.error(`build:native: no C compiler ('${cc}' not found): install one, e.g. apt-get install gcc libc6-dev`);
  process.exit(1);
}
mkdirSync(dirname(out), { recursive: true });
// Built beside and renamed into place: test files may build concurrently while another runs the helper.
const tmp = `${out}.${process.pid}.tmp`;
const args = ['-O2', '-Wall', '-Wextra', '-static', '-o', tmp, src];
const r = spawnSync(cc, args, { stdio: 'inherit' });
if (r.status !== 0) {
  console.error(`build:native: '${cc} ${args.join(' ')}' failed (a static build needs libc6-dev's libc.a)`);
  process.exit(1);
}
renameSync(tmp, out);
console.log(`build:native: built ${out}`);
