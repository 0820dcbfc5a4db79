// removeKnownDir (src/fsx.ts): a sandbox's directory goes by an unlink or rmdir per entry it is
// known to hold, and by the recursive rm when it holds anything else; gone already is fine.
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, expect, it } from 'vitest';
import { removeKnownDir } from '../../src/fsx.js';

const roots: string[] = [];
afterEach(() => {
  for (const d of roots.splice(0)) rmSync(d, { recursive: true, force: true });
});

function sandboxDir(extra: (dir: string) => void = () => undefined): string {
  const root = mkdtempSync(join(tmpdir(), 'cubed-test-rmdir-'));
  roots.push(root);
  const dir = join(root, 'sbx');
  mkdirSync(join(dir, 'merged'), { recursive: true });
  writeFileSync(join(dir, 'sandbox.json'), '{}');
  writeFileSync(join(dir, 'meta.json'), '{}');
  extra(dir);
  return dir;
}

it.each([
  ['the known layout', () => undefined],
  ['a file it does not know (a temp file of a write cut short)', (d: string) => writeFileSync(join(d, 'meta.json.tmp'), '{')],
  ['a known directory that is not empty', (d: string) => writeFileSync(join(d, 'merged', 'left'), 'x')],
  ['a known file missing', (d: string) => rmSync(join(d, 'meta.json'))],
])('removes a directory with %s', async (_, extra) => {
  const dir = sandboxDir(extra);
  await removeKnownDir(dir, ['sandbox.json', 'meta.json'], ['merged']);
  expect(existsSync(dir)).toBe(false);
});

it('is done when the directory is gone already, or its path crosses a file', async () => {
  const dir = sandboxDir();
  rmSync(dir, { recursive: true });
  await removeKnownDir(dir, ['sandbox.json'], ['merged']);
  const file = join(sandboxDir(), 'sandbox.json');
  await expect(removeKnownDir(join(file, 'x'), [], [])).resolves.toBeUndefined(); // ENOTDIR: absent
});
