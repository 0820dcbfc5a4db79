import { describe, expect, it } from 'vitest';
import { refillSlack } from '../../src/network/pool.js';

describe('refillSlack', () => {
  it.each([
    [0, 0],
    [1, 0],
    [4, 0],
    [15, 0],
    [16, 4],
    [32, 8],
    [64, 16],
    [1000, 250],
  ])('tap_init_num %i may lack %i free slots before a refill', (initNum, slack) => {
    expect(refillSlack(initNum)).toBe(slack);
  });
});
