// Allocation wait of the network slot pool under a burst of concurrent acquires, with the
// pool warm (tap_init_num >= burst) and cold (empty: every slot made on demand). `--slot-mode tap`:
// the TAP pool's slots (a TAP and the guest's NAT made in each, as microVMs get them).
// Run as root: npx tsx bench/pool-burst.ts [--burst 50] [--rounds 3] [--cidr 10.199.0.0/16] [--slot-mode ns|tap]
import { parseArgs } from 'node:util';
import { performance } from 'node:perf_hooks';
import { NsNetworkAgent } from '../src/network/agent.js';
import type { SlotMode } from '../src/network/types.js';
import { policySettingsOf } from '../src/network/firewall.js';
import { CubeletConfigSchema } from '../src/config/schema.js';
import { nodeTag } from '../src/ids.js';
import { percentile } from '../src/model/stats.js';

const { values } = parseArgs({
  options: {
    burst: { type: 'string', default: '50' },
    rounds: { type: 'string', default: '3' },
    cidr: { type: 'string', default: '10.199.0.0/16' },
    'slot-mode': { type: 'string', default: 'ns' },
  },
});
const slotModeArg = values['slot-mode'];
if (slotModeArg !== 'ns' && slotModeArg !== 'tap') throw new Error(`--slot-mode must be ns or tap, got ${slotModeArg}`);
const slotMode: SlotMode = slotModeArg;
const burst = Number(values.burst);
const rounds = Number(values.rounds);
const tag = nodeTag(`pool-burst-${process.pid}`);

interface Round {
  waits: number[];
  wallMs: number;
  spawns: number;
  onDemand: number;
}

async function round(mode: 'warm' | 'cold'): Promise<Round> {
  const warm = mode === 'warm' ? burst : 0;
  const agent = new NsNetworkAgent({
    nodeTag: tag,
    cidr: values.cidr!,
    initNum: slotMode === 'ns' ? warm : 0,
    tapInitNum: slotMode === 'tap' ? warm : 0,
    policy: { ...policySettingsOf(CubeletConfigSchema.parse({}).plugins['io.cubelet.internal.v1.network']), denyOut: [] },
  });
  try {
    await agent.start();
    const spawns0 = agent.spawns;
    const t0 = performance.now();
    const waits = await Promise.all(
      Array.from({ length: burst }, async (_, i) => {
        const s = performance.now();
        await agent.acquire(`bench${i}`, slotMode);
        return performance.now() - s;
      }),
    );
    const wallMs = performance.now() - t0;
    const r = { waits, wallMs, spawns: agent.spawns - spawns0, onDemand: agent.levels(slotMode).onDemand };
    return r;
  } finally {
    await agent.stop({ destroy: true });
  }
}

const f = (x: number) => x.toFixed(2);
console.log(`pool-burst: ${burst} concurrent acquires of ${slotMode} slots, ${rounds} rounds per mode, node tag ${tag}`);
console.log('mode | round | wait p50 ms | wait p99 ms | burst wall ms | on demand | spawns during burst');
for (const mode of ['warm', 'cold'] as const) {
  const all: number[] = [];
  for (let k = 1; k <= rounds; k++) {
    const r = await round(mode);
    all.push(...r.waits);
    const sorted = [...r.waits].sort((a, b) => a - b);
    console.log(`${mode} | ${k} | ${f(percentile(sorted, 50))} | ${f(percentile(sorted, 99))} | ${f(r.wallMs)} | ${r.onDemand} | ${r.spawns}`);
  }
  const sorted = all.sort((a, b) => a - b);
  console.log(`${mode} | all | ${f(percentile(sorted, 50))} | ${f(percentile(sorted, 99))} | | |`);
}
