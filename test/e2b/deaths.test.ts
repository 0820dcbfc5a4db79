// Deaths with reasons (issue 24 item 3): a sandbox that ends without its client asking leaves a
// tombstone; the next call through the real `e2b` SDK fails with its not-found error, naming the
// reason and the time where the SDK shows the server's message (envd calls); GET /sandboxes/{id},
// the admin API, `cubectl sandbox get` and the event history say why.
import { readdirSync, readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { NotFoundError, Sandbox, SandboxNotFoundError } from 'e2b';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cubectl } from '../cli/run-cli.js';
import { call, startDaemon, type TestDaemon } from '../helpers/daemon.js';

let d: TestDaemon;
let opts: { apiKey: string; apiUrl: string; sandboxUrl: string };
const created: string[] = [];

const ISO = /\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z/;

async function create(timeoutMs = 120_000): Promise<Sandbox> {
  const sbx = await Sandbox.create({ ...opts, timeoutMs, metadata: { run: 'deaths' } });
  created.push(sbx.sandboxId);
  return sbx;
}

/** Waits until the sandbox's record is gone (the admin API answers 404). */
async function ended(id: string): Promise<void> {
  for (const until = Date.now() + 30_000; Date.now() < until; await sleep(200)) {
    if ((await call(d, 'GET', `/admin/v1/sandboxes/${id}`)).status === 404) return;
  }
  throw new Error(`sandbox ${id} did not end`);
}

/** What every client sees of a sandbox that died for `reason` (cubeCode `code`). */
async function expectDeath(sbx: Sandbox, reason: string, code: number): Promise<void> {
  const id = sbx.sandboxId;
  // envd calls carry the server's message: NotFoundError naming the reason and the time.
  const run = await sbx.commands.run('true').catch((e: unknown) => e);
  expect(run).toBeInstanceOf(NotFoundError);
  expect((run as Error).message).toContain(`ended: ${reason}`);
  expect((run as Error).message).toMatch(ISO);
  const read = await sbx.files.read('/etc/hostname').catch((e: unknown) => e);
  expect(read).toBeInstanceOf(NotFoundError);
  expect((read as Error).message).toContain(`ended: ${reason}`);
  // The SDK's REST calls raise their not-found error with a message of their own.
  await expect(Sandbox.connect(id, opts)).rejects.toBeInstanceOf(SandboxNotFoundError);
  await expect(sbx.setTimeout(60_000)).rejects.toBeInstanceOf(SandboxNotFoundError);
  expect(await sbx.isRunning()).toBe(false);
  // E2B's shape for a sandbox that is no more: 404 with `code` 404; the reason in cubeCode, message and details.
  const rest = await call(d, 'GET', `/sandboxes/${id}`);
  expect(rest.status).toBe(404);
  expect(rest.json).toMatchObject({ code: 404, cubeCode: code, details: { sandboxID: id, reason, nodeID: d.nodeID, endedAt: expect.stringMatching(ISO) } });
  expect(rest.json.message).toContain(`ended: ${reason}`);
  const admin = await call(d, 'GET', `/admin/v1/sandboxes/${id}`);
  expect(admin).toMatchObject({ status: 404, json: { code, status: 404 } });
  const get = await cubectl(['sandbox', 'get', id], { CUBE_API_URL: d.url, CUBE_API_KEY: d.apiKey });
  expect(get.code).toBe(1);
  expect(get.stderr).toContain(`${code} sandbox ${id} ended: ${reason}`);
  const events = (await call(d, 'GET', '/admin/v1/events?limit=1000')).json as { kind: string; sandboxID?: string; death?: string; code?: number }[];
  expect(events.filter((e) => e.sandboxID === id && e.kind === 'sandbox.died')).toEqual([expect.objectContaining({ death: reason, code })]);
  // Its client's kill finds nothing to do (false, not an error).
  expect(await sbx.kill()).toBe(false);
}

function initPid(sandboxID: string): number {
  for (const p of readdirSync('/proc').filter((x) => /^\d+$/.test(x))) {
    try {
      if (readFileSync(`/proc/${p}/comm`, 'utf8') === 'cube-init\n' && readFileSync(`/proc/${p}/cgroup`, 'utf8').includes(`/cube-${d.tag}/${sandboxID}\n`))
        return Number(p);
    } catch {
      // exited while we looked
    }
  }
  throw new Error(`no cube-init for ${sandboxID}`);
}

beforeAll(async () => {
  d = await startDaemon();
  opts = { apiKey: d.apiKey, apiUrl: d.url, sandboxUrl: d.url };
});

afterAll(async () => {
  try {
    await Promise.all(created.map((id) => Sandbox.kill(id, opts).catch(() => false)));
  } finally {
    await d?.stop();
  }
}, 180_000);

describe('deaths have reasons', () => {
  it('timeout: the next call says the sandbox ended at its timeout, and when', async () => {
    const sbx = await create();
    await sbx.setTimeout(1000);
    await ended(sbx.sandboxId);
    await expectDeath(sbx, 'timeout', 130411);
  });

  it('init killed: the sandbox is ended at once (not left in error until its timeout) with init_exited', async () => {
    const sbx = await create();
    process.kill(initPid(sbx.sandboxId), 'SIGKILL');
    await ended(sbx.sandboxId);
    await expectDeath(sbx, 'init_exited', 130413);
  });

  it("an operator's kill (admin API, cubectl) is a death its client is told of; the client's own kill is not", async () => {
    const sbx = await create();
    const r = await cubectl(['sandbox', 'rm', sbx.sandboxId], { CUBE_API_URL: d.url, CUBE_API_KEY: d.apiKey });
    expect(r.code).toBe(0);
    await expectDeath(sbx, 'operator_killed', 130418);

    const own = await create();
    expect(await own.kill()).toBe(true);
    const rest = await call(d, 'GET', `/sandboxes/${own.sandboxId}`);
    expect(rest.json).toMatchObject({ code: 404, cubeCode: 130404 });
  });

  it('drain --evict: its sandboxes end with drain_evicted', async () => {
    const sbx = await create();
    expect((await call(d, 'POST', `/admin/v1/nodes/${d.nodeID}/drain`, { evict: true, deadlineSec: 0 })).status).toBe(200);
    try {
      await ended(sbx.sandboxId);
    } finally {
      expect((await call(d, 'POST', `/admin/v1/nodes/${d.nodeID}/uncordon`)).status).toBe(200);
    }
    await expectDeath(sbx, 'drain_evicted', 130416);
  });

  it('a restart that cannot re-adopt a sandbox (its init died while the daemon was down) says so', async () => {
    const sbx = await create();
    await d.kill9();
    process.kill(initPid(sbx.sandboxId), 'SIGKILL');
    await d.restart();
    await ended(sbx.sandboxId);
    await expectDeath(sbx, 'not_readopted', 130417);
  });
});
