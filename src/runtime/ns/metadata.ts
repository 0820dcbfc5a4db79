// envd's file metadata in the ns runtime: user.e2b.* extended attributes, read and replaced by
// `cube-launch exec -X` inside the sandbox as the user (native/cube-launch.c, file_metadata).
import { CubeError } from '../../errors.js';
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

/** Runs a metadata job to its end: its stdout, or the helper's message as a CubeError. */
export async function metadataJob(job: HelperExecJob, what: string): Promise<Buffer> {
  const out: Buffer[] = [];
  let err = '';
  job.stdout.on('data', (c: Buffer) => out.push(c));
  job.stderr.on('data', (c: Buffer) => void (err.length < 4096 && (err += c.toString())));
  const [end] = await Promise.all([job.exited, job.closed]);
  if (end.exitCode === 0) return Buffer.concat(out);
  const msg = err.trim().replace(/^cube-launch: /, '') || `exit ${end.exitCode}`;
  if (/Permission denied|Operation not permitted/.test(msg)) throw new CubeError('BAD_REQUEST', `${what}: ${msg}`);
  if (/No such file/.test(msg)) throw new CubeError('NOT_FOUND', `${what}: ${msg}`);
  if (/No space|too large|Argument list/.test(msg)) throw new CubeError('BAD_REQUEST', `${what}: ${msg}`);
  throw new CubeError('INTERNAL', `${what}: ${msg}`);
}
