// The cubed command line: help, usage errors, one daemon per data dir.
import { execa } from 'execa';
import { afterAll, beforeAll, expect, it } from 'vitest';
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
