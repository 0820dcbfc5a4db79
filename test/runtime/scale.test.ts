import { describe, expect, it } from 'vitest';
import { findLeaks, NO_LEAKS, run, useRig } from './harness.js';

describe('ns driver at scale', () => {
  const rig = useRig('scale');

  it('creates and destroys 100 sandboxes concurrently without leaking anything', { timeout: 180_000 }, async () => {
    const specs = Array.from({ length: 100 }, () => rig().spec({ memoryMiB: 64 }));
    const created = await Promise.allSettled(specs.map((s) => rig().driver.create(s)));
    const handles = created.flatMap((c) => (c.status === 'fulfilled' ? [c.value] : []));
    const failures = created.flatMap((c) => (c.status === 'rejected' ? [String(c.reason)] : []));
    expect(failures).toEqual([]);
    expect(new Set(handles.map((h) => h.initPid)).size).toBe(100);
    expect(handles.every((h) => rig().driver.alive(h))).toBe(true);
    expect((await rig().driver.scan()).map((h) => h.sandboxID).sort()).toEqual(specs.map((s) => s.sandboxID).sort());
    const some = await Promise.all(handles.slice(0, 5).map((h) => run(rig(), h, ['hostname'])));
    expect(some.map((r) => r.stdout.trim())).toEqual(handles.slice(0, 5).map((h) => h.sandboxID));

    await Promise.all(handles.map((h) => rig().driver.destroy(h.sandboxID)));
    expect(handles.some((h) => rig().driver.alive(h))).toBe(false);
    const leaks = findLeaks(rig().tag, rig().dataDir);
    expect({ ...leaks, processes: [] }).toEqual(NO_LEAKS); // zombies are checked (after reaping) in teardown
  });
});
