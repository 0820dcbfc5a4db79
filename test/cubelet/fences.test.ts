// FenceBook: the highest lock fence a node accepted per sandbox survives the node's restart
// (a new FenceBook over the same data dir), and goes with the sandbox.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, expect, it } from 'vitest';
import { FenceBook } from '../../src/cubelet/fences.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function dataDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'cubed-test-fences-'));
  dirs.push(d);
  return d;
}

it('refuses a fence lower than one accepted before, also after the node restarts', () => {
  const dir = dataDir();
  const before = new FenceBook(dir, []);
  before.check('sbxa', 7);
  before.check('sbxa', 9);
  expect(() => before.check('sbxa', 8)).toThrow(expect.objectContaining({ kind: 'STALE_FENCE', code: 130491 }));
  before.check('sbxb', 1);
  // The node restarts and still holds both sandboxes.
  const after = new FenceBook(dir, ['sbxa', 'sbxb']);
  expect(() => after.check('sbxa', 8)).toThrow(expect.objectContaining({ kind: 'STALE_FENCE' }));
  after.check('sbxa', 9);
  after.check('sbxa', 10);
  expect(() => new FenceBook(dir, ['sbxa']).check('sbxa', 9)).toThrow(expect.objectContaining({ kind: 'STALE_FENCE' }));
});

it('forgets the fence with its sandbox, and fences of sandboxes gone while the node was down', () => {
  const dir = dataDir();
  const book = new FenceBook(dir, []);
  book.check('gone', 5);
  book.check('away', 5);
  book.forget('gone');
  expect(existsSync(join(dir, 'fences', 'gone'))).toBe(false);
  book.check('gone', 1);
  book.forget('gone');
  // 'away' was removed while the node was down: its fence file goes at the next start.
  new FenceBook(dir, []);
  expect(existsSync(join(dir, 'fences', 'away'))).toBe(false);
});

it('answers ids that are not sandbox ids as unknown, and fences that are not whole numbers as bad requests', () => {
  const book = new FenceBook(dataDir(), []);
  expect(() => book.check('../escape', 1)).toThrow(expect.objectContaining({ kind: 'NOT_FOUND' }));
  expect(() => book.check('sbxa', Number('x'))).toThrow(expect.objectContaining({ kind: 'BAD_REQUEST' }));
  expect(() => book.check('sbxa', -1)).toThrow(expect.objectContaining({ kind: 'BAD_REQUEST' }));
});
