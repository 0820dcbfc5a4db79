// fsx's synchronous lstat for walks over many entries (the files API's listing): "not there" is
// an answer, any other failure is thrown, as for the promise forms.
import { mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { lstatOrAbsent, lstatSyncOrAbsent } from '../../src/fsx.js';

const dir = mkdtempSync(join(tmpdir(), 'cubed-test-fsx-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('lstatSyncOrAbsent', () => {
  writeFileSync(join(dir, 'file'), 'x');
  symlinkSync('nowhere', join(dir, 'link'));
  const cases: [string, string, 'file' | 'link' | 'absent' | 'throws'][] = [
    ['a file', 'file', 'file'],
    ['a dangling symlink, not followed', 'link', 'link'],
    ['a missing name (ENOENT)', 'missing', 'absent'],
    ['a path through a file (ENOTDIR)', 'file/below', 'absent'],
    ['a name past NAME_MAX (ENAMETOOLONG)', 'n'.repeat(300), 'throws'],
  ];
  it.each(cases)('%s', async (_what, name, want) => {
    const path = join(dir, name);
    if (want === 'throws') {
      expect(() => lstatSyncOrAbsent(path)).toThrow(/ENAMETOOLONG/);
      await expect(lstatOrAbsent(path)).rejects.toThrow(/ENAMETOOLONG/);
      return;
    }
    const st = lstatSyncOrAbsent(path);
    expect(st === undefined ? 'absent' : st.isSymbolicLink() ? 'link' : st.isFile() ? 'file' : 'other').toBe(want);
    // The same answer as the promise form it stands in for.
    expect((await lstatOrAbsent(path))?.ino).toBe(st?.ino);
  });
});
