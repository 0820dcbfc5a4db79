// The pure part of the egress policy: destinations parsed, merged into disjoint nftables
// interval elements, and a create's request checked against the node's deny list.
import { describe, expect, it } from 'vitest';
import { destinationElements, parseDestination, resolveEgress } from '../../src/network/egress.js';
import { sandboxRulesScript } from '../../src/network/nft.js';

describe('egress destinations', () => {
  it.each([
    ['1.2.3.4', [0x01020304, 0x01020304]],
    ['10.0.0.0/8', [0x0a000000, 0x0affffff]],
    ['10.1.2.3/8', [0x0a000000, 0x0affffff]], // host bits ignored, as nft does
    ['0.0.0.0/0', [0, 0xffffffff]],
  ])('%s is the range %j', (s, range) => expect(parseDestination(s, 'f')).toEqual(range));

  it.each(['1.2.3', '256.1.1.1', '1.2.3.4/33', '1.2.3.4/8/9', '', 'example.com'])('refuses %j, naming the field', (s) => {
    expect(() => parseDestination(s, 'network.allowOut')).toThrow(
      expect.objectContaining({ kind: 'BAD_REQUEST', message: expect.stringMatching(/^network\.allowOut: /) }),
    );
  });

  it('merges overlapping and adjacent destinations into disjoint elements (nft refuses overlaps)', () => {
    expect(destinationElements(['10.0.0.0/24', '10.0.0.7', '10.0.1.0/24', '8.8.8.8', '8.8.8.8/32'], 'f')).toEqual(['8.8.8.8', '10.0.0.0-10.0.1.255']);
    expect(destinationElements([], 'f')).toEqual([]);
  });
});

describe('resolveEgress', () => {
  const nodeDeny = ['10.0.0.0/8', '169.254.0.0/16'];
  it('leaves the node default alone when nothing is asked', () => {
    expect(resolveEgress(undefined, nodeDeny)).toBeUndefined();
    expect(resolveEgress({ allowOut: [], denyOut: [] }, nodeDeny)).toBeUndefined();
  });

  it('resolves the switch and both lists', () => {
    expect(resolveEgress({ allowInternet: false, allowOut: ['1.1.1.1', '1.0.0.1'], denyOut: ['0.0.0.0/0'] }, nodeDeny)).toEqual({
      internet: false,
      allowOut: ['1.0.0.1', '1.1.1.1'],
      denyOut: ['0.0.0.0-255.255.255.255'],
    });
  });

  it('refuses an allowOut the node deny list closes, naming both', () => {
    expect(() => resolveEgress({ allowOut: ['169.254.169.254'] }, nodeDeny)).toThrow(
      /network\.allowOut 169\.254\.169\.254 overlaps the node's deny_out 169\.254\.0\.0\/16/,
    );
    expect(() => resolveEgress({ allowOut: ['0.0.0.0/0'] }, nodeDeny)).toThrow(/deny_out 10\.0\.0\.0\/8/);
  });

  it('becomes the rules of the slot chain, reached from the map by the slot link; replaced or flushed whole', () => {
    const r = resolveEgress({ allowInternet: false, allowOut: ['1.1.1.1', '8.8.8.0/24'], denyOut: ['1.0.0.0/8'] }, nodeDeny)!;
    expect(sandboxRulesScript('ab12', 7, r).split('\n')).toEqual([
      'add chain inet cube_ab12 sb_7',
      'add element inet cube_ab12 sb_jump { "cubeab127" : jump sb_7 }',
      'flush chain inet cube_ab12 sb_7',
      'add rule inet cube_ab12 sb_7 ip daddr { 1.1.1.1, 8.8.8.0-8.8.8.255 } accept',
      'add rule inet cube_ab12 sb_7 ip daddr { 1.0.0.0-1.255.255.255 } counter drop',
      'add rule inet cube_ab12 sb_7 counter drop',
      '',
    ]);
    // Internet left to the node default: no final verdict, the chain returns.
    expect(sandboxRulesScript('ab12', 7, resolveEgress({ denyOut: ['9.9.9.9'] }, nodeDeny)!)).not.toMatch(/sb_7 (counter drop|accept)\n/);
    expect(sandboxRulesScript('ab12', 7, undefined)).toMatch(/flush chain inet cube_ab12 sb_7\n$/);
  });
});
