// A real image registry on this machine for tests: Debian's `docker-registry` package
// (distribution v2), installed here when missing (never by install.sh), started on a free
// loopback port with its storage and config in a temp dir, optionally behind htpasswd auth
// (bcrypt made by python3's crypt module, which uses the system libxcrypt: apache2-utils is not
// needed). Images are pushed into it with skopeo from archives the tests build (./images.ts).
//
//   const reg = await startRegistry({ auth: { username: 'u', password: 'p' } });
//   try { await reg.push(archiveFile, 'team/app:v1') } finally { await reg.stop() }
//
// stop() kills the registry (by its pid) and removes its dir; a registry still running when the
// test process exits is killed then too.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, openSync, closeSync, readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { exited, freePort } from './daemon.js';

const BIN = '/usr/bin/docker-registry';

export interface TestRegistry {
  /** ADDRESS:PORT (127.0.0.1 unless given) */
  host: string;
  port: number;
  dir: string;
  auth?: { username: string; password: string };
  /** The registry's log so far (its access log included). */
  log(): string;
  /** skopeo copy of an archive file (oci-archive or docker-archive, by `transport`) to HOST/REPO:TAG. */
  push(file: string, repoTag: string, transport?: 'oci-archive' | 'docker-archive'): Promise<void>;
  stop(): Promise<void>;
}

/** Installs docker-registry with apt-get when it is missing (a test dependency only). */
export async function ensureRegistryInstalled(): Promise<void> {
  if (existsSync(BIN)) return;
  const r = await execa('apt-get', ['install', '-y', '--no-install-recommends', 'docker-registry'], {
    reject: false,
    env: { DEBIAN_FRONTEND: 'noninteractive' },
  });
  if (r.exitCode !== 0 || !existsSync(BIN)) throw new Error(`could not install docker-registry: ${r.stderr.slice(-500)}`);
}

/** A bcrypt hash of `password` ($2b$, what the registry's htpasswd reads), or undefined when this machine cannot make one. */
export async function bcrypt(password: string): Promise<string | undefined> {
  const py = await execa('python3', ['-W', 'ignore', '-c', 'import crypt,sys; print(crypt.crypt(sys.stdin.read(), crypt.mksalt(crypt.METHOD_BLOWFISH)))'], {
    input: password,
    reject: false,
  });
  const out = py.stdout.trim();
  if (py.exitCode === 0 && out.startsWith('$2')) return out;
  const ht = await execa('htpasswd', ['-nbB', 'x', password], { reject: false }).catch(() => undefined);
  const line = ht?.exitCode === 0 ? ht.stdout.trim() : '';
  return line.startsWith('x:$2') ? line.slice(2) : undefined;
}

const live = new Set<ChildProcess>();
process.once('exit', () => {
  for (const c of live) c.kill('SIGKILL');
});

/** `address`: where it listens (default 127.0.0.1; a cluster test gives the root side of a test host). */
export async function startRegistry(o: { auth?: { username: string; password: string }; address?: string } = {}): Promise<TestRegistry> {
  await ensureRegistryInstalled();
  const dir = await mkdtemp(join(tmpdir(), 'cubed-test-registry-'));
  let child: ChildProcess | undefined;
  const stop = async () => {
    if (child && child.exitCode === null && child.signalCode === null) {
      const done = exited(child);
      child.kill('SIGTERM');
      const t = setTimeout(() => child?.kill('SIGKILL'), 5000);
      await done;
      clearTimeout(t);
    }
    if (child) live.delete(child);
    await rm(dir, { recursive: true, force: true });
  };
  try {
    const port = await freePort();
    let auth = '';
    if (o.auth) {
      const hash = await bcrypt(o.auth.password);
      if (!hash) throw new Error('no bcrypt on this machine (python3 crypt or htpasswd): cannot start a registry with auth');
      await writeFile(join(dir, 'htpasswd'), `${o.auth.username}:${hash}\n`);
      auth = `auth:\n  htpasswd:\n    realm: cube-test\n    path: ${join(dir, 'htpasswd')}\n`;
    }
    const config = `version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: false\nstorage:\n  filesystem:\n    rootdirectory: ${join(dir, 'data')}\n  delete:\n    enabled: true\nhttp:\n  addr: ${o.address ?? '127.0.0.1'}:${port}\n  secret: cube-test-${port}\n${auth}`;
    await writeFile(join(dir, 'config.yml'), config);
    const logPath = join(dir, 'registry.log');
    const fd = openSync(logPath, 'a');
    child = spawn(BIN, ['serve', join(dir, 'config.yml')], { stdio: ['ignore', fd, fd] });
    closeSync(fd);
    live.add(child);
    const host = `${o.address ?? '127.0.0.1'}:${port}`;
    for (let i = 0; ; i++) {
      if (child.exitCode !== null) throw new Error(`docker-registry exited: ${readFileSync(logPath, 'utf8').slice(-1000)}`);
      const ok = await fetch(`http://${host}/v2/`).then(
        (r) => r.status === 200 || r.status === 401,
        () => false,
      );
      if (ok) break;
      if (i > 200) throw new Error(`docker-registry did not answer on ${host}: ${readFileSync(logPath, 'utf8').slice(-1000)}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    return {
      host,
      port,
      dir,
      ...(o.auth ? { auth: o.auth } : {}),
      log: () => readFileSync(logPath, 'utf8'),
      async push(file, repoTag, transport = 'oci-archive') {
        const creds = o.auth ? ['--dest-creds', `${o.auth.username}:${o.auth.password}`] : [];
        await execa('skopeo', ['copy', '--quiet', '--dest-tls-verify=false', ...creds, `${transport}:${file}`, `docker://${host}/${repoTag}`]);
      },
      stop,
    };
  } catch (e) {
    await stop();
    throw e;
  }
}
