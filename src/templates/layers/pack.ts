// A layer directory of the store as a tar, the form in which layers travel between nodes (node RPC
// `layer`, relayed by the control plane). The overlay forms go back to their OCI ones, which
// unpackLayer turns into the same overlay forms on the fetching node: a 0/0 character device
// (whiteout) becomes `.wh.NAME`, an opaque directory gets a `.wh..wh..opq` entry. Hard links stay
// links. Entries in name order, so a layer packs the same way every time.
import { createReadStream } from 'node:fs';
import { lstat, readdir, readlink } from 'node:fs/promises';
import { join, posix } from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { pack, type Headers, type Pack } from 'tar-stream';
import { nativeBinary } from '../../runtime/ns/helper.js';
import { runLayerTool } from './unpack.js';

interface Item {
  path: string;
  kind: 'd' | 'f' | 'l' | 'w';
  mode: number;
  uid: number;
  gid: number;
  mtime: Date;
  size: number;
  ino: number;
  nlink: number;
}

/** The tar of layer directory `root`; a failure while reading destroys the stream with the error. */
export function packLayer(root: string, layerTool = nativeBinary('cube-layer')): Readable {
  const p = pack();
  write(p, root, layerTool).then(
    () => p.finalize(),
    (e: unknown) => p.destroy(e as Error),
  );
  return p;
}

async function write(p: Pack, root: string, layerTool: string): Promise<void> {
  const items: Item[] = [];
  const walk = async (rel: string): Promise<void> => {
    for (const name of (await readdir(join(root, rel))).sort()) {
      const path = rel ? `${rel}/${name}` : name;
      const st = await lstat(join(root, path));
      const kind = st.isDirectory() ? 'd' : st.isFile() ? 'f' : st.isSymbolicLink() ? 'l' : st.isCharacterDevice() && st.rdev === 0 ? 'w' : undefined;
      if (kind === undefined) continue; // sockets, fifos, devices: unpackLayer would skip them anyway
      items.push({ path, kind, mode: st.mode & 0o7777, uid: st.uid, gid: st.gid, mtime: st.mtime, size: st.size, ino: st.ino, nlink: st.nlink });
      if (kind === 'd') await walk(path);
    }
  };
  await walk('');
  const dirs = items.filter((i) => i.kind === 'd');
  const answers = dirs.length
    ? await runLayerTool(
        layerTool,
        root,
        dirs.map((d) => `q${d.path}`),
      )
    : '';
  const opaque = new Set(dirs.filter((_, n) => answers[n] === 'y').map((d) => d.path));
  const firstOf = new Map<number, string>();
  const entry = (h: Headers, body?: string) => new Promise<void>((ok, fail) => p.entry(h, body ?? '', (e) => (e ? fail(e) : ok())));
  for (const i of items) {
    const base: Headers = { name: i.path, mode: i.mode, uid: i.uid, gid: i.gid, mtime: i.mtime };
    if (i.kind === 'd') {
      await entry({ ...base, name: `${i.path}/`, type: 'directory' });
      if (opaque.has(i.path)) await entry({ ...base, name: `${i.path}/.wh..wh..opq`, type: 'file', mode: 0o644 });
    } else if (i.kind === 'w') {
      const dir = posix.dirname(i.path);
      await entry({ ...base, name: `${dir === '.' ? '' : `${dir}/`}.wh.${posix.basename(i.path)}`, type: 'file', mode: 0o644 });
    } else if (i.kind === 'l') {
      await entry({ ...base, type: 'symlink', linkname: await readlink(join(root, i.path)) });
    } else if (i.nlink > 1 && firstOf.has(i.ino)) {
      await entry({ ...base, type: 'link', linkname: firstOf.get(i.ino)! });
    } else {
      if (i.nlink > 1) firstOf.set(i.ino, i.path);
      const done = new Promise<void>((ok, fail) => {
        const w = p.entry({ ...base, type: 'file', size: i.size }, (e) => (e ? fail(e) : ok()));
        pipeline(createReadStream(join(root, i.path)), w).catch(fail);
      });
      await done;
    }
  }
}
