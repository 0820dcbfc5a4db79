// The digest a template build names a captured layer by: contents, modes, owners, links,
// whiteouts and opaque marks count; times do not.
import { chmod, mkdir, mkdtemp, rm, symlink, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EMPTY_TREE, treeDigest } from '../../src/templates/layers/tree.js';
import { runLayerTool } from '../../src/templates/layers/unpack.js';
import { nativeBinary } from '../../src/runtime/ns/helper.js';

let scratch: string;
let n = 0;

/** A small layer tree in a fresh directory, then `change` applied to it. */
async function tree(change?: (root: string) => Promise<unknown>): Promise<string> {
  const root = join(scratch, `t${n++}`);
  await mkdir(join(root, 'opt', 'app'), { recursive: true });
  await writeFile(join(root, 'opt', 'app', 'main.py'), 'print(1)\n');
  await symlink('main.py', join(root, 'opt', 'app', 'link'));
  await change?.(root);
  return root;
}

beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), 'cubed-test-tree-'));
});
afterAll(() => rm(scratch, { recursive: true, force: true }));

describe('treeDigest', () => {
  it('is the same for the same files, whatever their times', async () => {
    const a = await treeDigest(await tree());
    expect(a).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(await treeDigest(await tree((r) => utimes(join(r, 'opt', 'app', 'main.py'), 1, 1)))).toBe(a);
  });

  it.each<[string, (root: string) => Promise<unknown>]>([
    ['contents', (r) => writeFile(join(r, 'opt', 'app', 'main.py'), 'print(2)\n')],
    ['a mode', (r) => chmod(join(r, 'opt', 'app', 'main.py'), 0o755)],
    [
      'a link target',
      async (r) => {
        await rm(join(r, 'opt', 'app', 'link'));
        await symlink('other', join(r, 'opt', 'app', 'link'));
      },
    ],
    ['a new empty file', (r) => writeFile(join(r, 'opt', 'empty'), '')],
    ['a whiteout', (r) => runLayerTool(nativeBinary('cube-layer'), r, ['wopt/gone'])],
    ['an opaque mark', (r) => runLayerTool(nativeBinary('cube-layer'), r, ['oopt/app'])],
  ])('changes with %s', async (_what, change) => {
    expect(await treeDigest(await tree(change))).not.toBe(await treeDigest(await tree()));
  });

  it('of an empty directory is EMPTY_TREE', async () => {
    await mkdir(join(scratch, 'empty'));
    expect(await treeDigest(join(scratch, 'empty'))).toBe(EMPTY_TREE);
  });
});
