// FenceBook: the highest lock fence a node accepted per sandbox survives the node's restart
// (a new FenceBook over the same data dir), and goes with the sandbox.
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, expect, it } from 'vitest';
import { FenceBook, parseFenceLog } from '../../src/cubelet/fences.js';

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
  book.check('gone', 1);
  book.forget('gone');
  // Had 'gone' come back under its id, a restart would not hold its old fence against it.
  new FenceBook(dir, ['gone']).check('gone', 1);
  // 'away' was removed while the node was down: its fence goes at the next start.
  new FenceBook(dir, []);
  new FenceBook(dir, ['away']).check('away', 1);
  expect(readFileSync(join(dir, 'fences.log'), 'utf8')).toBe('away 1\n');
});

it('reads the last line of an id, and never a line torn by a kill in the middle of an append', () => {
  expect([...parseFenceLog('a 7\nb 2\na 9\nb -\nc 4\n')]).toEqual([
    ['a', 9],
    ['c', 4],
  ]);
  // "a 1" of "a 12\n" would be a lower fence: a line without its newline is not read.
  expect([...parseFenceLog('a 9\nb 3\na 1')]).toEqual([
    ['a', 9],
    ['b', 3],
  ]);
  expect([...parseFenceLog('../x 5\nA 5\nd 1e9\nd -1\n\ne  4\n')]).toEqual([]);
  const dir = dataDir();
  writeFileSync(join(dir, 'fences.log'), 'sbxa 9\nsbxa 1');
  expect(() => new FenceBook(dir, ['sbxa']).check('sbxa', 8)).toThrow(expect.objectContaining({ kind: 'STALE_FENCE' }));
});

it('takes the fences of a data dir of before the log (a file per sandbox) and removes their folder', () => {
  const dir = dataDir();
  mkdirSync(join(dir, 'fences'));
  writeFileSync(join(dir, 'fences', 'sbxa'), '12');
  writeFileSync(join(dir, 'fences', 'sbxb'), '3');
  const book = new FenceBook(dir, ['sbxa']);
  expect(() => book.check('sbxa', 11)).toThrow(expect.objectContaining({ kind: 'STALE_FENCE' }));
  book.check('sbxb', 0); // not live: dropped
  expect(existsSync(join(dir, 'fences'))).toBe(false);
  expect(() => new FenceBook(dir, ['sbxa']).check('sbxa', 11)).toThrow(expect.objectContaining({ kind: 'STALE_FENCE' }));
});

it('keeps the log short under churn: rewritten with the live fences, which a restart still holds', () => {
  const dir = dataDir();
  const book = new FenceBook(dir, []);
  book.check('keep', 41);
  for (let i = 0; i < 3000; i++) {
    book.check(`s${i}`, 1);
    book.check(`s${i}`, 2);
    book.forget(`s${i}`);
  }
  const lines = readFileSync(join(dir, 'fences.log'), 'utf8').split('\n').length - 1;
  expect(lines).toBeLessThanOrEqual(1025);
  expect(() => new FenceBook(dir, ['keep', 's2999']).check('keep', 40)).toThrow(expect.objectContaining({ kind: 'STALE_FENCE' }));
  new FenceBook(dir, ['keep', 's2999']).check('s2999', 0);
});

it('answers ids that are not sandbox ids as unknown, and fences that are not whole numbers as bad requests', () => {
  const book = new FenceBook(dataDir(), []);
  expect(() => book.check('../escape', 1)).toThrow(expect.objectContaining({ kind: 'NOT_FOUND' }));
  expect(() => book.check('sbxa', Number('x'))).toThrow(expect.objectContaining({ kind: 'BAD_REQUEST' }));
  expect(() => book.check('sbxa', -1)).toThrow(expect.objectContaining({ kind: 'BAD_REQUEST' }));
});
