// A daemon that never becomes healthy (here: a config it refuses) fails startDaemon with its
// reason, and leaves nothing: no kernel object of its tag, not even its temp dir.
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { startDaemon } from '../helpers/daemon.js';
import { countKernelObjects, uniqueNodeID } from '../helpers/kernel.js';
import { nodeTag } from '../../src/ids.js';

/** Test daemons' temp dirs whose config names `nodeID`. */
async function dirsOf(nodeID: string): Promise<string[]> {
  const out: string[] = [];
  for (const e of await readdir('/tmp')) {
    if (!e.startsWith('cubed-test-')) continue;
    const toml = await readFile(join('/tmp', e, 'config', 'cubelet.toml'), 'utf8').catch(() => '');
    if (toml.includes(nodeID)) out.push(e);
  }
  return out;
}

it('a daemon that refuses its config fails startDaemon with the reason and leaves nothing behind', async () => {
  const nodeID = uniqueNodeID('refused');
  await expect(startDaemon({ nodeID, cubelet: { quota: { cpus: -1 } } })).rejects.toThrow(/did not become healthy[\s\S]*cpus/);
  expect(await dirsOf(nodeID)).toEqual([]);
  expect(Object.values(await countKernelObjects(nodeTag(nodeID))).every((n) => n === 0)).toBe(true);
});
