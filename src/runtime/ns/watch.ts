// Directory watches of the ns runtime: `cube-launch exec -W` runs inotify inside the sandbox
// (its namespaces, root, cgroup and seccomp filter, as the user) and prints one record per change
// (native/launch/watch.c, watch_dir). Here the records become FsChanges.
import type { Readable } from 'node:stream';
import { CubeError } from '../../errors.js';
import { stoppable } from '../stoppable.js';
import type { FsChange } from '../types.js';
import type { HelperExecJob } from './helper.js';

export type WatchRecord = FsChange | { type: 'ready' | 'overflow'; name: string };

const TYPES: Record<string, WatchRecord['type']> = { S: 'ready', C: 'create', W: 'write', R: 'remove', N: 'rename', M: 'chmod', O: 'overflow' };

/** Whole records of `buf` (type byte, name, NUL) and the incomplete tail. Pure. */
export function parseRecords(buf: Buffer): { records: WatchRecord[]; rest: Buffer } {
  const records: WatchRecord[] = [];
  let off = 0;
  for (let end = buf.indexOf(0, off); end >= 0; end = buf.indexOf(0, off)) {
    const type = TYPES[String.fromCharCode(buf[off]!)];
    if (type) records.push({ type, name: buf.toString('utf8', off + 1, end) });
    off = end + 1;
  }
  return { records, rest: buf.subarray(off) };
}

async function* recordsOf(out: Readable): AsyncGenerator<WatchRecord> {
  let rest: Buffer = Buffer.alloc(0);
  for await (const chunk of out) {
    const parsed = parseRecords(rest.length ? Buffer.concat([rest, chunk as Buffer]) : (chunk as Buffer));
    rest = parsed.rest;
    yield* parsed.records;
  }
}

/** Why a watch could not be set, from the helper's message. */
function refusal(path: string, stderr: string): CubeError {
  if (/No such file/.test(stderr)) return new CubeError('NOT_FOUND', `'${path}' not found`);
  if (/Not a directory/.test(stderr)) return new CubeError('BAD_REQUEST', `'${path}' is not a directory`);
  if (/Permission denied/.test(stderr)) return new CubeError('BAD_REQUEST', `'${path}' may not be read by this user`);
  return new CubeError('INTERNAL', `watch ${path}: ${stderr.trim() || 'the watcher ended before it was set'}`);
}

/** The changes a watcher job reports, once it is set; ending the iteration kills the job. */
export async function changesOf(job: HelperExecJob, path: string): Promise<AsyncIterable<FsChange>> {
  let stderr = '';
  job.stderr.on('data', (c: Buffer) => void (stderr.length < 4096 && (stderr += c.toString())));
  const it = recordsOf(job.stdout);
  const first = await it.next();
  if (first.done || first.value.type !== 'ready') {
    job.signal('SIGKILL');
    await job.closed;
    throw refusal(path, stderr);
  }
  async function* changes(): AsyncGenerator<FsChange> {
    // An overflow lost events the kernel could not queue; nothing names them.
    for (let r = await it.next(); !r.done; r = await it.next()) if (r.value.type !== 'ready' && r.value.type !== 'overflow') yield r.value as FsChange;
  }
  // Killing the watcher ends its output, which ends a pending next().
  return stoppable(changes(), () => {
    job.signal('SIGKILL');
    job.detach();
  });
}
