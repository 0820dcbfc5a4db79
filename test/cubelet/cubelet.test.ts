// Cubelet on the real ns driver and network-agent: process table over real sandboxes,
// timeouts, OOM and liveness events, and failed creates that leave nothing behind.
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { execa } from 'execa';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { SandboxLifecycle } from '../../src/api/types.js';
import { ConfigStore } from '../../src/config/store.js';
import { Cubelet } from '../../src/cubelet/cubelet.js';
import type { NodeEvent, ProcessEvent, ProcessStream } from '../../src/cubelet/types.js';
import { CubeError } from '../../src/errors.js';
import { newSandboxID, nodeTag } from '../../src/ids.js';
import { NsNetworkAgent } from '../../src/network/agent.js';
import { parseRange } from '../../src/network/ipam.js';
import { NsDriver } from '../../src/runtime/ns/driver.js';
import { TemplateStore } from '../../src/templates/store.js';
import { defaultNetworkPolicy, countKernelObjects, testCidr, uniqueNodeID, tearDownNode } from '../helpers/kernel.js';

const nodeID = uniqueNodeID('cubelet');
const tag = nodeTag(nodeID);
const dir = mkdtempSync('/tmp/cubed-test-cubelet-');
const dataDir = join(dir, 'data');
const cidr = testCidr();
let cubelet: Cubelet;
let network: NsNetworkAgent;
let config: ConfigStore;
let templates: TemplateStore;
let driver: NsDriver;
const events: NodeEvent[] = [];

beforeAll(async () => {
  mkdirSync(dataDir);
  mkdirSync(join(dir, 'config'));
  config = new ConfigStore(join(dir, 'config'), { watch: false });
  const log = pino({ level: 'silent' });
  network = new NsNetworkAgent({ nodeTag: tag, cidr, initNum: 2, policy: defaultNetworkPolicy(), log });
  templates = new TemplateStore(dataDir);
  cubelet = new Cubelet({
    nodeID,
    dataDir,
    driver: (driver = new NsDriver({ dataDir, nodeTag: tag, log })),
    network,
    templates,
    config: () => config.config,
    log,
    poolSlotLimit: parseRange(cidr).maxIndex,
    watchIntervalMs: 100,
  });
  await cubelet.start();
  cubelet.subscribe((e) => events.push(e));
});

afterAll(() => tearDownNode({ tag, dir, stop: () => cubelet?.stop({ destroy: true }), close: () => config?.close() }));

const inMinutes = (m: number) => Date.now() + m * 60_000;
const create = (over: { memoryMiB?: number; endAt?: number; templateID?: string; lifecycle?: SandboxLifecycle } = {}) =>
  cubelet.createSandbox({
    sandboxID: newSandboxID(),
    templateID: over.templateID ?? 'host',
    cpus: 1,
    memoryMiB: over.memoryMiB ?? 128,
    diskGiB: 1,
    endAt: over.endAt ?? inMinutes(5),
    env: { FROM_CREATE: 'yes' },
    metadata: {},
    ...(over.lifecycle ? { lifecycle: over.lifecycle } : {}),
  });

async function collect(s: ProcessStream): Promise<{ out: string; err: string; events: ProcessEvent[] }> {
  const evs: ProcessEvent[] = [];
  for await (const e of s.events) evs.push(e);
  const text = (t: 'stdout' | 'stderr') => evs.map((e) => (e.type === t ? e.data.toString() : '')).join('');
  return { out: text('stdout'), err: text('stderr'), events: evs };
}

async function hostInitPid(sandboxID: string): Promise<number> {
  for (const p of readdirSync('/proc').filter((x) => /^\d+$/.test(x))) {
    try {
      if (readFileSync(`/proc/${p}/comm`, 'utf8') === 'cube-init\n' && readFileSync(`/proc/${p}/cgroup`, 'utf8').includes(`/cube-${tag}/${sandboxID}\n`))
        return Number(p);
    } catch {
      // exited while we looked
    }
  }
  throw new Error(`no cube-init for ${sandboxID}`);
}

const until = async (pred: () => boolean | Promise<boolean>) => {
  while (!(await pred())) await new Promise((r) => setTimeout(r, 50));
};

describe('process table', () => {
  it('gives unique pids, streams output with the create env, and ends with the exit code', async () => {
    const sb = await create();
    try {
      const a = await cubelet.startProcess(sb.sandboxID, { argv: ['sh', '-c', 'echo $FROM_CREATE $EXTRA; exit 4'], env: { EXTRA: 'x' } });
      const b = await cubelet.startProcess(sb.sandboxID, { argv: ['true'] });
      expect(b.pid).not.toBe(a.pid);
      const r = await collect(a);
      expect(r.events[0]).toEqual({ type: 'start', pid: a.pid });
      expect(r.out).toBe('yes x\n');
      expect(r.events.at(-1)).toMatchObject({ type: 'end', exitCode: 4 });
      await collect(b);
    } finally {
      await cubelet.destroySandbox(sb.sandboxID);
    }
  });

  it('fans output out to a second subscriber by tag, keeps running when one leaves, takes stdin and signals', async () => {
    const sb = await create();
    try {
      const p = await cubelet.startProcess(sb.sandboxID, { argv: ['sh', '-c', 'while read l; do echo "got $l"; done'], stdin: true, tag: 'reader' });
      await expect(cubelet.startProcess(sb.sandboxID, { argv: ['true'], tag: 'reader' })).rejects.toMatchObject({ kind: 'CONFLICT' });
      const first = p.events[Symbol.asyncIterator]();
      expect((await first.next()).value).toEqual({ type: 'start', pid: p.pid });
      await first.return!(); // the first subscriber leaves; the process stays
      expect((await cubelet.listProcesses(sb.sandboxID)).map((x) => [x.pid, x.tag])).toEqual([[p.pid, 'reader']]);
      const second = await cubelet.connectProcess(sb.sandboxID, { tag: 'reader' });
      const it2 = second.events[Symbol.asyncIterator]();
      expect((await it2.next()).value).toEqual({ type: 'start', pid: p.pid });
      await cubelet.sendInput(sb.sandboxID, p.pid, Buffer.from('one\n'));
      const line = (await it2.next()).value as ProcessEvent;
      expect(line.type === 'stdout' && line.data.toString()).toBe('got one\n');
      await cubelet.signalProcess(sb.sandboxID, p.pid, 'SIGKILL');
      let end: ProcessEvent | undefined;
      for (let n = await it2.next(); !n.done; n = await it2.next()) end = n.value;
      expect(end).toMatchObject({ type: 'end', signal: 'SIGKILL' });
      expect(await cubelet.listProcesses(sb.sandboxID)).toEqual([]);
      await expect(cubelet.connectProcess(sb.sandboxID, { pid: p.pid })).rejects.toMatchObject({ kind: 'NOT_FOUND' });
    } finally {
      await cubelet.destroySandbox(sb.sandboxID);
    }
  });
});

describe('lifecycle events', () => {
  it('destroys a sandbox at its endAt and emits sandbox.timeout', async () => {
    const endAt = Date.now() + 300;
    const sb = await create({ endAt });
    await until(async () => (await cubelet.getSandbox(sb.sandboxID)) === undefined);
    // The time as operators read it everywhere (ISO 8601), not the epoch ms kept inside.
    expect(
      events.some(
        (e) =>
          e.type === 'event' &&
          e.event.kind === 'sandbox.timeout' &&
          e.event.sandboxID === sb.sandboxID &&
          e.event.message === `timeout reached at ${new Date(endAt).toISOString()}`,
      ),
    ).toBe(true);
    expect((await cubelet.nodeView()).pool.inUse).toBe(0);
  });

  it('a paused sandbox does not time out; resumed past its end it gets the default lifetime', async () => {
    const endAt = Date.now() + 400;
    const sb = await create({ endAt });
    try {
      await cubelet.pauseSandbox(sb.sandboxID);
      await new Promise((r) => setTimeout(r, endAt - Date.now() + 300));
      expect((await cubelet.getSandbox(sb.sandboxID))?.state).toBe('paused');
      const resumed = await cubelet.resumeSandbox(sb.sandboxID);
      expect(resumed.state).toBe('running');
      expect(resumed.endAt).toBeGreaterThan(Date.now() + 60_000);
    } finally {
      await cubelet.destroySandbox(sb.sandboxID);
    }
  });

  it('lifecycle onTimeout pause: paused at its endAt with the reason, not destroyed; resume clears the reason', async () => {
    const endAt = Date.now() + 300;
    const sb = await create({ endAt, lifecycle: { onTimeout: 'pause', autoResume: false } });
    try {
      await until(async () => (await cubelet.getSandbox(sb.sandboxID))?.state === 'paused');
      expect(await cubelet.getSandbox(sb.sandboxID)).toMatchObject({
        lifecycle: { onTimeout: 'pause', autoResume: false },
        reason: `paused at its timeout ${new Date(endAt).toISOString()} (lifecycle onTimeout pause)`,
      });
      expect(
        events.some((e) => e.type === 'event' && e.event.kind === 'sandbox.timeout' && e.event.sandboxID === sb.sandboxID && /pausing/.test(e.event.message)),
      ).toBe(true);
      const resumed = await cubelet.resumeSandbox(sb.sandboxID);
      expect(resumed.state).toBe('running');
      expect(resumed.reason).toBeUndefined();
    } finally {
      await cubelet.destroySandbox(sb.sandboxID);
    }
  });

  it('a resume that meets a pause in progress (a timeout pause as the client connects) waits for it, then resumes', async () => {
    const sb = await create();
    try {
      const pausing = cubelet.pauseSandbox(sb.sandboxID);
      await new Promise((r) => setImmediate(r));
      expect((await cubelet.getSandbox(sb.sandboxID))?.state).toBe('pausing');
      // Answered 503 (130490 "sandbox is pausing") before.
      const resumed = await cubelet.resumeSandbox(sb.sandboxID);
      expect((await pausing).state).toBe('paused');
      expect(resumed.state).toBe('running');
      expect((await collect(await cubelet.startProcess(sb.sandboxID, { argv: ['echo', 'up'] }))).out).toBe('up\n');
    } finally {
      await cubelet.destroySandbox(sb.sandboxID);
    }
  });

  it('reports an OOM kill inside the sandbox as sandbox.oom, the sandbox keeps running', async () => {
    const sb = await create({ memoryMiB: 32 });
    try {
      const r = await collect(await cubelet.startProcess(sb.sandboxID, { argv: ['sh', '-c', 'x=$(head -c 200000000 /dev/zero | tr "\\0" a); echo survived'] }));
      expect(r.events.at(-1)).toMatchObject({ type: 'end', oomKilled: true });
      await until(() => events.some((e) => e.type === 'event' && e.event.kind === 'sandbox.oom' && e.event.sandboxID === sb.sandboxID));
      expect((await cubelet.getSandbox(sb.sandboxID))?.state).toBe('running');
    } finally {
      await cubelet.destroySandbox(sb.sandboxID);
    }
  });

  it('refuses an endAt that is not epoch ms (an older control sends ISO 8601) before making anything', async () => {
    const endAt = new Date(Date.now() + 60_000).toISOString() as unknown as number;
    const before = (await cubelet.listSandboxes()).length;
    await expect(create({ endAt })).rejects.toMatchObject({ kind: 'BAD_REQUEST', message: expect.stringContaining('same version') });
    expect(await cubelet.listSandboxes()).toHaveLength(before);
  });

  it('ends a sandbox whose init died at once (error, then destroyed) and reports why: sandbox.died init_exited', async () => {
    const sb = await create();
    const init = (await collect(await cubelet.startProcess(sb.sandboxID, { argv: ['cat', '/proc/1/status'], user: 'root' }))).out;
    expect(init).toContain('cube-init');
    // A pid namespace's init ignores SIGKILL from inside: kill it from the host.
    const initPid = await hostInitPid(sb.sandboxID);
    process.kill(initPid, 'SIGKILL');
    const died = () => events.find((e) => e.type === 'event' && e.event.kind === 'sandbox.died' && e.event.sandboxID === sb.sandboxID);
    await until(() => died() !== undefined);
    expect(died()).toMatchObject({ event: { death: 'init_exited', code: 130413, message: 'sandbox init process died', nodeID: cubelet.nodeID } });
    expect(
      events.some(
        (e) => e.type === 'sandbox' && e.sandbox.sandboxID === sb.sandboxID && e.sandbox.state === 'error' && e.sandbox.reason === 'sandbox init process died',
      ),
    ).toBe(true);
    expect(await cubelet.getSandbox(sb.sandboxID)).toBeUndefined();
  });

  it('a failed create leaves nothing: unknown template before any slot, broken template after one', async () => {
    await expect(create({ templateID: 'nope' })).rejects.toMatchObject({ kind: 'NOT_FOUND' });
    const broken = join(dir, 'broken-rootfs');
    mkdirSync(join(broken, 'bin'), { recursive: true });
    writeFileSync(join(broken, 'bin/sh'), '');
    await templates.registerTemplate('broken', broken);
    rmSync(broken, { recursive: true });
    const err = await create({ templateID: 'broken' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CubeError);
    expect(await cubelet.listSandboxes()).toEqual([]);
    const n = await cubelet.nodeView();
    expect(n.pool.inUse).toBe(0);
    expect((await countKernelObjects(tag)).processes).toBe(0);
  });

  it('a create whose egress rules cannot be installed fails and leaves nothing (the rules go alongside the driver)', async () => {
    // Without the node's table, `nft` refuses the slot chain; the driver's create succeeds meanwhile.
    await execa('nft', ['delete', 'table', 'inet', `cube_${tag}`]);
    try {
      const err = await cubelet
        .createSandbox({
          sandboxID: newSandboxID(),
          templateID: 'host',
          cpus: 1,
          memoryMiB: 128,
          diskGiB: 1,
          endAt: inMinutes(5),
          env: {},
          metadata: {},
          egress: { allowInternet: false },
        })
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(Error);
      expect(String((err as Error).message)).toMatch(/nft/);
      expect(await cubelet.listSandboxes()).toEqual([]);
      await until(async () => (await cubelet.nodeView()).pool.inUse === 0);
      await until(async () => (await countKernelObjects(tag)).processes === 0);
    } finally {
      await network.setPolicy(defaultNetworkPolicy()); // the node's table back
    }
    expect((await execa('nft', ['list', 'table', 'inet', `cube_${tag}`])).stdout).toContain('chain egress');
  });
});

describe('slot return', () => {
  const pidsIn = async (netns: string) => (await execa('ip', ['netns', 'pids', netns])).stdout.trim();

  it('a destroyed sandbox leaves no process in its netns (one that left its session too): its slot comes back without a scan of the host', async () => {
    const release = vi.spyOn(network, 'release');
    try {
      const v = await create();
      const slot = network.slotOf(v.sandboxID)!;
      await collect(await cubelet.startProcess(v.sandboxID, { argv: ['sh', '-c', 'setsid sleep 1000 >/dev/null 2>&1 < /dev/null &'] }));
      expect(await pidsIn(slot.netns)).not.toBe('');
      await cubelet.destroySandbox(v.sandboxID);
      expect(release).toHaveBeenCalledWith(v.sandboxID, { processesGone: true });
      expect(await pidsIn(slot.netns)).toBe('');
    } finally {
      release.mockRestore();
    }
  });

  it('a slot whose driver destroy failed goes through the scan: a process left in it retires it', async () => {
    const release = vi.spyOn(network, 'release');
    const destroy = vi.spyOn(driver, 'destroy').mockRejectedValueOnce(new CubeError('DESTROY_FAILED', 'injected'));
    try {
      const v = await create();
      const slot = network.slotOf(v.sandboxID)!;
      await expect(cubelet.destroySandbox(v.sandboxID)).rejects.toMatchObject({ kind: 'DESTROY_FAILED' });
      expect(release).toHaveBeenCalledWith(v.sandboxID, { processesGone: false });
      await network.settled();
      // The init still runs in it: retired (its name gone), never handed to another sandbox.
      expect(existsSync(slot.netnsPath)).toBe(false);
      await cubelet.destroySandbox(v.sandboxID);
      expect(await cubelet.listSandboxes()).toEqual([]);
    } finally {
      release.mockRestore();
      destroy.mockRestore();
    }
  });
});
