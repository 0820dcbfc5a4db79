// Volumes over the node RPC: a control replica's volume calls to the compute node that holds the
// volume. POST <RPC_PREFIX>volume<Op> with {args}, answered {result}; a file's content raw both
// ways (volumeRead, volumeWrite: the body streams to the node, which stops it at the quota).
// Plain routes beside the node API's schema (remote.ts request, rpc-server.ts streams: one line
// each), as layers and imports are; the calls that are not byte streams belong in the schema.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import { CubeError } from '../errors.js';
import { readJson, sendJson } from '../http.js';
import type { FileStat, VolumeHost, VolumeWriteOptions } from '../runtime/types.js';

const MAX_JSON = 1 << 20;

/** Whether a node RPC method is one of these. */
export const isVolumeMethod = (method: string): boolean => method.startsWith('volume');

/** A FileStat's times as sent (strings) back into Dates (pure). */
function revive(s: FileStat): FileStat {
  const t = s as unknown as Record<'mtime' | 'atime' | 'ctime', string | undefined>;
  return {
    ...s,
    mtime: new Date(t.mtime!),
    ...(t.atime !== undefined ? { atime: new Date(t.atime) } : {}),
    ...(t.ctime !== undefined ? { ctime: new Date(t.ctime) } : {}),
  };
}

/** What remote.ts lends: one node RPC request (errors already mapped to CubeErrors). */
export type NodeRequest = (
  method: string,
  init: { body?: Buffer | string | WebReadableStream; query?: Record<string, string | undefined>; contentType?: string; timeout?: boolean },
) => Promise<Response>;

/** The volumes of a node reached over the node RPC. */
export function remoteVolumes(request: NodeRequest, nodeID: string): VolumeHost {
  const call = async <T>(op: string, ...args: unknown[]): Promise<T> => {
    const res = await request(`volume${op}`, { body: JSON.stringify({ args }), contentType: 'application/json', timeout: true });
    return ((await res.json()) as { result: T }).result;
  };
  return {
    create: (id, size) => call('Create', id, size),
    remove: (id) => call('Remove', id),
    ids: () => call('Ids'),
    usedBytes: async (id) => (await call<number | null>('UsedBytes', id)) ?? undefined,
    dir: () => {
      throw new CubeError('INTERNAL', `a volume's directory is on node ${nodeID}, not here`);
    },
    statPath: async (id, path) => revive(await call('Stat', id, path)),
    listDir: async (id, path, depth) => (await call<FileStat[]>('List', id, path, depth)).map(revive),
    makeDir: async (id, path, opts) => revive(await call('MakeDir', id, path, opts)),
    removePath: (id, path) => call('RemovePath', id, path),
    setMetadata: async (id, path, meta) => revive(await call('SetMetadata', id, path, meta)),
    readFile: async (id, path) => {
      const res = await request('volumeRead', { query: { volumeID: id, path }, timeout: false });
      return Readable.fromWeb(res.body as WebReadableStream<Uint8Array>);
    },
    writeFile: async (id, path, data, opts) => {
      const body = Buffer.isBuffer(data) ? data : (Readable.toWeb(data) as WebReadableStream);
      const res = await request('volumeWrite', {
        query: { volumeID: id, path, opts: JSON.stringify(opts) },
        body,
        contentType: 'application/octet-stream',
        timeout: false,
      });
      return revive(((await res.json()) as { result: FileStat }).result);
    },
  };
}

/** Serves one volume call of the node RPC from the node's volumes (422 when its runtime has none). */
export async function serveVolumeCall(
  host: VolumeHost | undefined,
  method: string,
  req: IncomingMessage,
  res: ServerResponse,
  q: URLSearchParams,
): Promise<void> {
  if (!host) throw new CubeError('VOLUME_RUNTIME', 'this node holds no volumes: its runtime has none (volumes need the ns runtime)');
  const param = (k: string): string => {
    const v = q.get(k);
    if (v === null) throw new CubeError('BAD_REQUEST', `${method}: ${k} is missing`);
    return v;
  };
  if (method === 'volumeRead') {
    const body = await host.readFile(param('volumeID'), param('path'));
    res.writeHead(200, { 'content-type': 'application/octet-stream' });
    await pipeline(body, res);
    return;
  }
  if (method === 'volumeWrite')
    return sendJson(res, 200, { result: await host.writeFile(param('volumeID'), param('path'), req, JSON.parse(q.get('opts') ?? '{}') as VolumeWriteOptions) });
  const { args = [] } = await readJson<{ args?: unknown[] }>(req, MAX_JSON);
  const [a, b, c] = args as [string, never, never];
  const ops: Record<string, () => Promise<unknown>> = {
    volumeCreate: () => host.create(a, b),
    volumeRemove: () => host.remove(a),
    volumeIds: () => host.ids(),
    volumeUsedBytes: () => host.usedBytes(a),
    volumeStat: () => host.statPath(a, b),
    volumeList: () => host.listDir(a, b, c),
    volumeMakeDir: () => host.makeDir(a, b, c),
    volumeRemovePath: () => host.removePath(a, b),
    volumeSetMetadata: () => host.setMetadata(a, b, c),
  };
  const op = ops[method];
  if (!op) throw new CubeError('NOT_FOUND', `no node method ${method}`);
  sendJson(res, 200, { result: (await op()) ?? null });
}
