// Which compute node a control replica hands a template build to (pure): a live, schedulable node
// offering the ns runtime and keeping a layer store, with the build's memory left under its quota,
// the one with the most left; none says why.
import { describe, expect, it } from 'vitest';
import { buildNode } from '../../src/templates/cluster.js';
import { node } from '../scheduler/fixtures.js';

const builder = (id: string, usedMiB: number, over: Parameters<typeof node>[1] = {}) =>
  node(id, {
    address: `http://${id}:7000`,
    layers: [],
    runtime: 'ns',
    runtimes: [{ name: 'ns' }],
    capacity: { cpus: 8, memoryMiB: 16384, declared: false },
    ...over,
    usage: { quotaMemUsedMiB: usedMiB, ...over.usage },
  });

describe('buildNode', () => {
  it('picks the builder with the most memory left', () => {
    expect(buildNode([builder('a', 8000), builder('b', 1000), builder('c', 4000)], 512).nodeID).toBe('b');
  });

  it('leaves out nodes that are not live, not schedulable, without the ns runtime or without a layer store', () => {
    const views = [
      builder('down', 0, { healthy: false }),
      builder('lost', 0, { lost: true }),
      builder('cordoned', 0, { cordoned: true }),
      builder('full', 0, { schedulable: false, reason: 'disk 90% >= 80%' }),
      builder('vm', 0, { runtime: 'microvm', runtimes: [{ name: 'microvm' }] }),
      node('sim', { address: 'http://sim:7000', runtime: 'ns' }),
      builder('ok', 12000),
    ];
    expect(buildNode(views, 512).nodeID).toBe('ok');
  });

  it('says why when no node takes the build (503 130597)', () => {
    expect(() => buildNode([builder('a', 16000)], 1024)).toThrow(
      /no node offering the ns runtime has 1024 MiB of memory left for the build's steps \(most: 384 MiB\)/,
    );
    expect(() => buildNode([builder('a', 0, { schedulable: false, reason: 'disk 90% >= 80%' })], 512)).toThrow(
      /none of the 1 node\(s\) offering the ns runtime is schedulable \(a: disk 90% >= 80%\)/,
    );
    expect(() => buildNode([], 512)).toThrow(
      expect.objectContaining({ kind: 'NO_NODE', message: expect.stringContaining('no live compute node offering the ns runtime') }),
    );
  });
});
