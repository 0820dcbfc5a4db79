// Node RPC end to end: a real Cubelet (ns runtime, pooled network) served over HTTP by
// nodeRpcHandler, driven only through RemoteNode, as a control plane would.
import { createServer, type Server } from 'node:http';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigStore } from '../../src/config/store.js';
import { Cubelet } from '../../src/cubelet/cubelet.js';
import { FenceBook } from '../../src/cubelet/fences.js';
import { RemoteNode } from '../../src/cubelet/remote.js';
import { nodeRpcHandler } from '../../src/cubelet/rpc-server.js';
import { simNode } from '../../src/cubelet/sim-nodes.js';
import { ConnectError, createClient } from '@connectrpc/connect';
import { createConnectTransport } from '@connectrpc/connect-node';
import { NodeService } from '../../src/cubelet/gen/cube/node/v1/node_pb.js';
import { CubeError } from '../../src/errors.js';
import { newSandboxID, newVolumeID, nodeTag } from '../../src/ids.js';
import { NsNetworkAgent } from '../../src/network/agent.js';
import { parseRange } from '../../src/network/ipam.js';
import { NsDriver } from '../../src/runtime/ns/driver.js';
import { TemplateStore } from '../../src/templates/store.js';
import { defaultNetworkPolicy, countKernelObjects, purgeNetwork, testCidr, uniqueNodeID } from '../helpers/kernel.js';

const SECRET = 'test-cluster-secret';
const nodeID = uniqueNodeID('rpc');
const tag = nodeTag(nodeID);
const dir = mkdtempSync(join(tmpdir(), 'cubed-test-rpc-'));
let cubelet: Cubelet;
let config: ConfigStore;
let server: Server;
let remote: RemoteNode;
/** The generated client with no mapping: what the wire itself answers. */
const raw = () => createClient(NodeService, createConnectTransport({ baseUrl: remote.address, httpVersion: '1.1' }));

beforeAll(async () => {
  await execa('node', [join(import.meta.dirname, '..', '..', 'scripts', 'build-native.mjs')]);
  const cidr = testCidr();
  writeFileSync(
    join(dir, 'cubelet.toml'),
    `[quota]\ncpus = 8\nmemory_mib = 65536\n[plugins."io.cubelet.internal.v1.network"]\ntap_init_num = 2\ncidr = "${cidr}"\n`,
  );
  writeFileSync(join(dir, 'cubemaster.yaml'), 'sandbox:\n  default_spec: { cpus: 1, memory_mib: 256, disk_gib: 1 }\n');
  config = new ConfigStore(dir);
  const log = pino({ level: 'silent' });
  let c: Cubelet | undefined;
  const network = new NsNetworkAgent({ nodeTag: tag, cidr, initNum: 2, policy: defaultNetworkPolicy(), log, onNotice: (n) => c?.report(n.kind, n.message) });
  c = new Cubelet({
    nodeID,
    dataDir: dir,
    driver: new NsDriver({ dataDir: dir, nodeTag: tag, log }),
    network,
    templates: new TemplateStore(dir),
    config: () => config.config,
    log,
    poolSlotLimit: parseRange(cidr).maxIndex,
  });
  cubelet = c;
  await cubelet.start();
  server = createServer(nodeRpcHandler(cubelet, SECRET, new FenceBook(dir, [])));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  remote = new RemoteNode(nodeID, `http://127.0.0.1:${(server.address() as { port: number }).port}`, SECRET);
}, 120_000);

afterAll(async () => {
  try {
    server?.close();
    await cubelet?.stop({ destroy: true });
    config?.close();
  } finally {
    await purgeNetwork(tag);
    rmSync(dir, { recursive: true, force: true });
  }
  // Killed sandbox processes linger as zombies until reaped: give them a moment.
  let left = await countKernelObjects(tag);
  for (let i = 0; i < 60 && left.processes > 0; i++) {
    await new Promise((r) => setTimeout(r, 50));
    left = await countKernelObjects(tag);
  }
  expect(left).toEqual({ netns: 0, links: 0, cgroups: 0, mounts: 0, processes: 0, nftTables: 0 });
}, 120_000);

describe('node RPC', () => {
  it('refuses a caller without the cluster secret', async () => {
    const intruder = new RemoteNode(nodeID, remote.address, 'wrong-secret');
    await expect(intruder.listSandboxes()).rejects.toMatchObject({ kind: 'UNAUTHORIZED' });
  });

  it('creates, execs with streamed output, moves files, pauses, resumes and destroys over HTTP', async () => {
    const sandboxID = newSandboxID();
    const endAt = Date.now() + 60_000;
    const sb = await remote.createSandbox({
      sandboxID,
      templateID: 'host',
      cpus: 1,
      memoryMiB: 256,
      diskGiB: 1,
      endAt,
      env: { GREETING: 'hi' },
      metadata: { who: 'rpc' },
      owner: 'key-0123abcd',
    });
    try {
      expect(sb).toMatchObject({ sandboxID, nodeID, state: 'running', owner: 'key-0123abcd' });
      expect((await remote.listSandboxes()).map((s) => s.sandboxID)).toContain(sandboxID);

      const p = await remote.startProcess(sandboxID, { argv: ['sh', '-c', 'echo "$GREETING out"; echo err >&2; exit 3'] });
      let out = '';
      let err = '';
      let end: unknown;
      for await (const e of p.events) {
        if (e.type === 'stdout') out += e.data.toString();
        if (e.type === 'stderr') err += e.data.toString();
        if (e.type === 'end') end = e;
      }
      expect(out).toBe('hi out\n');
      expect(err).toBe('err\n');
      expect(end).toMatchObject({ exitCode: 3 });
      expect((await remote.processOutput(sandboxID)).map((l) => `${l.stream} ${l.line}`)).toEqual([
        'process started: sh -c echo "$GREETING out"; echo err >&2; exit 3',
        'stdout hi out',
        'stderr err',
        'process ended: exit code 3',
      ]);

      // A watch over the node RPC: set when watchDir resolves, ended by return() however quiet.
      const watch = (await remote.watchDir(sandboxID, { path: '/tmp', recursive: false, user: 'root' }))[Symbol.asyncIterator]();
      await remote.writeFile(sandboxID, '/tmp/watched', Buffer.from('x'));
      expect((await watch.next()).value).toEqual({ type: 'create', name: 'watched' });
      await watch.return!();

      const stat = await remote.writeFile(sandboxID, '/tmp/x.bin', Buffer.from([0, 1, 2, 255]));
      expect(stat.mtime).toBeInstanceOf(Date);
      const back = Buffer.concat(await (await remote.readFile(sandboxID, '/tmp/x.bin')).toArray());
      expect([...back]).toEqual([0, 1, 2, 255]);
      expect((await remote.listDir(sandboxID, '/tmp')).map((f) => f.name)).toContain('x.bin');

      expect((await remote.pauseSandbox(sandboxID)).state).toBe('paused');
      expect((await remote.resumeSandbox(sandboxID)).state).toBe('running');
      const view = await remote.nodeView();
      expect(view.nodeID).toBe(nodeID);
      expect(view.sandboxes.total).toBeGreaterThanOrEqual(1);
    } finally {
      await remote.destroySandbox(sandboxID);
    }
    expect(await remote.getSandbox(sandboxID)).toBeUndefined();
  }, 60_000);

  it('a restarted node still refuses a lock fence older than one it accepted (kept under its data dir)', async () => {
    const sandboxID = newSandboxID();
    const endAt = () => Date.now() + 60_000;
    await remote.createSandbox({ sandboxID, templateID: 'host', cpus: 1, memoryMiB: 256, diskGiB: 1, endAt: endAt(), env: {}, metadata: {} });
    let again: ReturnType<typeof createServer> | undefined;
    try {
      await remote.withFence('10').setEndAt(sandboxID, endAt());
      // The node's RPC as it comes back after a restart: a new handler, its fences read from disk.
      again = createServer(nodeRpcHandler(cubelet, SECRET, new FenceBook(dir, [sandboxID])));
      await new Promise<void>((r) => again!.listen(0, '127.0.0.1', r));
      const restarted = new RemoteNode(nodeID, `http://127.0.0.1:${(again.address() as { port: number }).port}`, SECRET);
      await expect(restarted.withFence('9').setEndAt(sandboxID, endAt())).rejects.toMatchObject({ kind: 'STALE_FENCE', code: 130491 });
      await restarted.withFence('11').destroySandbox(sandboxID);
    } finally {
      again?.close();
      await cubelet.destroySandbox(sandboxID).catch(() => undefined);
    }
  });

  it('a message the schema cannot read, a value outside its sets and an unknown call are refused with a clear error, and nothing is done', async () => {
    const before = (await remote.listSandboxes()).length;
    const garbage = await fetch(`${remote.address}/cube.node.v1.NodeService/CreateSandbox`, {
      method: 'POST',
      headers: { authorization: `Bearer ${SECRET}`, 'content-type': 'application/proto' },
      body: new Uint8Array([0xff, 0xff, 0xff, 0x07, 0x01]),
    });
    expect(garbage.status).toBe(400);
    expect(await garbage.json()).toMatchObject({ code: 'invalid_argument', message: expect.stringContaining('parse binary: illegal tag') });

    const sandboxID = newSandboxID();
    const odd = await raw()
      .createSandbox(
        {
          sandboxId: sandboxID,
          templateId: 'host',
          spec: { cpus: 1, memoryMib: 256, diskGib: 1 },
          endAt: Date.now() + 60_000,
          lifecycle: { onTimeout: 'explode' },
        },
        { headers: { authorization: `Bearer ${SECRET}` } },
      )
      .catch((e: unknown) => ConnectError.from(e));
    expect(odd).toBeInstanceOf(ConnectError);
    expect((odd as ConnectError).metadata.get('x-cube-code')).toBe('130400');
    expect((odd as ConnectError).rawMessage).toContain('lifecycle.onTimeout "explode"');

    const unknown = await fetch(`${remote.address}/cube.node.v1.NodeService/NoSuchCall`, {
      method: 'POST',
      headers: { authorization: `Bearer ${SECRET}`, 'content-type': 'application/json' },
      body: '{}',
    });
    expect(unknown.status).toBe(404);
    expect(await remote.getSandbox(sandboxID)).toBeUndefined();
    expect((await remote.listSandboxes()).length).toBe(before);
  });

  it("a call that reaches the node after its caller's deadline is refused (130596) and not done", async () => {
    const sandboxID = newSandboxID();
    const late = await raw()
      .createSandbox(
        { sandboxId: sandboxID, templateId: 'host', spec: { cpus: 1, memoryMib: 256, diskGib: 1 }, endAt: Date.now() + 60_000 },
        { headers: { authorization: `Bearer ${SECRET}`, 'x-cube-deadline': String(Date.now() - 1000) } },
      )
      .catch((e: unknown) => ConnectError.from(e));
    expect((late as ConnectError).metadata.get('x-cube-code')).toBe('130596');
    expect((late as ConnectError).rawMessage).toContain("after its caller's deadline");
    // Through the client: its own deadline already passed, whichever side gives up first, the answer is 130596.
    await expect(
      remote.createSandbox({
        sandboxID,
        templateID: 'host',
        cpus: 1,
        memoryMiB: 256,
        diskGiB: 1,
        endAt: Date.now() + 60_000,
        env: {},
        metadata: {},
        deadline: Date.now() - 1000,
      }),
    ).rejects.toMatchObject({ kind: 'NODE_UNREACHABLE', code: 130596 });
    expect(await remote.getSandbox(sandboxID)).toBeUndefined();
  });

  it('node errors come back as the same CubeError (code and message); a dead address is 130596', async () => {
    const e = await remote.pauseSandbox('nosuchsandboxxxxxxxx').catch((x: unknown) => x);
    const here = await cubelet.pauseSandbox('nosuchsandboxxxxxxxx').catch((x: unknown) => x);
    expect(here).toBeInstanceOf(CubeError);
    expect(e).toBeInstanceOf(CubeError);
    expect(e).toMatchObject({ kind: (here as CubeError).kind, code: (here as CubeError).code, message: (here as CubeError).message });
    expect((e as CubeError).kind).toBe('NOT_FOUND');
    // The same through connect-node's adapter (a JSON-codec Connect client: not the unary fast road).
    const viaAdapter = await createClient(NodeService, createConnectTransport({ baseUrl: remote.address, httpVersion: '1.1', useBinaryFormat: false }))
      .pauseSandbox({ sandboxId: 'nosuchsandboxxxxxxxx' }, { headers: { authorization: `Bearer ${SECRET}` } })
      .catch((x: unknown) => ConnectError.from(x));
    expect((viaAdapter as ConnectError).metadata.get('x-cube-code')).toBe(String((here as CubeError).code));
    expect((viaAdapter as ConnectError).rawMessage).toBe((here as CubeError).message);
    const dead = new RemoteNode('dead', 'http://127.0.0.1:1', SECRET, 2000);
    await expect(dead.nodeView()).rejects.toMatchObject({ kind: 'NODE_UNREACHABLE', code: 130596 });
  });

  it('volumes over NodeVolumes and their byte streams: made, written with owner and mode, read, listed, changed and removed', async () => {
    const vols = remote.volumes;
    const id = newVolumeID();
    await vols.create(id, 64 << 20);
    try {
      expect(await vols.ids()).toContain(id);
      const made = await vols.makeDir(id, '/a/b', { force: true, mode: 0o750 });
      expect(made).toMatchObject({ path: '/a/b', type: 'dir', mode: 0o750 });
      const written = await vols.writeFile(id, '/a/b/f.bin', Buffer.from([0, 1, 2, 255]), { uid: 1234, gid: 1234, mode: 0o600 });
      expect(written).toMatchObject({ name: 'f.bin', type: 'file', size: 4, uid: 1234, gid: 1234, mode: 0o600 });
      // The times the node read, as Dates: the access and change times too (the E2B entry shows them).
      const here = await cubelet.volumes!.statPath(id, '/a/b/f.bin');
      const there = await vols.statPath(id, '/a/b/f.bin');
      expect(there).toEqual(here);
      expect(there.atime).toBeInstanceOf(Date);
      expect(there.ctime).toBeInstanceOf(Date);
      expect([...Buffer.concat(await (await vols.readFile(id, '/a/b/f.bin')).toArray())]).toEqual([0, 1, 2, 255]);
      expect((await vols.listDir(id, '/', 3)).map((f) => f.path).sort()).toEqual(['/a', '/a/b', '/a/b/f.bin']);
      expect(await vols.setMetadata(id, '/a/b/f.bin', { mode: 0o644 })).toMatchObject({ mode: 0o644, uid: 1234 });
      // A number (btrfs counts it at its next commit); a volume the node cannot tell of answers none.
      expect(typeof (await vols.usedBytes(id))).toBe('number');
      const other = newVolumeID();
      expect(await cubelet.volumes!.usedBytes(other)).toBeUndefined();
      expect(await vols.usedBytes(other)).toBeUndefined();
      await vols.removePath(id, '/a');
      expect(await vols.listDir(id, '/', 1)).toEqual([]);
    } finally {
      await vols.remove(id);
    }
    expect(await vols.ids()).not.toContain(id);
  }, 60_000);

  it("a volume call's CubeError crosses the wire with its code: an unknown volume, a bad owner, a node without volumes (422)", async () => {
    const id = newVolumeID();
    const unknown = await remote.volumes.statPath(id, '/').catch((x: unknown) => x);
    const unknownHere = await cubelet.volumes!.statPath(id, '/').catch((x: unknown) => x);
    expect(unknownHere).toBeInstanceOf(CubeError);
    expect(unknown).toBeInstanceOf(CubeError);
    expect(unknown).toMatchObject({
      kind: (unknownHere as CubeError).kind,
      code: (unknownHere as CubeError).code,
      message: (unknownHere as CubeError).message,
    });
    expect((unknown as CubeError).kind).toBe('NOT_FOUND');
    // A uid no sandbox maps: the node's 400 (the schema carries the number as given), and nothing is made.
    const bad = await remote.volumes.create(id, 16 << 20).then(() => remote.volumes.makeDir(id, '/d', { uid: -1 }).catch((x: unknown) => x));
    try {
      expect(bad).toMatchObject({ kind: 'BAD_REQUEST', code: 130400, message: expect.stringContaining('uid -1 must be') });
      expect(await remote.volumes.listDir(id, '/', 1)).toEqual([]);
    } finally {
      await remote.volumes.remove(id);
    }
    // A node whose runtime holds no volumes (sim): every volume call, unary or byte stream, is refused with 422 (130433).
    const sim = simNode({ nodeID: `${nodeID}-sim`, dataDir: join(dir, 'sim'), config: () => config.config, log: pino({ level: 'silent' }) });
    const bare = createServer(nodeRpcHandler(sim.api, SECRET, new FenceBook(join(dir, 'sim'), [])));
    await new Promise<void>((r) => bare.listen(0, '127.0.0.1', r));
    try {
      const none = new RemoteNode(`${nodeID}-sim`, `http://127.0.0.1:${(bare.address() as { port: number }).port}`, SECRET).volumes;
      for (const call of [() => none.ids(), () => none.create(id, 16 << 20), () => none.readFile(id, '/f')])
        await expect(call()).rejects.toMatchObject({ kind: 'VOLUME_RUNTIME', code: 130433, message: expect.stringContaining('holds no volumes') });
    } finally {
      bare.close();
    }
  });
});
