// Restart safety of a real cubed: graceful stop keeps sandboxes for re-adoption, kill -9 in
// the middle of a create burst leaves nothing half-made after the next start, and
// --destroy-on-exit leaves the host as it was.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import type { NodeView, SandboxView } from '../../src/api/types.js';
import { countKernelObjects, slotRules } from '../helpers/kernel.js';
import { adminExec, call, settledKernelObjects, startDaemon, type TestDaemon } from '../helpers/daemon.js';

let d: TestDaemon | undefined;
afterEach(async () => {
  await d?.stop();
  d = undefined;
});

const api = (dm: TestDaemon) => (method: string, path: string, body?: unknown) => call(dm, method, path, body);
const execOut = async (dm: TestDaemon, id: string, argv: string[]) => (await adminExec(dm, id, argv)).stdout;

function processGone(pid: number): Promise<void> {
  return new Promise((resolve) => {
    const t = setInterval(() => {
      try {
        process.kill(pid, 0);
      } catch {
        clearInterval(t);
        resolve();
      }
    }, 50);
  });
}

describe('restart', () => {
  it('SIGTERM then restart re-adopts running and paused sandboxes, with their files, state and egress rules', async () => {
    d = await startDaemon();
    const req = api(d);
    const a = (await req('POST', '/admin/v1/sandboxes', { timeoutSec: 600, egress: { allowInternet: false } })).json as SandboxView;
    const rulesBefore = [...(await slotRules(d.tag)).entries()];
    expect(rulesBefore.map(([, r]) => r)).toEqual([['drop']]);
    const b = (await req('POST', '/admin/v1/sandboxes', { timeoutSec: 600 })).json as SandboxView;
    await execOut(d, a.sandboxID, ['sh', '-c', 'echo kept > /tmp/marker']);
    expect((await req('POST', `/admin/v1/sandboxes/${b.sandboxID}/pause`)).json.state).toBe('paused');
    expect((await req('PUT', '/admin/v1/config', { path: 'host.quota.paused_resource_release_ratio', value: 0.5 })).status).toBe(200);
    const versionBefore = ((await req('GET', '/admin/v1/config')).json as { version: number }).version;
    const pid = d.pid;
    await d.restart();
    // The config history continues: the files are unchanged (the set wrote them), so the version in force stays; it is not renumbered from 1.
    expect(((await api(d)('GET', '/admin/v1/config')).json as { version: number }).version).toBe(versionBefore);
    expect(d.pid).not.toBe(pid);
    // The restart replaced the node's nftables table; a's own rule is back in it.
    expect([...(await slotRules(d.tag)).entries()]).toEqual(rulesBefore);
    const listed = (await api(d)('GET', '/admin/v1/sandboxes')).json as SandboxView[];
    expect(listed.map((s) => [s.sandboxID, s.state]).sort()).toEqual(
      [
        [a.sandboxID, 'running'],
        [b.sandboxID, 'paused'],
      ].sort(),
    );
    expect(listed.find((s) => s.sandboxID === a.sandboxID)!.endAt).toBe(a.endAt);
    expect(await execOut(d, a.sandboxID, ['cat', '/tmp/marker'])).toBe('kept\n');
    expect((await api(d)('POST', `/admin/v1/sandboxes/${b.sandboxID}/resume`)).json.state).toBe('running');
    expect(await execOut(d, b.sandboxID, ['echo', 'alive'])).toBe('alive\n');
  });

  it('upgraded in place: meta.json and records with ISO 8601 times (as versions before numeric times wrote them) are re-adopted', async () => {
    d = await startDaemon();
    const a = (await api(d)('POST', '/admin/v1/sandboxes', { timeoutSec: 600 })).json as SandboxView;
    await d.stop({ destroy: false });
    const iso = (t: { startedAt: number; endAt: number }) => ({ startedAt: new Date(t.startedAt).toISOString(), endAt: new Date(t.endAt).toISOString() });
    const metaPath = join(d.dataDir, 'sandboxes', a.sandboxID, 'meta.json');
    const meta = JSON.parse(readFileSync(metaPath, 'utf8')) as { startedAt: number; endAt: number };
    expect(typeof meta.endAt).toBe('number');
    writeFileSync(metaPath, JSON.stringify({ ...meta, ...iso(meta) }));
    const db = new Database(join(d.dataDir, 'cubed.db'));
    const rec = JSON.parse((db.prepare('SELECT record FROM sandboxes WHERE id = ?').get(a.sandboxID) as { record: string }).record) as {
      startedAt: number;
      endAt: number;
    };
    db.prepare('UPDATE sandboxes SET record = ? WHERE id = ?').run(JSON.stringify({ ...rec, ...iso(rec) }), a.sandboxID);
    db.close();
    await d.restart();
    // Read as epoch ms: its timer is armed for its real end (a string end fired at once and destroyed it).
    const got = (await api(d)('GET', `/admin/v1/sandboxes/${a.sandboxID}`)).json as SandboxView;
    expect(got).toMatchObject({ state: 'running', startedAt: a.startedAt, endAt: a.endAt });
    expect(await execOut(d, a.sandboxID, ['echo', 'alive'])).toBe('alive\n');
    expect(typeof (JSON.parse(readFileSync(metaPath, 'utf8')) as { endAt: unknown }).endAt).toBe('string');
    expect((await api(d)('POST', `/admin/v1/sandboxes/${a.sandboxID}/pause`)).json.state).toBe('paused');
    // Written again by this version: numbers.
    expect(JSON.parse(readFileSync(metaPath, 'utf8'))).toMatchObject({ startedAt: Date.parse(a.startedAt), endAt: Date.parse(a.endAt) });
  });

  it('kill -9 during a create burst, then restart: complete sandboxes are re-adopted, the rest is cleaned', async () => {
    d = await startDaemon();
    const dm = d;
    const req = api(dm);
    const created: string[] = [];
    const burst = Array.from({ length: 24 }, () =>
      req('POST', '/admin/v1/sandboxes', {}).then(
        (r) => r.status === 201 && created.push((r.json as SandboxView).sandboxID),
        () => undefined, // the daemon died under this request
      ),
    );
    while (created.length < 3) await new Promise((r) => setTimeout(r, 5));
    await dm.kill9();
    await Promise.all(burst);
    await dm.restart();
    const listed = (await api(dm)('GET', '/admin/v1/sandboxes')).json as SandboxView[];
    const ids = listed.map((s) => s.sandboxID);
    // Every create that answered 201 was complete (meta.json written, init alive): re-adopted.
    for (const id of created) expect(ids).toContain(id);
    for (const s of listed) expect(s.state).toBe('running');
    for (const s of listed) expect(await execOut(dm, s.sandboxID, ['echo', 'ok'])).toBe('ok\n');
    // Nothing else of this node survives: one init per sandbox, one netns per pool slot.
    const node = (await api(dm)('GET', '/admin/v1/nodes')).json[0] as NodeView;
    const k = await countKernelObjects(dm.tag);
    expect(k.processes).toBe(listed.length);
    expect(node.pool.inUse).toBe(listed.length);
    expect(k.netns).toBe(node.pool.total);
  });

  it('--destroy-on-exit: SIGTERM leaves no netns, link, cgroup, mount, process or nftables table of the node', async () => {
    d = await startDaemon({ args: ['--destroy-on-exit'] });
    const req = api(d);
    for (let i = 0; i < 3; i++) expect((await req('POST', '/admin/v1/sandboxes', {})).status).toBe(201);
    const id = ((await req('GET', '/admin/v1/sandboxes')).json as SandboxView[])[0]!.sandboxID;
    await req('POST', `/admin/v1/sandboxes/${id}/pause`);
    expect((await countKernelObjects(d.tag)).netns).toBeGreaterThan(0);
    process.kill(d.pid, 'SIGTERM');
    await processGone(d.pid);
    // Inits killed at exit are zombies until the host's pid 1 reaps them: count once settled.
    expect(await settledKernelObjects(d.tag)).toEqual({ netns: 0, links: 0, cgroups: 0, mounts: 0, processes: 0, nftTables: 0 });
  });
});
