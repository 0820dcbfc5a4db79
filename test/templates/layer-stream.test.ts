// How a fetched layer's stream is bounded: by progress (no byte for the stall time fails it with
// 130425), never by a total time (a slow but moving stream runs past the stall time); the same for
// a replica's create call on a node fetching the template (RemoteNode against a node API listener
// that answers late); and the size a holder reports for a layer, which the fetching node checks
// its free space against.
import { mkdir, mkdtemp, rm, truncate, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stallGuard } from '../../src/templates/fetch.js';
import { connectNodeAdapter } from '@connectrpc/connect-node';
import { NodeService, NodeTemplates } from '../../src/cubelet/gen/cube/node/v1/node_pb.js';
import { RemoteNode } from '../../src/cubelet/remote.js';
import type { NodeCreateRequest } from '../../src/cubelet/types.js';
import { CubeError } from '../../src/errors.js';
import { layerBytes } from '../../src/templates/layers/tree.js';

let scratch: string;
beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), 'cubed-test-layer-stream-'));
});
afterAll(() => rm(scratch, { recursive: true, force: true }));

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('stallGuard', () => {
  it('lets a stream that keeps moving run for longer than the stall time', async () => {
    const src = new PassThrough();
    const out = stallGuard(src, 150, 'layer x');
    const got = out.toArray();
    for (let i = 0; i < 8; i++) {
      src.write(Buffer.from(`chunk ${i}\n`));
      await sleep(60); // 480 ms in all, 60 ms apart
    }
    src.end();
    expect(Buffer.concat(await got).toString()).toContain('chunk 7');
  });

  it('fails with 130425 naming the layer once no byte came for the stall time', async () => {
    const src = new PassThrough();
    const out = stallGuard(src, 100, 'layer sha256:abc');
    src.write('first');
    const err = await out.toArray().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(CubeError);
    expect(err).toMatchObject({ kind: 'LAYER_UNAVAILABLE', message: expect.stringContaining('layer sha256:abc: no byte came for 0.1 s') });
    expect(src.destroyed).toBe(true);
  });
});

describe('layerBytes', () => {
  it('counts apparent file sizes (holes included: an unpack writes them) and a block per entry', async () => {
    const root = join(scratch, 'layer');
    await mkdir(join(root, 'opt'), { recursive: true });
    await writeFile(join(root, 'opt', 'a'), 'x'.repeat(1000));
    await writeFile(join(root, 'opt', 'sparse'), '');
    await truncate(join(root, 'opt', 'sparse'), 1024 ** 3);
    expect(await layerBytes(root)).toBe(3 * 4096 + 1000 + 1024 ** 3);
  });
});

/** A node API listener whose create answers after `answerMs`, reporting `progress()` meanwhile. */
async function slowNode(answerMs: number, progress: () => { bytes: number; active: number }): Promise<{ server: Server; url: string; looks: number }> {
  const state = { looks: 0 };
  const adapter = connectNodeAdapter({
    routes: (router) => {
      router.service(NodeTemplates, {
        fetchProgress: () => {
          state.looks++;
          return progress();
        },
      });
      router.service(NodeService, {
        createSandbox: (m, ctx) =>
          new Promise((resolve, reject) => {
            const t = setTimeout(() => resolve({ sandboxId: m.sandboxId, state: 'running' }), answerMs);
            ctx.signal.addEventListener('abort', () => {
              clearTimeout(t);
              reject(new Error('caller gone'));
            });
          }),
      });
    },
  });
  const server = createServer(adapter);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return Object.assign(state, { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` });
}

describe('a create on a node fetching its template', () => {
  const req: NodeCreateRequest = {
    sandboxID: 'sbx-1',
    templateID: 'base',
    cpus: 1,
    memoryMiB: 256,
    diskGiB: 1,
    endAt: Date.now() + 60_000,
    env: {},
    metadata: {},
  };
  // The call timeout, which is also the bound of each progress look: 200 ms let a look time out
  // on a CI machine at load 12 (the wait then ended early, as for a frozen node).
  const CALL_MS = 1000;

  it('waits past the call timeout while layer bytes keep coming in', async () => {
    let bytes = 0;
    const n = await slowNode(3.5 * CALL_MS, () => ({ bytes: (bytes += 4096), active: 1 }));
    try {
      const view = await new RemoteNode('n1', n.url, 's', CALL_MS).createSandbox(req);
      expect(view).toMatchObject({ sandboxID: 'sbx-1' });
      expect(n.looks).toBeGreaterThanOrEqual(2);
    } finally {
      n.server.closeAllConnections();
      n.server.close();
    }
  });

  it('gives up (130596) once no byte came since the last look', async () => {
    const n = await slowNode(10 * CALL_MS, () => ({ bytes: 4096, active: 1 }));
    try {
      const err = await new RemoteNode('n1', n.url, 's', CALL_MS).createSandbox(req).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toMatchObject({
        kind: 'NODE_UNREACHABLE',
        message: expect.stringContaining('no answer to the create within 1 s, and no layer byte fetched there in the last 1 s'),
      });
    } finally {
      n.server.closeAllConnections();
      n.server.close();
    }
  });

  it('gives up at the call timeout when no fetch runs there', async () => {
    const n = await slowNode(10 * CALL_MS, () => ({ bytes: 0, active: 0 }));
    try {
      const err = await new RemoteNode('n1', n.url, 's', CALL_MS).createSandbox(req).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toMatchObject({ kind: 'NODE_UNREACHABLE', message: expect.stringMatching(/no answer to the create within 1 s$/) });
      expect(n.looks).toBe(1);
    } finally {
      n.server.closeAllConnections();
      n.server.close();
    }
  });
});
