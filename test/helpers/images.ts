// Image archives made in the test (no registry, no docker engine here): layer tars written with
// tar-stream, then wrapped as a docker-archive (`docker save`), an OCI layout directory or an
// oci-archive. The base layer holds the host's static busybox (Debian's busybox-static, which
// install.sh installs) as /bin/sh and friends, and a /bin/bash wrapper for the E2B SDK's `bash -l -c`.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { pack, type Headers } from 'tar-stream';

export interface TarEntry {
  name: string;
  type?: Headers['type'];
  content?: string | Buffer;
  mode?: number;
  linkname?: string;
  uid?: number;
  gid?: number;
}

export async function tarOf(entries: TarEntry[]): Promise<Buffer> {
  const p = pack();
  const done = (async () => {
    const chunks: Buffer[] = [];
    for await (const c of p) chunks.push(c as Buffer);
    return Buffer.concat(chunks);
  })();
  for (const e of entries) {
    const type = e.type ?? 'file';
    const header: Headers = {
      name: e.name,
      type,
      mode: e.mode ?? (type === 'directory' ? 0o755 : 0o644),
      uid: e.uid ?? 0,
      gid: e.gid ?? 0,
      mtime: new Date(1_700_000_000_000),
    };
    if (e.linkname !== undefined) header.linkname = e.linkname;
    if (type === 'file') p.entry(header, e.content ?? '');
    else p.entry(header);
  }
  p.finalize();
  return done;
}

const APPLETS = [
  'sh',
  'ls',
  'cat',
  'env',
  'echo',
  'test',
  'sleep',
  'id',
  'pwd',
  'mkdir',
  'true',
  'false',
  'printf',
  'head',
  'tail',
  'stat',
  'touch',
  'rm',
  'grep',
  'wc',
  'ps',
  'kill',
  'nc',
  'readlink',
];

/** A root filesystem layer: busybox, its applets as symlinks, /bin/bash as a wrapper, an /etc/passwd. */
export function busyboxLayer(): TarEntry[] {
  return [
    { name: 'bin/', type: 'directory' },
    { name: 'bin/busybox', content: readFileSync('/bin/busybox'), mode: 0o755 },
    ...APPLETS.map((a) => ({ name: `bin/${a}`, type: 'symlink' as const, linkname: 'busybox' })),
    { name: 'bin/bash', content: '#!/bin/sh\nexec /bin/sh "$@"\n', mode: 0o755 },
    { name: 'usr/', type: 'directory' },
    { name: 'usr/bin/', type: 'directory' },
    { name: 'usr/bin/env', type: 'symlink', linkname: '/bin/busybox' },
    { name: 'etc/', type: 'directory' },
    { name: 'etc/passwd', content: 'root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\n' },
    { name: 'etc/group', content: 'root:x:0:\nuser:x:1000:\n' },
  ];
}

export interface ImageConfigInput {
  Env?: string[];
  WorkingDir?: string;
  User?: string;
  Cmd?: string[];
  Entrypoint?: string[];
}

const sha = (b: Buffer | string) => `sha256:${createHash('sha256').update(b).digest('hex')}`;

function configJson(layers: Buffer[], c: ImageConfigInput, diffIDs?: string[]): Buffer {
  return Buffer.from(
    JSON.stringify({ architecture: 'amd64', os: 'linux', config: c, rootfs: { type: 'layers', diff_ids: diffIDs ?? layers.map((l) => sha(l)) } }),
  );
}

export interface ArchiveOptions {
  /** Replaces the diff_ids the config lists (to fake a digest mismatch). */
  diffIDs?: string[];
  gzip?: boolean;
  repoTag?: string;
}

/** `docker save` layout: manifest.json, <config>.json, <n>/layer.tar. */
export async function dockerArchive(layers: Buffer[], c: ImageConfigInput, o: ArchiveOptions = {}): Promise<Buffer> {
  const config = configJson(layers, c, o.diffIDs);
  const configName = `${sha(config).slice(7)}.json`;
  const entries: TarEntry[] = [
    { name: configName, content: config },
    ...layers.flatMap((l, i) => [
      { name: `${i}/`, type: 'directory' as const },
      { name: `${i}/layer.tar`, content: o.gzip ? gzipSync(l) : l },
    ]),
  ];
  entries.push({
    name: 'manifest.json',
    content: JSON.stringify([{ Config: configName, RepoTags: [o.repoTag ?? 'test/image:latest'], Layers: layers.map((_, i) => `${i}/layer.tar`) }]),
  });
  return tarOf(entries);
}

/** An OCI image layout as entries (blobs/sha256/..., index.json, oci-layout). */
function ociEntries(layers: Buffer[], c: ImageConfigInput, o: ArchiveOptions = {}): TarEntry[] {
  const config = configJson(layers, c, o.diffIDs);
  const blobs = layers.map((l) => (o.gzip ? gzipSync(l) : l));
  const mediaType = o.gzip ? 'application/vnd.oci.image.layer.v1.tar+gzip' : 'application/vnd.oci.image.layer.v1.tar';
  const manifest = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: 'application/vnd.oci.image.manifest.v1+json',
      config: { mediaType: 'application/vnd.oci.image.config.v1+json', digest: sha(config), size: config.length },
      layers: blobs.map((b) => ({ mediaType, digest: sha(b), size: b.length })),
    }),
  );
  const index = {
    schemaVersion: 2,
    manifests: [
      {
        mediaType: 'application/vnd.oci.image.manifest.v1+json',
        digest: sha(manifest),
        size: manifest.length,
        annotations: { 'org.opencontainers.image.ref.name': o.repoTag ?? 'latest' },
      },
    ],
  };
  return [
    { name: 'oci-layout', content: '{"imageLayoutVersion":"1.0.0"}' },
    { name: 'index.json', content: JSON.stringify(index) },
    { name: 'blobs/', type: 'directory' },
    { name: 'blobs/sha256/', type: 'directory' },
    ...[config, manifest, ...blobs].map((b) => ({ name: `blobs/sha256/${sha(b).slice(7)}`, content: b })),
  ];
}

export async function ociArchive(layers: Buffer[], c: ImageConfigInput, o: ArchiveOptions = {}): Promise<Buffer> {
  return tarOf(ociEntries(layers, c, o));
}

/** Writes an OCI image layout directory at `dir`. */
export async function ociLayoutDir(dir: string, layers: Buffer[], c: ImageConfigInput, o: ArchiveOptions = {}): Promise<void> {
  for (const e of ociEntries(layers, c, o)) {
    if (e.type === 'directory') await mkdir(join(dir, e.name), { recursive: true });
    else {
      await mkdir(join(dir, e.name, '..'), { recursive: true });
      await writeFile(join(dir, e.name), e.content ?? '');
    }
  }
}

/** A GNU long-name ('L') tar header claiming a body of `size` bytes (the body is the caller's). */
export function longNameHeader(size: number): Buffer {
  const header = Buffer.alloc(512);
  header.write('././@LongLink', 0, 'latin1');
  header.write('0000644\0', 100, 'latin1');
  header.write(`${size.toString(8).padStart(11, '0')}\0`, 124, 'latin1');
  header.write('L', 156, 'latin1');
  header.write('ustar  \0', 257, 'latin1');
  header.fill(' ', 148, 156);
  let sum = 0;
  for (const b of header) sum += b;
  header.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148, 'latin1');
  return header;
}
