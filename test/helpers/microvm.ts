// For microvm tests: whether the guest artefacts are built (npm run build), and a minimal image
// template (busybox applets, bash and its libraries from the host, the generated /etc) registered
// in a daemon's data dir, since the `host` template borrows the host's /usr and cannot boot.
import { execFileSync } from 'node:child_process';
import { chmodSync, chownSync, copyFileSync, existsSync, mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { microvmArtifacts } from '../../src/runtime/microvm/host.js';
import { TemplateStore, hostEtc } from '../../src/templates/store.js';
import type { TemplateConfig } from '../../src/runtime/types.js';

/** Why microvm tests cannot run here, or undefined when they can. */
export function microvmUnavailable(): string | undefined {
  return microvmArtifacts().missing;
}

/**
 * Builds a small bootable root filesystem in `dir` and registers it as directory template `name`
 * in `dataDir` (a running daemon reads its template index at start: restart it afterwards).
 */
export async function registerVmTemplate(dataDir: string, name: string, dir: string, config: Partial<TemplateConfig> = {}): Promise<void> {
  const r = (p: string) => join(dir, p);
  for (const d of ['bin', 'etc', 'home/user', 'root', 'tmp', 'proc', 'sys', 'dev', 'usr/bin', 'var/tmp']) mkdirSync(r(d), { recursive: true });
  chownSync(r('home/user'), 1000, 1000);
  for (const t of ['tmp', 'var/tmp']) chmodSync(r(t), 0o1777);
  copyFileSync('/bin/busybox', r('bin/busybox'));
  const applets = execFileSync('/bin/busybox', ['--list'], { encoding: 'utf8' })
    .split('\n')
    .filter((a) => a && a !== 'busybox');
  for (const a of applets) symlinkSync('busybox', r(`bin/${a}`));
  copyFileSync('/bin/bash', r('bin/bash'));
  chmodSync(r('bin/bash'), 0o755);
  chmodSync(r('bin/busybox'), 0o755);
  for (const lib of execFileSync('ldd', ['/bin/bash'], { encoding: 'utf8' }).match(/\/\S+\.so[.\d]*/g) ?? []) {
    mkdirSync(r(dirname(lib).slice(1)), { recursive: true });
    copyFileSync(lib, r(lib.slice(1)));
  }
  for (const [file, [content, mode]] of Object.entries(hostEtc())) writeFileSync(r(`etc/${file}`), content, { mode });
  if (!existsSync(r('bin/sh'))) throw new Error('template without /bin/sh');
  await new TemplateStore(dataDir).registerTemplate(name, dir, config);
}
