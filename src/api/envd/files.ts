// envd's plain HTTP file routes: GET /files (download) and POST /files (multipart or
// octet-stream upload). Errors are JSON {code, message} with the HTTP status in `code`,
// which the SDK maps (404 → FileNotFoundError, 400 → InvalidArgumentError).
import type { IncomingMessage, ServerResponse } from 'node:http';
import path from 'node:path/posix';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGunzip } from 'node:zlib';
import { CubeError } from '../../errors.js';
import type { FileMetadata } from '../../runtime/types.js';
import { sendJson } from '../../http.js';
import { Code, ConnectError } from './connect.js';
import { homeOf, resolvePath, restFileType, userFromAuthorization } from './messages.js';
import type { SandboxCall } from './process.js';

/** The `username` query parameter wins over Authorization (the SDK sends one or the other). */
function userOf(req: IncomingMessage, query: URLSearchParams): string {
  const u = query.get('username');
  if (!u) return userFromAuthorization(req.headers.authorization);
  homeOf(u);
  return u;
}

/** messages.ts speaks Connect errors; on these plain HTTP routes they become their CubeError twin. */
function asCube(e: unknown): unknown {
  if (e instanceof ConnectError) return new CubeError(e.code === Code.Unauthenticated ? 'UNAUTHORIZED' : 'BAD_REQUEST', e.rawMessage);
  return e;
}

export async function handleFiles(req: IncomingMessage, res: ServerResponse, call: SandboxCall): Promise<void> {
  const query = new URL(req.url ?? '/', 'http://x').searchParams;
  try {
    const user = userOf(req, query);
    if (req.method === 'GET') await download(res, call, resolvePath(requiredPath(query), user), user);
    else if (req.method === 'POST') await upload(req, res, call, query, user);
    else throw new CubeError('BAD_REQUEST', `${req.method} /files is not supported: GET or POST`);
  } catch (e) {
    throw asCube(e); // answered (and a 5xx logged) by the envd entry point
  }
}

function requiredPath(query: URLSearchParams): string {
  const p = query.get('path');
  if (!p) throw new CubeError('BAD_REQUEST', 'query parameter "path" is required');
  return p;
}

/**
 * `inline` with the name twice (RFC 6266): `filename` in printable ASCII (others become `_`, for
 * old clients) and `filename*=UTF-8''…` percent-encoded (RFC 5987) with the real name. Node
 * refuses raw non-Latin-1 header bytes, so a CJK or emoji name must never reach the header raw.
 */
export function contentDisposition(name: string): string {
  const ascii = name.replace(/[^\x20-\x7e]|["\\]/gu, '_');
  const encoded = encodeURIComponent(name).replace(/['()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
  return `inline; filename="${ascii}"; filename*=UTF-8''${encoded}`;
}

async function download(res: ServerResponse, call: SandboxCall, p: string, user: string): Promise<void> {
  // One call (one permission check as the user): the first chunk tells an empty file, which the SDK
  // short-cuts on content-length 0; others go chunked, since the file may change as it is read.
  const body = await call.node.readFile(call.sandboxID, p, user);
  const chunks = body[Symbol.asyncIterator]();
  let first: IteratorResult<Buffer>;
  try {
    first = (await chunks.next()) as IteratorResult<Buffer>;
    res.writeHead(200, {
      'content-type': 'application/octet-stream',
      'content-disposition': contentDisposition(path.basename(p)),
      ...(first.done ? { 'content-length': '0' } : {}),
    });
  } catch (e) {
    body.destroy(); // the file handle behind it closes now, not never
    throw e;
  }
  if (first.done) return void res.end();
  await pipeline(async function* () {
    try {
      yield first.value;
      for (let r = await chunks.next(); !r.done; r = await chunks.next()) yield r.value as Buffer;
    } finally {
      body.destroy(); // a client gone mid-file: its handle closes now
    }
  }, res);
}

const METADATA_HEADER = 'x-metadata-';
/** The Linux xattr name limit (255) less the `user.e2b.` prefix. */
const MAX_METADATA_KEY = 246;
/** Keys (with the prefix) and values of one file: within a filesystem's per-inode xattr room. */
const MAX_METADATA_BYTES = 4096;
const PRINTABLE = /^[\x20-\x7e]*$/;

/**
 * envd's file metadata from `X-Metadata-<key>: <value>` headers: keys lowercased, the first of a
 * repeated header, printable ASCII, at most 246 bytes a key and 4096 in all. Pure.
 */
export function metadataOf(headers: Record<string, string[] | undefined>): FileMetadata {
  const meta: FileMetadata = {};
  let bytes = 0;
  for (const [name, values] of Object.entries(headers)) {
    const key = name.toLowerCase().slice(METADATA_HEADER.length);
    if (!name.toLowerCase().startsWith(METADATA_HEADER) || key === '' || !values?.length) continue;
    const value = values[0]!;
    if (!PRINTABLE.test(key) || !PRINTABLE.test(value))
      throw new CubeError('BAD_REQUEST', `metadata ${JSON.stringify(key)}: keys and values must be printable ASCII`);
    if (key.length > MAX_METADATA_KEY)
      throw new CubeError('BAD_REQUEST', `metadata key ${JSON.stringify(key.slice(0, 20))}...: longer than ${MAX_METADATA_KEY} bytes`);
    bytes += 'user.e2b.'.length + key.length + value.length;
    meta[key] = value;
  }
  if (bytes > MAX_METADATA_BYTES)
    throw new CubeError('BAD_REQUEST', `metadata of ${bytes} bytes (keys with their user.e2b. prefix, and values): at most ${MAX_METADATA_BYTES}`);
  return meta;
}

async function upload(req: IncomingMessage, res: ServerResponse, call: SandboxCall, query: URLSearchParams, user: string): Promise<void> {
  const type = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
  const metadata = metadataOf(req.headersDistinct);
  const written: { name: string; type: string; path: string; metadata?: FileMetadata }[] = [];
  const record = async (p: string, data: Readable | Buffer): Promise<void> => {
    const st = await call.node.writeFile(call.sandboxID, p, data, user);
    // As envd: each upload replaces the file's metadata, none clears it.
    await call.node.writeMetadata(call.sandboxID, st.path, metadata, user);
    written.push({ name: st.name, type: restFileType(st.type), path: st.path, ...(Object.keys(metadata).length ? { metadata } : {}) });
  };
  if (type === 'multipart/form-data') {
    const form = await new Response(Readable.toWeb(req) as ReadableStream, { headers: { 'content-type': req.headers['content-type']! } })
      .formData()
      .catch((e: Error) => {
        throw new CubeError('BAD_REQUEST', `malformed multipart body: ${e.message}`);
      });
    const parts = [...form.values()].flatMap((v) => (typeof v === 'string' ? [] : [v]));
    if (parts.length === 0) throw new CubeError('BAD_REQUEST', 'multipart body has no file part');
    const single = query.get('path');
    for (const part of parts) {
      // The part filename carries the full target path (the SDK keeps the slashes); ?path= wins for a single file.
      const target = parts.length === 1 && single ? single : part.name;
      if (!target) throw new CubeError('BAD_REQUEST', 'file part has no filename and no ?path= was given');
      await record(resolvePath(target, user), Buffer.from(await part.arrayBuffer()));
    }
  } else if (type === 'application/octet-stream' || type === '') {
    const p = resolvePath(requiredPath(query), user);
    const gz = (req.headers['content-encoding'] ?? '').toLowerCase() === 'gzip';
    await record(p, gz ? req.pipe(createGunzip()) : req);
  } else {
    throw new CubeError('BAD_REQUEST', `unsupported upload content-type ${JSON.stringify(type)}: multipart/form-data or application/octet-stream`);
  }
  sendJson(res, 200, written);
}
