// A bound on a tar stream's metadata entries before tar-stream sees them. tar-stream holds a GNU
// long name/link ('L', 'K') or PAX ('x', 'g') header's whole body in memory before it parses
// it, whatever size its header claims: an image archive with a huge long-name header grew cubed
// by 0.9-1.2 GiB, kept after the import failed. This pass-through reads the headers as the bytes
// go by (512-byte blocks, the body skipped by its size; a PAX `size` record changes the next
// entry's), and fails the stream with 400 IMAGE_INVALID when such an entry is over the bound.
import { Transform } from 'node:stream';
import { CubeError } from '../../errors.js';

/** A long name or a PAX header set of a real archive is a few hundred bytes. */
export const TAR_META_MAX_BYTES = 1024 ** 2;

const BLOCK = 512;
const META_TYPES = new Set(['L', 'K', 'x', 'g']);

/** The size field of a ustar header: octal text, or base-256 when its first byte has the high bit (pure). */
export function tarSize(h: Buffer): number {
  const field = h.subarray(124, 136);
  if (field[0]! & 0x80) {
    let n = field[0]! & 0x7f;
    for (let i = 1; i < field.length; i++) n = n * 256 + field[i]!;
    return n;
  }
  const text = field
    .toString('latin1')
    .replace(/[\0 ]+$/g, '')
    .trim();
  return text === '' ? 0 : parseInt(text, 8);
}

/** The `size` record of a PAX header body (`LEN key=value\n` records), if any (pure). */
export function paxSize(body: Buffer): number | undefined {
  const m = /(?:^|\n)\d+ size=(\d+)\n/.exec(body.toString('latin1'));
  return m ? Number(m[1]) : undefined;
}

export function tarMetaGuard(maxBytes = TAR_META_MAX_BYTES, what = 'the archive'): Transform {
  let head: Buffer[] = [];
  let headLen = 0;
  /** Body bytes (with padding) still to pass before the next header. */
  let skip = 0;
  /** A PAX header's body being collected (bounded by maxBytes), and how much of it is body (not padding). */
  let pax: { chunks: Buffer[]; left: number } | undefined;
  let nextSize: number | undefined;
  /** Past a block that is no header: tar-stream fails on it, nothing left to guard. */
  let lost = false;
  const read = (chunk: Buffer): void => {
    let i = 0;
    if (lost) return;
    while (i < chunk.length) {
      if (skip > 0) {
        const n = Math.min(skip, chunk.length - i);
        if (pax && pax.left > 0) {
          const body = chunk.subarray(i, i + Math.min(n, pax.left));
          pax.chunks.push(body);
          pax.left -= body.length;
          if (pax.left === 0) {
            nextSize = paxSize(Buffer.concat(pax.chunks));
            pax = undefined;
          }
        }
        skip -= n;
        i += n;
        continue;
      }
      const take = chunk.subarray(i, i + BLOCK - headLen);
      head.push(take);
      headLen += take.length;
      i += take.length;
      if (headLen < BLOCK) return;
      const h = head.length === 1 ? head[0]! : Buffer.concat(head);
      head = [];
      headLen = 0;
      if (h.every((b) => b === 0)) continue; // the end blocks
      const type = String.fromCharCode(h[156]!);
      let size = tarSize(h);
      if (!Number.isFinite(size) || size < 0) return void (lost = true);
      if (META_TYPES.has(type)) {
        if (size > maxBytes)
          throw new CubeError(
            'IMAGE_INVALID',
            `${what} has a ${type === 'L' || type === 'K' ? 'GNU long name' : 'PAX'} header of ${size} bytes (at most ${maxBytes} are read)`,
          );
        if (type === 'x' && size > 0) pax = { chunks: [], left: size };
      } else if (nextSize !== undefined) {
        size = nextSize;
        nextSize = undefined;
      }
      skip = Math.ceil(size / BLOCK) * BLOCK;
    }
  };
  return new Transform({
    transform(chunk: Buffer, _enc, cb) {
      try {
        read(chunk);
      } catch (e) {
        return cb(e as Error);
      }
      cb(null, chunk);
    },
  });
}
