// The pure halves of volumes: mount paths, a create's mounts resolved by name and pinned to their
// node, and a node refusing mounts its runtime cannot make (one without a store of volumes, as the sim runtime).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { placedForVolumes, resolveMounts } from '../../src/control/volumes.js';
import { checkVolumes } from '../../src/cubelet/volumes.js';
import { CubeError } from '../../src/errors.js';
import { mountPathProblem, type VolumeRecord } from '../../src/model/volume.js';
import { RuntimeSet } from '../../src/runtime/multi.js';
import { SimDriver } from '../../src/runtime/sim/driver.js';
import { volumeMountError } from '../../src/runtime/ns/volumes.js';

const vol = (volumeID: string, name: string, nodeID: string): VolumeRecord => ({ volumeID, name, nodeID, sizeBytes: 1, createdAt: 0, token: 't' });
const kindOf = (fn: () => unknown): string | undefined => {
  try {
    fn();
    return undefined;
  } catch (e) {
    return e instanceof CubeError ? e.kind : String(e);
  }
};

describe('mount paths', () => {
  it('takes absolute plain paths, refuses relative ones, dot components and the sandbox’s own mounts', () => {
    for (const ok of ['/data', '/mnt/shared', '/home/user/work', '/a.b/c-d_e@f+g']) expect(mountPathProblem(ok)).toBeUndefined();
    for (const bad of ['data', '/', '/a/../b', '/a/./b', '/a//b', '/a b', '/a:b', `/${'x'.repeat(300)}`])
      expect(mountPathProblem(bad)).toMatch(/must be absolute/);
    for (const own of ['/proc', '/proc/x', '/dev/shm', '/sys', '/tmp', '/usr/local']) expect(mountPathProblem(own)).toMatch(/which the sandbox mounts itself/);
    expect(mountPathProblem('/procfs')).toBeUndefined();
  });
});

describe('resolveMounts', () => {
  const owned = [vol('vol-a', 'a', 'n1'), vol('vol-b', 'b', 'n1'), vol('vol-c', 'c', 'n2')];

  it('resolves names and pins the node the volumes are on', () => {
    expect(resolveMounts([], owned)).toBeUndefined();
    expect(
      resolveMounts(
        [
          { name: 'a', path: '/x' },
          { name: 'b', path: '/y' },
        ],
        owned,
      ),
    ).toEqual({
      nodeID: 'n1',
      volumes: [
        { volumeID: 'vol-a', name: 'a', path: '/x' },
        { volumeID: 'vol-b', name: 'b', path: '/y' },
      ],
    });
  });

  it('refuses an unknown name (404), volumes on two nodes or off the node asked for (409), a path twice (400)', () => {
    expect(kindOf(() => resolveMounts([{ name: 'nope', path: '/x' }], owned))).toBe('NOT_FOUND');
    expect(() =>
      resolveMounts(
        [
          { name: 'a', path: '/x' },
          { name: 'c', path: '/y' },
        ],
        owned,
      ),
    ).toThrow(/volume c \(vol-c\) is on node n2, but another of its volumes is on node n1/);
    expect(() => resolveMounts([{ name: 'a', path: '/x' }], owned, 'n2')).toThrow(/is on node n1, but the create names node n2/);
    expect(kindOf(() => resolveMounts([{ name: 'a', path: '/x' }], owned, 'n2'))).toBe('VOLUME_PLACEMENT');
    expect(
      kindOf(() =>
        resolveMounts(
          [
            { name: 'a', path: '/x' },
            { name: 'b', path: '/x' },
          ],
          owned,
        ),
      ),
    ).toBe('BAD_REQUEST');
    expect(kindOf(() => resolveMounts([{ name: 'a', path: '/proc' }], owned))).toBe('BAD_REQUEST');
  });
});

describe('a node whose runtime mounts no volumes', () => {
  const dir = mkdtempSync(join(tmpdir(), 'cubed-test-volumes-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const mounts = [{ volumeID: 'vol-aaaaaaaaaaaaaaaa', name: 'a', path: '/data' }];

  it('refuses the create with 422 (130433) before anything is made', async () => {
    const sim = new SimDriver({ dataDir: dir });
    expect(kindOf(() => checkVolumes(mounts, sim))).toBe('VOLUME_RUNTIME');
    const set = new RuntimeSet([sim]);
    const spec = {
      sandboxID: 'sb-volumes-1',
      template: { name: 'host', layers: [], bindHostUsr: true },
      cpus: 1,
      memoryMiB: 64,
      pidsMax: 64,
      env: {},
      volumes: mounts,
    };
    const e = await set.create(spec).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(CubeError);
    expect((e as CubeError).code).toBe(130433);
    expect((e as CubeError).http).toBe(422);
    expect(await set.scan()).toEqual([]);
  });
});

describe("the launcher's mount failures", () => {
  it('a mount point it cannot make is 400 with the path and reason; a volume gone meanwhile 404; anything else is not the caller’s', () => {
    const ro = volumeMountError('cube-launch: volume mount point /bin/x: mkdir: Read-only file system\n');
    expect(ro?.kind).toBe('BAD_REQUEST');
    expect(ro?.message).toBe('volumeMounts: the mount point /bin/x cannot be made in this sandbox: Read-only file system');
    expect(volumeMountError('cube-launch: volume mount point /a/b: Not a directory')?.message).toMatch(
      /\/a\/b cannot be made in this sandbox: Not a directory/,
    );
    const gone = volumeMountError('cube-launch: open_tree /d/store/volumes/vol-0123456789abcdef: No such file or directory');
    expect(gone?.kind).toBe('NOT_FOUND');
    expect(gone?.message).toMatch(/volume vol-0123456789abcdef was deleted/);
    expect(volumeMountError('cube-launch: mount overlay on /m: Invalid argument')).toBeUndefined();
  });
});

describe('placedForVolumes', () => {
  it('adds the volumes to a placement refused on their node; other errors and creates without volumes pass as they are', () => {
    const req = { nodeID: 'n1', volumes: [{ volumeID: 'vol-a', name: 'a', path: '/x' }] };
    const refused = new CubeError('NO_NODE', 'no node can take it: n1: mem 90% > 80%', { retryAfter: 1 });
    const e = placedForVolumes(refused, req) as CubeError;
    expect(e.kind).toBe('NO_NODE');
    expect(e.retryAfter).toBe(1);
    expect(e.message).toBe('no node can take it: n1: mem 90% > 80% (it mounts volume a of node n1, so it can run only there)');
    expect(placedForVolumes(refused, {})).toBe(refused);
    const other = new CubeError('NODE_UNREACHABLE', 'down');
    expect(placedForVolumes(other, req)).toBe(other);
  });
});
