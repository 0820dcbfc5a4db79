// A layer travels between nodes as the tar packLayer makes of its directory; unpacked on the other
// node it must be the same tree (the fetching node checks the tree digest), overlay whiteouts,
// opaque marks, hard links, owners and setuid bits included.
import { chmod, chown, link, lstat, mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { packLayer } from '../../src/templates/layers/pack.js';
import { treeDigest } from '../../src/templates/layers/tree.js';
import { UnpackBudget, runLayerTool, unpackLayer } from '../../src/templates/layers/unpack.js';
import { nativeBinary } from '../../src/runtime/ns/helper.js';

let scratch: string;

beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), 'cubed-test-pack-'));
});
afterAll(() => rm(scratch, { recursive: true, force: true }));

describe('packLayer', () => {
  it('unpacks on the other side into the same tree (whiteouts, opaque dirs, hard links, owners, setuid)', async () => {
    const src = join(scratch, 'src');
    await mkdir(join(src, 'usr', 'bin'), { recursive: true });
    await mkdir(join(src, 'home', 'user'), { recursive: true });
    await writeFile(join(src, 'usr', 'bin', 'tool'), '#!/bin/sh\necho hi\n', { mode: 0o755 });
    await chmod(join(src, 'usr', 'bin', 'tool'), 0o4755);
    await link(join(src, 'usr', 'bin', 'tool'), join(src, 'usr', 'bin', 'tool2'));
    await symlink('tool', join(src, 'usr', 'bin', 'alias'));
    await writeFile(join(src, 'home', 'user', 'notes'), 'x'.repeat(100_000));
    await chown(join(src, 'home', 'user'), 1000, 1000);
    await chown(join(src, 'home', 'user', 'notes'), 1000, 1000);
    await mkdir(join(src, 'etc'));
    await runLayerTool(nativeBinary('cube-layer'), src, ['wetc/removed', 'ohome']);
    const dst = join(scratch, 'dst');
    await mkdir(dst);
    await unpackLayer(packLayer(src), dst, new UnpackBudget(Infinity));
    expect(await treeDigest(dst)).toBe(await treeDigest(src));
    const [a, b] = await Promise.all([lstat(join(dst, 'usr', 'bin', 'tool')), lstat(join(dst, 'usr', 'bin', 'tool2'))]);
    expect(a.ino).toBe(b.ino); // still one file
  });

  it('differs after a byte of the source changed', async () => {
    const src = join(scratch, 'src2');
    await mkdir(src);
    await writeFile(join(src, 'f'), 'abc');
    const before = await treeDigest(src);
    await writeFile(join(src, 'f'), 'abd');
    const dst = join(scratch, 'dst2');
    await mkdir(dst);
    await unpackLayer(packLayer(src), dst, new UnpackBudget(Infinity));
    expect(await treeDigest(dst)).not.toBe(before);
  });
});
