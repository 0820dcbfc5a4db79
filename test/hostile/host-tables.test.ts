// Host-wide tables (issue 12 item 3, the part done): when the host runs out of memory its OOM
// killer takes sandbox processes before the node's daemon (cubed runs at -900), and no sandbox
// can put itself below it.
import { readFileSync } from 'node:fs';
import { beforeAll, describe, expect, it } from 'vitest';
import type { SandboxHandle } from '../../src/runtime/types.js';
import { startDaemon } from '../helpers/daemon.js';
import { run, useRig } from '../runtime/harness.js';

describe('OOM killer order', () => {
  const rig = useRig('hostile-oom');
  let h: SandboxHandle;
  beforeAll(async () => {
    h = await rig().driver.create(rig().spec());
  });

  it('sandbox processes score +500, and root inside cannot go below 0', async () => {
    expect(readFileSync(`/proc/${h.initPid}/oom_score_adj`, 'utf8')).toBe('500\n');
    for (const user of ['root', 'user'] as const) {
      const r = await run(rig(), h, ['sh', '-c', 'cat /proc/self/oom_score_adj; echo -100 > /proc/self/oom_score_adj; echo rc=$?; cat /proc/self/oom_score_adj'], { user });
      expect(r.stdout, user).toBe('500\nrc=1\n500\n');
    }
  });
});

describe('the node daemon', () => {
  it('runs at oom_score_adj -900 (where the host grants CAP_SYS_RESOURCE), below every sandbox', async () => {
    const capEff = BigInt('0x' + /CapEff:\s+([0-9a-f]+)/.exec(readFileSync('/proc/self/status', 'utf8'))![1]);
    const d = await startDaemon();
    try {
      const adj = Number(readFileSync(`/proc/${d.pid}/oom_score_adj`, 'utf8'));
      expect(adj).toBeLessThan(500);
      if (capEff & (1n << 24n)) expect(adj).toBe(-900);
    } finally {
      await d.stop();
    }
  });
});
