// envd's file metadata in the ns runtime: user.e2b.* extended attributes, read and replaced by
// `cube-launch exec -X` inside the sandbox as the user (native/launch/files.c, file_metadata).
import { CubeError, type ErrorKind } from '../../errors.js';
import type { FileMetadata } from '../types.js';
import type { HelperExecJob } from './helper.js';

/** `get`'s output (INDEX, KEY, VALUE, each NUL-ended) as one map per path. Pure. */
export function parseMetadata(out: Buffer, paths: number): FileMetadata[] {
  const maps: FileMetadata[] = Array.from({ length: paths }, () => ({}));
  const parts = out.toString('utf8').split('\0');
  for (let i = 0; i + 2 < parts.length; i += 3) {
    const m = maps[Number(parts[i])];
    if (m) m[parts[i + 1]!] = parts[i + 2]!;
  }
  return maps;
}

/**
 * The helper's refusals (strerror texts) that come from the caller's input or the sandbox's state,
 * not the host's fault: a path the sandbox changed meanwhile, a user's permissions, a full disk.
 */
const HELPER_REFUSALS: [RegExp, ErrorKind][] = [
  [/No such file/, 'NOT_FOUND'],
  [/Device or resource busy|Directory not empty/, 'CONFLICT'],
  [
    /Permission denied|Operation not permitted|No space|Disk quota|too large|Argument list|Not a directory|Is a directory|File name too long|Too many levels of symbolic links|Read-only file system/,
    'BAD_REQUEST',
  ],
];

/** Runs a metadata job to its end: its stdout, or the helper's message as a CubeError. */
export async function metadataJob(job: HelperExecJob, what: string): Promise<Buffer> {
  const out: Buffer[] = [];
  let err = '';
  job.stdout.on('data', (c: Buffer) => out.push(c));
  job.stderr.on('data', (c: Buffer) => void (err.length < 4096 && (err += c.toString())));
  const [end] = await Promise.all([job.exited, job.closed]);
  if (end.exitCode === 0) return Buffer.concat(out);
  const msg = err.trim().replace(/^cube-launch: /, '') || `exit ${end.exitCode}`;
  throw new CubeError(HELPER_REFUSALS.find(([re]) => re.test(msg))?.[1] ?? 'INTERNAL', `${what}: ${msg}`);
}
