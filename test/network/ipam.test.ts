import { describe, expect, it } from 'vitest';
import { SlotAllocator, formatIPv4, parseIPv4, parseRange, slotAddresses } from '../../src/network/ipam.js';
import { CubeError } from '../../src/errors.js';

describe('parseRange', () => {
  it.each([
    ['10.213.0.0/16', { cidr: '10.213.0.0/16', prefixLen: 16, maxIndex: 16383 }],
    ['192.168.0.0/18', { cidr: '192.168.0.0/18', prefixLen: 18, maxIndex: 4095 }],
    [' 10.0.0.0/29 ', { cidr: '10.0.0.0/29', prefixLen: 29, maxIndex: 1 }],
    // Wider than a /14: the first 99,999 slots (5 digits after a 6-character tag in a link name).
    ['10.0.0.0/8', { cidr: '10.0.0.0/8', prefixLen: 8, maxIndex: 99_999 }],
  ])('%s', (cidr, want) => {
    expect(parseRange(cidr)).toMatchObject(want);
  });

  it.each([
    ['10.213.5.0/16', /host bits set; did you mean 10\.213\.0\.0\/16/],
    ['10.213.0.0/30', /between \/8 and \/29/],
    ['10.0.0.0/7', /between \/8 and \/29/],
    ['10.213.0/16', /not an IPv4 address/],
    ['10.256.0.0/16', /not an IPv4 address/],
    ['10.213.0.0', /must look like/],
    ['', /must look like/],
  ])('rejects %j', (cidr, msg) => {
    const err = (() => {
      try {
        parseRange(cidr);
      } catch (e) {
        return e;
      }
    })();
    expect(err).toBeInstanceOf(CubeError);
    expect((err as CubeError).kind).toBe('CONFIG_INVALID');
    expect((err as CubeError).message).toMatch(msg);
  });
});

describe('slotAddresses', () => {
  const r16 = parseRange('10.213.0.0/16');
  it.each([
    [1, '10.213.0.5', '10.213.0.6'],
    [2, '10.213.0.9', '10.213.0.10'],
    [63, '10.213.0.253', '10.213.0.254'],
    [64, '10.213.1.1', '10.213.1.2'],
    [16383, '10.213.255.253', '10.213.255.254'],
  ])('slot %i: host %s, sandbox %s', (i, host, sbx) => {
    expect(slotAddresses(r16, i)).toEqual({ index: i, hostIp: host, sandboxIp: sbx, prefixLen: 30 });
  });

  it.each([0, -1, 16384, 1.5])('index %d is outside the range', (i) => {
    expect(() => slotAddresses(r16, i)).toThrow(/outside 10\.213\.0\.0\/16/);
  });
});

describe('IPv4 text', () => {
  it.each([
    ['0.0.0.0', 0],
    ['10.213.0.1', 181731329],
    ['255.255.255.255', 4294967295],
  ])('%s <-> %i', (s, n) => {
    expect(parseIPv4(s)).toBe(n);
    expect(formatIPv4(n)).toBe(s);
  });
});

describe('SlotAllocator', () => {
  it('hands out the lowest free index, never 0, and reuses freed ones', () => {
    const a = new SlotAllocator(parseRange('10.1.0.0/27')); // 7 slots
    expect([1, 2, 3].map(() => a.allocate().index)).toEqual([1, 2, 3]);
    a.free(2);
    expect(a.allocate().index).toBe(2);
    expect(a.allocate().index).toBe(4);
    a.claim(5);
    expect(a.allocate().index).toBe(6);
    expect(a.used).toBe(6);
  });

  it('says the range is exhausted with NETWORK_FAILED', () => {
    const a = new SlotAllocator(parseRange('10.1.0.0/29')); // 1 slot
    expect(a.allocate()).toEqual({ index: 1, hostIp: '10.1.0.5', sandboxIp: '10.1.0.6', prefixLen: 30 });
    let err: unknown;
    try {
      a.allocate();
    } catch (e) {
      err = e;
    }
    expect((err as CubeError).kind).toBe('NETWORK_FAILED');
    expect((err as CubeError).message).toMatch(/10\.1\.0\.0\/29 is exhausted: all 1 slots/);
    a.free(1);
    expect(a.allocate().index).toBe(1);
  });

  it('refuses to claim an index outside the range', () => {
    const a = new SlotAllocator(parseRange('10.1.0.0/29'));
    expect(() => a.claim(2)).toThrow(/outside/);
  });
});
