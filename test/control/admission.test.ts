// Admission rules shared by role all and the cluster: request defaults, template check,
// 130597 text, release-ratio resume policy, the audit an operation leaves.
import { describe, expect, it } from 'vitest';
import { audited, refusalError, refusalOf, requireFits, requireTemplate, resolveCreate, resumeRefusal } from '../../src/control/admission.js';
import { CubeError } from '../../src/errors.js';
import { EmbeddedStore } from '../../src/store/embedded.js';
import { config, node } from '../scheduler/fixtures.js';

describe('resolveCreate', () => {
  const master = config({ sandbox: { default_template: 'host', default_spec: { cpus: 1, memory_mib: 4096, disk_gib: 10 }, default_timeout_sec: 300 } });
  it.each([
    [{}, { templateID: 'host', cpus: 1, memoryMiB: 4096, diskGiB: 10, timeoutSec: 300 }],
    [
      { templateID: 'base', cpus: 2 },
      { templateID: 'host', cpus: 2, memoryMiB: 4096, diskGiB: 10, timeoutSec: 300 },
    ],
    [
      { templateID: 'py', memoryMiB: 512, timeoutSec: 5 },
      { templateID: 'py', cpus: 1, memoryMiB: 512, diskGiB: 10, timeoutSec: 5 },
    ],
    [{ templateID: 'py:latest' }, { templateID: 'py', cpus: 1, memoryMiB: 4096, diskGiB: 10, timeoutSec: 300 }],
    [{ templateID: 'py:v2' }, { templateID: 'py:v2', cpus: 1, memoryMiB: 4096, diskGiB: 10, timeoutSec: 300 }],
    [{ templateID: 'host:latest' }, { templateID: 'host', cpus: 1, memoryMiB: 4096, diskGiB: 10, timeoutSec: 300 }],
    [{ templateID: 'Not A Name' }, { templateID: 'Not A Name', cpus: 1, memoryMiB: 4096, diskGiB: 10, timeoutSec: 300 }],
    [{ metadata: { 'cube.open_files': '8192', 'cube.io.write_mibps': '10' } }, { templateID: 'host', cpus: 1, memoryMiB: 4096, diskGiB: 10, timeoutSec: 300 }],
  ])('%j -> %j', (req, want) => expect(resolveCreate(req, master)).toEqual(want));
  it.each([
    [{ cpus: 0 }],
    [{ memoryMiB: 8 }],
    [{ diskGiB: 0 }],
    [{ timeoutSec: 0 }],
    [{ timeoutSec: 1.5 }],
    [{ metadata: { 'cube.open_files': 'many' } }],
    [{ metadata: { 'cube.open_files': '0' } }],
    [{ metadata: { 'cube.io.write_mibps': '-1' } }],
    [{ metadata: { 'cube.io.read_iops': '1e3' } }],
  ])('refuses %j with 400', (req) => {
    expect(() => resolveCreate(req, master)).toThrow(expect.objectContaining({ kind: 'BAD_REQUEST' }));
  });
});

describe('requireTemplate', () => {
  it('passes when any node holds it, else 404 listing what exists', () => {
    expect(() => requireTemplate('py', [node('a', { templates: ['host'] }), node('b', { templates: ['py'] })])).not.toThrow();
    expect(() => requireTemplate('go', [node('a', { templates: ['py', 'host'] })])).toThrow('template go not found (available: host, py)');
    expect(() => requireTemplate('go', [])).toThrow('(available: none)');
  });
});

describe('refusalOf', () => {
  it.each([
    [{ ok: true as const, nodeID: 'a', score: 1 }, [node('a')], undefined],
    [{ ok: true as const, nodeID: 'a', score: 1 }, [node('a', { reason: 'pool exhausted' })], 'no node available: a: pool exhausted'],
    [{ ok: false as const, rejections: [{ nodeID: 'b', filter: 'disk', reason: 'disk 83% >= 80%' }] }, [node('b')], 'no node available: b: disk 83% >= 80%'],
  ])('%j', (placed, nodes, want) => expect(refusalOf(placed, nodes)).toBe(want));
});

describe('resumeRefusal', () => {
  // 16 GiB node, no reserve beyond the default 10 GiB: quota = (16384 - 10240) x 2 = 12288 MiB.
  const master = config({ host: { quota: { paused_resource_release_ratio: 0.5 } } });
  const spec = { cpus: 1, memoryMiB: 4096, diskGiB: 10 };
  const small = (used: number) => node('a', { capacity: { cpus: 8, memoryMiB: 16384, declared: true }, usage: { quotaMemUsedMiB: used } });
  it('admits when the released half fits next to what is used', () => {
    expect(resumeRefusal(spec, small(8000), master)).toBeUndefined();
  });
  it('refuses with the numbers when it does not', () => {
    expect(resumeRefusal(spec, small(11000), master)).toBe(
      'resume rejected by paused_resource_release_ratio policy: need 2101MB + used 11000MB > mem quota 12288MB',
    );
  });
});

describe('requireFits: a request no node could ever hold is a 400 naming the limit', () => {
  const master = config();
  const store = (id: string, gib: number) =>
    node(id, { usage: { store: { kind: 'loop', path: '/x/store', sizeBytes: gib * 1024 ** 3, freeBytes: gib * 1024 ** 3, usedPercent: 0 } } });
  const dev = (id: string) => node(id, { capacity: { cpus: 2, memoryMiB: 24576, declared: false } });
  it.each([
    ['fits on the reference node', { cpus: 1, memoryMiB: 4096 }, [node('a')], undefined],
    ['fits on one of two nodes', { cpus: 200, memoryMiB: 4096 }, [dev('a'), node('b')], undefined],
    [
      'fits on a full node later (usage does not count)',
      { cpus: 1, memoryMiB: 4096 },
      [node('a', { usage: { quotaCpuUsed: 307, quotaMemUsedMiB: 493568 } })],
      undefined,
    ],
    [
      'cpuCount 1000 on a 2-core box',
      { cpus: 1000, memoryMiB: 512 },
      [dev('a')],
      'a sandbox of 1000 vCPU / 512 MiB can never fit, even on an empty node: a: 1000 vCPU > cpu quota 25.6 (2 cpus x 16 cpu oversell x 80% node_max_cpu_util)',
    ],
    [
      '1 TiB of memory on the reference node',
      { cpus: 1, memoryMiB: 1 << 20 },
      [node('a')],
      'a sandbox of 1 vCPU / 1048576 MiB can never fit, even on an empty node: a: footprint 1065002 MiB > memory quota 493568 MiB ((257024 - 10240 reserved) x 2 mem oversell)',
    ],
    ['no node registered: left to the scheduler (130597)', { cpus: 1000, memoryMiB: 512 }, [], undefined],
    // Issue 29: disk_gib 4096 was accepted on a 12 GiB store.
    [
      'disk_gib 4096 on a 12 GiB store',
      { cpus: 1, memoryMiB: 512, diskGiB: 4096 },
      [store('a', 12)],
      'a sandbox of 1 vCPU / 512 MiB / 4096 GiB disk can never fit, even on an empty node: a: disk 4096 GiB > sandbox store 12 GiB',
    ],
    ['a disk the size of the store fits (oversell counts the sum, not one sandbox)', { cpus: 1, memoryMiB: 512, diskGiB: 12 }, [store('a', 12)], undefined],
    ['a node without a store does not limit disk', { cpus: 1, memoryMiB: 512, diskGiB: 4096 }, [node('a')], undefined],
    ['fits on the node with the larger store', { cpus: 1, memoryMiB: 512, diskGiB: 100 }, [store('a', 12), store('b', 200)], undefined],
  ])('%s', (_name, spec, nodes, want) => {
    if (want === undefined) expect(() => requireFits(spec, nodes, master)).not.toThrow();
    else expect(() => requireFits(spec, nodes, master)).toThrow(expect.objectContaining({ kind: 'BAD_REQUEST', http: 400, message: want }));
  });

  it('a disk oversell ratio below 1 lowers what one sandbox may ask', () => {
    const half = config({ host: { quota: { disk_oversell_ratio: 0.5 } } });
    expect(() => requireFits({ cpus: 1, memoryMiB: 512, diskGiB: 7 }, [store('a', 12)], half)).toThrow(
      expect.objectContaining({ http: 400, message: expect.stringContaining('a: disk 7 GiB > 6 GiB (sandbox store 12 GiB x 0.5 disk oversell)') }),
    );
    expect(() => requireFits({ cpus: 1, memoryMiB: 512, diskGiB: 6 }, [store('a', 12)], half)).not.toThrow();
  });
});

describe('refusalError: a transient shortage says when to retry', () => {
  const rej = (filter: string) => ({ nodeID: 'a', filter, reason: 'x' });
  it.each([
    ['only create slots short: 429, which the SDK retries', [rej('realtime_create_num')], { kind: 'CONCURRENCY_LIMITED', http: 429, retryAfter: 1 }],
    ['capacity: 503 with Retry-After', [rej('mem')], { kind: 'NO_NODE', http: 503, retryAfter: 1 }],
    ['mixed: capacity wins', [rej('realtime_create_num'), { ...rej('cpu'), nodeID: 'b' }], { kind: 'NO_NODE', http: 503, retryAfter: 1 }],
    [
      'no node allows raw sockets: 403, 130436, no retry',
      [rej('net_raw'), { ...rej('net_raw'), nodeID: 'b' }],
      { code: 130436, http: 403, retryAfter: undefined },
    ],
    ['one that allows them is full: capacity', [rej('net_raw'), { ...rej('mem'), nodeID: 'b' }], { kind: 'NO_NODE', http: 503, retryAfter: 1 }],
  ])('%s', (_name, rejections, want) => {
    expect(refusalError({ ok: false, rejections }, 'no node available: ...')).toMatchObject(want);
  });
});

describe("audited: the answer is the operation's, whatever becomes of its audit row (issue 24)", () => {
  const withStore = async (fn: (store: EmbeddedStore) => Promise<void>): Promise<void> => {
    const store = new EmbeddedStore({ path: ':memory:' });
    await store.init();
    try {
      await fn(store);
    } finally {
      await store.close();
    }
  };
  // The store goes away between the operation and its audit (MariaDB killed just after a delete
  // was remembered): the delete answered 503 ("not done"), and its retry 404.
  it('a done operation answers done when the audit cannot be written', () =>
    withStore(async (store) => {
      expect(await audited(store, 'k', 'sandbox.destroy', 'sb1', async () => (await store.close(), 'done'))).toBe('done');
    }));
  it("a refused one keeps its own error, not the audit's", () =>
    withStore(async (store) => {
      const refused = audited(store, 'k', 'sandbox.pause', 'sb1', async () => {
        await store.close();
        throw new CubeError('CONFLICT', 'sandbox sb1 is already paused');
      });
      await expect(refused).rejects.toMatchObject({ kind: 'CONFLICT' });
    }));
  it('audits both outcomes while the store is there', () =>
    withStore(async (store) => {
      await audited(store, 'k', 'sandbox.destroy', 'sb1', async () => undefined);
      await audited(store, 'k', 'sandbox.destroy', 'sb2', async () => Promise.reject(new CubeError('NOT_FOUND', 'gone'))).catch(() => undefined);
      expect((await store.listAudit()).map((a) => [a.target, a.outcome]).sort()).toEqual([
        ['sb1', 'ok'],
        ['sb2', 'gone'],
      ]);
    }));
});
