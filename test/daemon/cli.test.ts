// The cubed command line: help, usage errors, one daemon per data dir, the DNS listener's start.
import { createSocket } from 'node:dgram';
import { cpSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { execa } from 'execa';
import { parse as fromYaml, stringify as toYaml } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDaemon, type TestDaemon } from '../helpers/daemon.js';

const cubed = (args: string[]) => execa(process.execPath, ['bin/cubed', ...args], { reject: false, timeout: 30_000 });

let d: TestDaemon;
beforeAll(async () => {
  d = await startDaemon();
});
afterAll(async () => {
  await d?.stop();
});

it('--help documents roles, key, data dir, signals and exit codes', async () => {
  const r = await cubed(['--help']);
  expect(r.exitCode).toBe(0);
  for (const s of ['--destroy-on-exit', 'API key:', 'Data dir', 'SIGTERM', 'Exit status:', 'CUBE_LOG_LEVEL']) expect(r.stdout).toContain(s);
});

it('exits 2 with a one-line reason on bad usage', async () => {
  const missing = await cubed(['--config-dir', '/nonexistent-cubed-config']);
  expect(missing.exitCode).toBe(2);
  expect(missing.stderr).toBe('cubed: config dir /nonexistent-cubed-config does not exist');
  const listen = await cubed(['--config-dir', d.configDir, '--data-dir', `${d.dataDir}-other`, '--listen', 'nonsense']);
  expect(listen.exitCode).toBe(2);
  expect(listen.stderr).toContain('--listen nonsense: expected ADDR:PORT');
});

it('refuses a second daemon on the same data dir, and the first keeps serving', async () => {
  const r = await cubed(['--config-dir', d.configDir, '--data-dir', d.dataDir, '--listen', '127.0.0.1:0']);
  // 3: the host is taken (the data dir's lock is held), as for a node id or pool cidr (test/daemon/host-claims).
  expect(r.exitCode).toBe(3);
  expect(r.stderr).toContain(`another cubed (pid ${d.pid}) is running with data dir ${d.dataDir}`);
  expect((await fetch(`${d.url}/health`)).status).toBe(200);
});

/** Inodes of the UDP sockets (v4 and v6) process `pid` holds. */
function udpSocketsOf(pid: number): string[] {
  const mine = new Set(
    readdirSync(`/proc/${pid}/fd`).flatMap((fd) => {
      const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`, { encoding: 'utf8' }));
      return m ? [m[1]!] : [];
    }),
  );
  const udp = ['/proc/net/udp', '/proc/net/udp6'].flatMap((f) =>
    readFileSync(f, 'utf8')
      .split('\n')
      .slice(1)
      .map((l) => l.trim().split(/\s+/)[9])
      .filter((inode): inode is string => inode !== undefined),
  );
  return udp.filter((inode) => mine.has(inode));
}

it('opens no DNS socket by default (api.dns.listen empty)', () => {
  expect(udpSocketsOf(d.pid)).toEqual([]);
});

describe('api.dns start-up errors', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync('/tmp/cubed-dns-test-');
  });
  afterAll(() => {
    rmSync(dir, { recursive: true, force: true });
  });
  /** cubed with d's config plus `dns`, on a data dir of its own (the daemon stops before it claims anything). */
  const withDns = (name: string, dns: Record<string, unknown>, args: string[] = []) => {
    const configDir = join(dir, name);
    cpSync(d.configDir, configDir, { recursive: true });
    const master = fromYaml(readFileSync(join(configDir, 'cubemaster.yaml'), 'utf8')) as { api: Record<string, unknown> };
    master.api.dns = dns;
    writeFileSync(join(configDir, 'cubemaster.yaml'), toYaml(master));
    return cubed(['--config-dir', configDir, '--data-dir', join(dir, `${name}-data`), '--listen', '127.0.0.1:0', ...args]);
  };

  it('a taken port: exit 1 and one line naming the address', async () => {
    const holder = createSocket('udp4');
    const port = await new Promise<number>((resolve) => holder.bind(0, '127.0.0.1', () => resolve(holder.address().port)));
    try {
      const r = await withDns('taken', { listen: `127.0.0.1:${port}` }, ['--sandbox-domain', 'sbx.test']);
      expect(r.exitCode).toBe(1);
      expect(r.stderr).toBe(`cubed: api.dns.listen 127.0.0.1:${port}: the port is taken (another DNS server?): choose another or stop it`);
    } finally {
      holder.close();
    }
  });

  it('no sandbox_domain, or no address to answer with: exit 2 saying which', async () => {
    const noDomain = await withDns('nodomain', { listen: '127.0.0.1:0' });
    expect(noDomain.exitCode).toBe(2);
    expect(noDomain.stderr).toBe('cubed: api.dns.listen is set but api.sandbox_domain (--sandbox-domain) is empty: there is no name to answer');
    const wildcard = await withDns('wildcard', { listen: '127.0.0.1:0' }, ['--sandbox-domain', 'sbx.test', '--listen', '0.0.0.0:0']);
    expect(wildcard.exitCode).toBe(2);
    expect(wildcard.stderr).toContain('api.dns.answer is empty and the API listens on 0.0.0.0');
  });
});
