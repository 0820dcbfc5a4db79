// cubectl's daemon verbs against a real cubed (test/helpers/daemon.ts): real sandboxes,
// real config files. Build first (`npm run build`).
import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EventView, NodeView, ReloadResult, SandboxView } from '../../src/api/types.js';
import { CubeClient } from '../../src/cli/client.js';
import { packageRoot } from '../../src/config/loader.js';
import { startDaemon, type TestDaemon } from '../helpers/daemon.js';
import { slotRules } from '../helpers/kernel.js';
import { assertBuilt, cubectl } from './run-cli.js';

let d: TestDaemon;
let env: Record<string, string>;
let client: CubeClient;
const created: string[] = [];

beforeAll(async () => {
  assertBuilt();
  d = await startDaemon();
  env = { CUBE_API_URL: d.url, CUBE_API_KEY: d.apiKey };
  client = new CubeClient({ baseUrl: d.url, apiKey: d.apiKey });
});

afterAll(async () => {
  if (!d) return;
  try {
    for (const id of created) await client.deleteSandbox(id).catch(() => undefined);
  } finally {
    await d.stop();
  }
});

const ok = async (args: string[]) => {
  const r = await cubectl(args, env);
  expect(r.stderr).toBe('');
  expect(r.code).toBe(0);
  return r.stdout;
};

async function createSandbox(): Promise<string> {
  const { sandboxID } = JSON.parse(await ok(['sandbox', 'create', '--memory-mib', '128', '--timeout', '300', '--json'])) as SandboxView;
  created.push(sandboxID);
  return sandboxID;
}

describe('cubectl against a real cubed', () => {
  it('nodes: the node with health, schedulability and density', async () => {
    const nodes = JSON.parse(await ok(['nodes', '--json'])) as NodeView[];
    const n = nodes.find((x) => x.nodeID === d.nodeID);
    expect(n).toMatchObject({ healthy: true, schedulable: true, reason: '' });
    expect(n!.density.paperCeiling).toBeGreaterThan(0);
    expect(await ok(['nodes'])).toMatch(new RegExp(`^NODE .*\\n${d.nodeID} +healthy +yes`));
  });

  it('sandbox create, ls, exec (streams, exit code, env/cwd/user), pause, resume, rm', async () => {
    const id = await createSandbox();
    const list = JSON.parse(await ok(['sandbox', 'ls', '--json'])) as SandboxView[];
    expect(list.find((s) => s.sandboxID === id)).toMatchObject({ state: 'running', nodeID: d.nodeID });
    expect(await ok(['sandbox', 'ls'])).toContain(id);

    const r = await cubectl(['sandbox', 'exec', id, '--', 'sh', '-c', 'echo out; echo err >&2; exit 7'], env);
    expect(r).toEqual({ code: 7, stdout: 'out\n', stderr: 'err\n' });
    expect(
      await ok(['sandbox', 'exec', id, '--user', 'root', '--cwd', '/tmp', '--env', 'A=1', '--env', 'B=x=y', '--', 'sh', '-c', 'echo "$A $B $(pwd) $(id -u)"']),
    ).toBe('1 x=y /tmp 0\n');

    const killed = await cubectl(['sandbox', 'exec', id, '--timeout-ms', '300', '--', 'sleep', '30'], env);
    expect(killed.code).not.toBe(0);
    expect(killed.stderr).toBe('cubectl: killed: timeout\n');

    expect(await ok(['sandbox', 'pause', id])).toBe(`${id} paused\n`);
    const paused = JSON.parse(await ok(['sandbox', 'ls', '--state', 'paused', '--json'])) as SandboxView[];
    expect(paused.map((s) => s.sandboxID)).toContain(id);
    expect(await ok(['sandbox', 'resume', id])).toBe(`${id} running\n`);
    expect(await ok(['sandbox', 'rm', id])).toBe(`${id} removed\n`);
    const after = JSON.parse(await ok(['sandbox', 'ls', '--json'])) as SandboxView[];
    expect(after.map((s) => s.sandboxID)).not.toContain(id);
  });

  it("a server-side failure exits 1 with the daemon's one-line reason", async () => {
    const r = await cubectl(['sandbox', 'rm', 'no-such-sandbox'], env);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^cubectl: 130404 [^\n]*no-such-sandbox[^\n]*\n$/);
    const badKey = await cubectl(['nodes'], { ...env, CUBE_API_KEY: 'e2b_wrong' });
    expect(badKey.code).toBe(1);
    expect(badKey.stderr).toMatch(/^cubectl: 130401 .*set CUBE_API_KEY/);
  });

  it('config show, set (persisted, live), an invalid set exits 2, a rejected reload exits 1 and keeps the old config', async () => {
    const before = JSON.parse(await ok(['config', 'show', '--json'])) as { version: number };
    expect(await ok(['config', 'show'])).toMatch(/^# version \d+/);

    const set = await ok(['config', 'set', 'host.quota.paused_resource_release_ratio', '0.5']);
    expect(set).toMatch(/host\.quota\.paused_resource_release_ratio: 0 -> 0\.5\n/);
    expect(readFileSync(join(d.configDir, 'cubemaster.yaml'), 'utf8')).toMatch(/paused_resource_release_ratio: 0\.5/);
    const after = JSON.parse(await ok(['config', 'show', '--json'])) as {
      version: number;
      master: { host: { quota: { paused_resource_release_ratio: number } } };
    };
    expect(after.version).toBe(before.version + 1);
    expect(after.master.host.quota.paused_resource_release_ratio).toBe(0.5);

    const bad = await cubectl(['config', 'set', 'host.quota.paused_resource_release_ratio', '1.5'], env);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/^cubectl: .*host\.quota\.paused_resource_release_ratio: must be between 0 and 1\n$/);

    const file = join(d.configDir, 'cubemaster.yaml');
    const good = readFileSync(file, 'utf8');
    try {
      writeFileSync(file, good.replace('paused_resource_release_ratio: 0.5', 'paused_resource_release_ratio: 2'));
      const rejected = await cubectl(['config', 'reload'], env);
      expect(rejected.code).toBe(1);
      expect(rejected.stdout).toContain('config rejected; version');
      expect(rejected.stdout).toContain('host.quota.paused_resource_release_ratio: must be between 0 and 1');
      const json = await cubectl(['config', 'reload', '--json'], env);
      expect(json.code).toBe(1);
      expect((JSON.parse(json.stdout) as ReloadResult).ok).toBe(false);
      expect((await client.config()).master).toMatchObject({ host: { quota: { paused_resource_release_ratio: 0.5 } } });
    } finally {
      writeFileSync(file, good);
    }
    expect(await ok(['config', 'reload'])).toMatch(/^config version \d+/);
  });

  it('events lists what happened; --follow streams new events', async () => {
    const first = await createSandbox();
    const events = JSON.parse(await ok(['events', '--json'])) as EventView[];
    expect(events.filter((e) => e.kind === 'sandbox.created').map((e) => e.sandboxID)).toContain(first);
    expect(await ok(['events'])).toMatch(new RegExp(`sandbox\\.created +${d.nodeID} ${first} `));

    const follow = spawn(process.execPath, [join(packageRoot(), 'bin/cubectl'), 'events', '--follow', '--json', '--limit', '1'], {
      env: { ...process.env, ...env },
    });
    try {
      const got: EventView[] = [];
      const waiters: { pred: (e: EventView) => boolean; resolve: (e: EventView) => void }[] = [];
      let buf = '';
      let stderr = '';
      follow.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
      follow.stdout.on('data', (b: Buffer) => {
        buf += b.toString();
        for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
          got.push(JSON.parse(buf.slice(0, i)) as EventView);
          buf = buf.slice(i + 1);
        }
        for (const w of [...waiters]) {
          const hit = got.find(w.pred);
          if (hit) {
            waiters.splice(waiters.indexOf(w), 1);
            w.resolve(hit);
          }
        }
      });
      const exited = new Promise<never>((_r, reject) => follow.once('exit', (code) => reject(new Error(`events --follow exited ${code}: ${stderr}`))));
      const seen = (pred: (e: EventView) => boolean) =>
        Promise.race([exited, new Promise<EventView>((resolve) => (got.some(pred) ? resolve(got.find(pred)!) : waiters.push({ pred, resolve })))]);
      // The snapshot's last event arrives first: the stream is up.
      await seen(() => true);
      const id = await createSandbox();
      expect((await seen((e) => e.kind === 'sandbox.created' && e.sandboxID === id)).nodeID).toBe(d.nodeID);
      // A daemon restart does not end the follow: it reconnects and goes on, printing nothing twice.
      await d.restart();
      const after = await createSandbox();
      await seen((e) => e.kind === 'sandbox.created' && e.sandboxID === after);
      expect(stderr).toMatch(/reconnecting in/);
      const ids = got.map((e) => e.id);
      expect(new Set(ids).size).toBe(ids.length);
    } finally {
      follow.kill('SIGINT');
    }
  });

  it('sandbox create --runtime places only on nodes of that driver; an unknown driver is a usage error', async () => {
    const refused = await cubectl(['sandbox', 'create', '--runtime', 'sim'], env);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(new RegExp(`^cubectl: 130597 no node available: ${d.nodeID}: runtime ns, not sim`));
    const made = JSON.parse(await ok(['sandbox', 'create', '--runtime', 'ns', '--json'])) as { sandboxID: string; runtime: string };
    expect(made.runtime).toBe('ns');
    await ok(['sandbox', 'rm', made.sandboxID]);
    expect((await cubectl(['sandbox', 'create', '--runtime', 'kvm'], env)).code).toBe(2);
  });

  it('sandbox create --no-internet/--allow-out/--deny-out: egress rules on the node, refusals with the reason', async () => {
    const refused = await cubectl(['sandbox', 'create', '--allow-out', '10.1.2.3'], env);
    expect(refused.code).toBe(2); // bad input (400), as for a usage error
    expect(refused.stderr).toMatch(/^cubectl: 130400 network\.allowOut 10\.1\.2\.3 overlaps the node's deny_out 10\.0\.0\.0\/8/);
    expect(refused.stderr.trim().split('\n')).toHaveLength(1);
    const made = JSON.parse(
      await ok(['sandbox', 'create', '--no-internet', '--allow-out', '1.1.1.1,1.0.0.1', '--allow-out', '9.9.9.9', '--json']),
    ) as SandboxView;
    try {
      expect([...(await slotRules(d.tag)).values()]).toEqual([['ip daddr { 1.0.0.1, 1.1.1.1, 9.9.9.9 } accept', 'drop']]);
      // `sandbox egress` replaces them at once; with no option, back to the node's defaults.
      expect(await ok(['sandbox', 'egress', made.sandboxID, '--deny-out', '0.0.0.0/0'])).toBe(`${made.sandboxID} running\n`);
      expect([...(await slotRules(d.tag)).values()]).toEqual([['ip daddr 0.0.0.0-255.255.255.255 drop']]);
      await ok(['sandbox', 'egress', made.sandboxID]);
      expect((await slotRules(d.tag)).size).toBe(0);
    } finally {
      await ok(['sandbox', 'rm', made.sandboxID]);
    }
  });

  it('node cordon refuses new sandboxes until uncordon', async () => {
    const n = JSON.parse(await ok(['node', 'cordon', d.nodeID, '--json'])) as NodeView;
    try {
      expect(n).toMatchObject({ cordoned: true, schedulable: false });
      const refused = await cubectl(['sandbox', 'create'], env);
      expect(refused.code).toBe(1);
      expect(refused.stderr).toMatch(/^cubectl: 130597 /);
    } finally {
      expect(await ok(['node', 'uncordon', d.nodeID])).toMatch(new RegExp(`^node ${d.nodeID}: healthy, schedulable`));
    }
  });
});
