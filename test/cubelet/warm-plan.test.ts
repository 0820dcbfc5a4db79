// The warm pools' decisions (src/cubelet/warm-plan.ts) as tables.
import { describe, expect, it } from 'vitest';
import { CubeletConfigSchema, MasterConfigSchema } from '../../src/config/schema.js';
import type { SandboxMeta } from '../../src/cubelet/meta.js';
import { claimedMeta, fitsWarm, nextStep, targetSizes, warmMeta, warmRoom, type PoolLevel } from '../../src/cubelet/warm-plan.js';

const cfg = (warm_pool: object) => CubeletConfigSchema.parse({ warm_pool }).warm_pool;
const spec = { cpus: 1, memoryMiB: 4096, diskGiB: 10 };

describe('targetSizes', () => {
  const now = 1_000_000_000;
  const used = new Map([
    ['ci', now - 60_000],
    ['old', now - 901_000],
  ]);
  it.each([
    ['templates used within idle_sec get size', {}, { ci: 1 }],
    ['size 0 turns them off', { size: 0 }, {}],
    ['a named template is warmed without a create, 0 turns one off', { size: 2, templates: { py: 3, ci: 0 } }, { py: 3 }],
    ['a longer idle time keeps an older one', { idle_sec: 3600 }, { ci: 1, old: 1 }],
  ])('%s', (_what, c, want) => {
    expect(Object.fromEntries(targetSizes(cfg(c), used, now))).toEqual(want);
  });
});

describe('nextStep', () => {
  const lv = (template: string, ready: number, starting = 0): PoolLevel => ({ template, ready, starting });
  it.each<[string, Record<string, number>, PoolLevel[], number, Set<string> | undefined, { drop: string[]; make?: string }]>([
    ['an empty pool with room makes one', { ci: 1 }, [], 5, undefined, { drop: [], make: 'ci' }],
    ['a full pool does nothing', { ci: 1 }, [lv('ci', 1)], 5, undefined, { drop: [] }],
    ['one at a time: nothing while one is made', { ci: 2, py: 1 }, [lv('ci', 0, 1)], 5, undefined, { drop: [] }],
    ['the shortest pool first', { ci: 2, py: 1 }, [lv('ci', 1)], 5, undefined, { drop: [], make: 'py' }],
    ['a template no longer wanted is dropped', {}, [lv('ci', 2)], 5, undefined, { drop: ['ci', 'ci'] }],
    ['over its size: the extra dropped', { ci: 1 }, [lv('ci', 3)], 5, undefined, { drop: ['ci', 'ci'] }],
    ['no room: all ready ones dropped, none made', { ci: 1, py: 1 }, [lv('ci', 1), lv('py', 1)], 0, undefined, { drop: ['ci', 'py'] }],
    ['room for one of two: the larger pool gives first', { ci: 2, py: 1 }, [lv('ci', 2), lv('py', 1)], 2, undefined, { drop: ['ci'] }],
    ['room for none with one starting: ready ones go, the starting one waits', { ci: 2 }, [lv('ci', 1, 1)], 0, undefined, { drop: ['ci'] }],
    ['a template in back-off is not made', { ci: 1, py: 1 }, [], 5, new Set(['ci']), { drop: [], make: 'py' }],
  ])('%s', (_what, targets, levels, room, skip, want) => {
    expect(nextStep(new Map(Object.entries(targets)), levels, room, skip)).toEqual(want);
  });
});

describe('warmRoom', () => {
  // The reference node of design.md: 128 cores, 251 GiB, 1 vCPU / 4096 MiB (footprint 4202 MiB), no oversell: 58 fit.
  const master = (over: object = {}) => MasterConfigSchema.parse({ host: { quota: { mem_oversell_ratio: 1 } }, ...over });
  const running = (n: number) => Array.from({ length: n }, () => ({ state: 'running' as const, spec }));
  const inputs = (real: number, o: { declared?: boolean; avail?: number; master?: ReturnType<typeof master> } = {}) => ({
    capacity: { cpus: 128, memoryMiB: 251 * 1024, declared: o.declared ?? true },
    master: o.master ?? master(),
    memAvailableMiB: o.avail ?? 200_000,
    real: running(real),
    spec,
  });
  it.each([
    ['an empty node: its headroom', inputs(0), 58],
    ['beside real sandboxes: what they leave', inputs(50), 8],
    ['a full node: none', inputs(58), 0],
    ['node_max_mvm_num counts real ones only', inputs(3, { master: master({ scheduler: { node_max_mvm_num: 4 } }) }), 1],
    ['memory available under the reserve (a host-read node): none', inputs(0, { declared: false, avail: 9_000 }), 0],
    ['a declared node does not read the host memory (as the mem filter)', inputs(0, { avail: 9_000 }), 58],
  ])('%s', (_what, i, want) => {
    expect(warmRoom(i)).toBe(want);
  });
});

describe('fitsWarm and the claimed record', () => {
  const w = { spec, runtime: 'ns' };
  const m = (over: Partial<SandboxMeta> = {}) => ({ spec, metadata: {}, ...over });
  it.each([
    ['the default spec and runtime', m(), true],
    ['the runtime named', m({ runtime: 'ns' }), true],
    ['another runtime', m({ runtime: 'microvm' }), false],
    ['another memory size', m({ spec: { ...spec, memoryMiB: 512 } }), false],
    ['another disk size', m({ spec: { ...spec, diskGiB: 20 } }), false],
    ['volumes', m({ volumes: [{ name: 'v', path: '/data' } as never] }), false],
    ['a snapshot to start from', m({ fromSnapshot: 's1' }), false],
    ['raw sockets', m({ metadata: { 'cube.net_raw': 'true' } }), false],
    ['other metadata', m({ metadata: { who: 'me' } }), true],
  ])('%s: %s', (_what, meta, want) => {
    expect(fitsWarm(w, meta)).toBe(want);
  });

  it("keeps the create's identity and the warm sandbox's runtime id, slot, runtime and workdir", () => {
    const warm = { ...warmMeta('wwwwwwwwwwwwwwwwwwww', 'ci', spec), slotIndex: 7, workdir: '/app', runtime: 'ns' };
    expect(warm).toMatchObject({ warm: true, env: {}, metadata: {}, endAt: Number.MAX_SAFE_INTEGER });
    const create: SandboxMeta = { ...warmMeta('pppppppppppppppppppp', 'ci', spec), env: { A: '1' }, metadata: { k: 'v' }, endAt: 5, owner: 'key1' };
    delete create.warm;
    const c = claimedMeta(warm, create);
    expect(c).toEqual({ ...create, runtimeID: 'wwwwwwwwwwwwwwwwwwww', slotIndex: 7, workdir: '/app', runtime: 'ns' });
    expect(c.warm).toBeUndefined();
  });
});
