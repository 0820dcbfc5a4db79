// Which nodes a control replica asks for a template or a layer (pure): live nodes with an RPC
// address that have it, never the node asking, in random order.
import { describe, expect, it } from 'vitest';
import { holders } from '../../src/templates/relay.js';
import { node } from '../scheduler/fixtures.js';

const addr = (id: string) => `http://${id}:7000`;

describe('holders', () => {
  it('keeps the live nodes with an address that hold the layer, without the one asking', () => {
    const views = [
      node('a', { address: addr('a'), layers: ['sha256:x'] }),
      node('b', { address: addr('b'), layers: ['sha256:x'] }),
      node('c', { address: addr('c'), layers: [] }),
      node('d', { address: addr('d'), layers: ['sha256:x'], healthy: false }),
      node('e', { address: addr('e'), layers: ['sha256:x'], lost: true }),
      node('f', { layers: ['sha256:x'] }),
    ];
    const has = (v: (typeof views)[number]) => v.layers?.includes('sha256:x') === true;
    expect(
      holders(views, undefined, has)
        .map((v) => v.nodeID)
        .sort(),
    ).toEqual(['a', 'b']);
    expect(holders(views, 'a', has).map((v) => v.nodeID)).toEqual(['b']);
    expect(holders(views, 'b', () => false)).toEqual([]);
  });

  it('orders them at random (a burst of fetches spreads over the holders)', () => {
    const views = ['a', 'b', 'c'].map((id) => node(id, { address: addr(id) }));
    expect(
      holders(
        views,
        undefined,
        () => true,
        () => 0,
      ).map((v) => v.nodeID),
    ).toEqual(['b', 'c', 'a']);
    expect(
      holders(
        views,
        undefined,
        () => true,
        () => 0.99,
      ).map((v) => v.nodeID),
    ).toEqual(['a', 'b', 'c']);
  });
});
