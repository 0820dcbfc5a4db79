// The tree digest of a layer directory: what a node checks a layer it fetched against (a layer
// travels between nodes as a tar made from its directory, which never reproduces the bytes of the
// image's own tar, so the diff_id cannot be checked again). Build layers are named by their tree
// digest; imported ones by their diff_id, with the tree digest computed once the diff_id checked
// out and kept next to the layer (`<hex>.tree`), so a layer damaged later in the store no longer
// matches what its template's record says.
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { lstat, readFile, readdir, readlink, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { CubeError } from '../../errors.js';
import { nativeBinary } from '../../runtime/ns/helper.js';
import { layerDir } from '../store.js';
import { runLayerTool } from './unpack.js';

/** treeDigest of an empty directory: a step that changed no file (each layer is an overlay lowerdir, 59 at most). */
export const EMPTY_TREE = `sha256:${createHash('sha256').update('').digest('hex')}`;

/**
 * sha256 of a directory tree: per entry, in name order, its path, type, mode, owner, size, link
 * target or device number (whiteouts are 0/0 devices), whether a directory is opaque (the
 * trusted.overlay.opaque mark, read by build/cube-layer: Node has no getxattr), and the sha256 of
 * its contents. Times are left out: a step run twice that makes the same files makes the same layer.
 */
export async function treeDigest(root: string, layerTool = nativeBinary('cube-layer')): Promise<string> {
  const lines: string[] = [];
  const dirs: number[] = [];
  const walk = async (rel: string): Promise<void> => {
    const names = (await readdir(join(root, rel))).sort();
    for (const name of names) {
      const p = rel ? `${rel}/${name}` : name;
      const full = join(root, p);
      const st = await lstat(full);
      const kind = st.isDirectory() ? 'd' : st.isFile() ? 'f' : st.isSymbolicLink() ? 'l' : st.isCharacterDevice() ? 'c' : 'o';
      let extra = '';
      if (kind === 'l') extra = await readlink(full);
      else if (kind === 'c') extra = String(st.rdev);
      else if (kind === 'f') {
        const fh = createHash('sha256');
        for await (const chunk of createReadStream(full)) fh.update(chunk as Buffer);
        extra = fh.digest('hex');
      }
      if (kind === 'd') dirs.push(lines.length);
      lines.push(`${p}\0${kind}\0${(st.mode & 0o7777).toString(8)}\0${st.uid}:${st.gid}\0${kind === 'f' ? st.size : 0}\0${extra}`);
      if (kind === 'd') await walk(p);
    }
  };
  await walk('');
  const opaque = dirs.length
    ? await runLayerTool(
        layerTool,
        root,
        dirs.map((i) => `q${lines[i]!.split('\0', 1)[0]}`),
      )
    : '';
  if (opaque.length !== dirs.length) throw new CubeError('INTERNAL', `cube-layer answered ${opaque.length} of ${dirs.length} opaque queries`);
  dirs.forEach((i, n) => (lines[i] += `\0${opaque[n] === 'y' ? 'opaque' : ''}`));
  return `sha256:${createHash('sha256').update(lines.join('\n')).digest('hex')}`;
}

/** `<layersRoot>/sha256/<hex>.tree`: the layer's tree digest. */
export function treeFile(dataDir: string, digest: string): string {
  return `${layerDir(dataDir, digest)}.tree`;
}

/** Records the tree digest of a layer entering the store (written aside, then renamed). */
export async function writeTree(dataDir: string, digest: string, tree: string): Promise<void> {
  const f = treeFile(dataDir, digest);
  await writeFile(`${f}.${process.pid}.tmp`, `${tree}\n`);
  await rename(`${f}.${process.pid}.tmp`, f);
}

/**
 * The tree digest of a layer in the store: its `.tree` file, else (a layer stored before those
 * existed) computed from the directory once and recorded.
 */
export async function layerTree(dataDir: string, digest: string): Promise<string> {
  const kept = (await readFile(treeFile(dataDir, digest), 'utf8').catch(() => '')).trim();
  if (/^sha256:[0-9a-f]{64}$/.test(kept)) return kept;
  const tree = await treeDigest(layerDir(dataDir, digest));
  await writeTree(dataDir, digest, tree);
  return tree;
}

/**
 * The bytes a layer directory takes once unpacked: file sizes (apparent: an unpack writes every
 * byte, holes included) plus a block per entry for its inode and directory entry. What a node
 * fetching the layer checks its free space against before it starts.
 */
export async function layerBytes(root: string): Promise<number> {
  let total = 0;
  const walk = async (dir: string): Promise<void> => {
    for (const e of await readdir(dir, { withFileTypes: true })) {
      const full = join(dir, e.name);
      total += 4096;
      if (e.isDirectory()) await walk(full);
      else if (e.isFile()) total += (await lstat(full)).size;
    }
  };
  await walk(root);
  return total;
}
