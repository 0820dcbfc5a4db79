import { beforeAll, describe, expect, it } from 'vitest';
import type { SandboxHandle } from '../../src/runtime/types.js';
import { run, useRig } from './harness.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('ns driver pause/resume', () => {
  const rig = useRig('pause');
  let h: SandboxHandle;
  beforeAll(async () => {
    h = await rig().driver.create(rig().spec());
  });

  const counter = async () => Number((await (await rig().driver.files.read(h, '/tmp/counter')).toArray()).join(''));

  it('stops a counter while paused and lets it go on after resume', async () => {
    const start = await run(rig(), h, [
      'sh',
      '-c',
      `nohup sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/counter.new; mv /tmp/counter.new /tmp/counter; sleep 0.02; done' >/dev/null 2>&1 &`,
    ]);
    expect(start.exitCode).toBe(0);
    while (!((await counter().catch(() => 0)) > 2)) await sleep(20);
    await rig().driver.pause(h);
    const frozen = await counter(); // files work while paused
    await sleep(300);
    expect(await counter()).toBe(frozen);
    expect(rig().driver.alive(h)).toBe(true);
    await rig().driver.resume(h);
    while ((await counter()) === frozen) await sleep(20);
    expect(await counter()).toBeGreaterThan(frozen);
  });

  it('destroys a paused sandbox', async () => {
    const p = await rig().driver.create(rig().spec());
    await rig().driver.pause(p);
    await rig().driver.destroy(p.sandboxID);
    expect(rig().driver.alive(p)).toBe(false);
    await rig().driver.destroy(p.sandboxID); // idempotent
  });
});
