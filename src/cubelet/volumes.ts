// A node's side of volumes at create: the mounts the control plane resolved, checked against what
// this node's runtime can do before anything of the sandbox is made.
import { CubeError } from '../errors.js';
import { mountPathProblem, type VolumeMount } from '../model/volume.js';
import type { RuntimeDriver } from '../runtime/types.js';

/** The mounts as given; 422 when the node's runtime mounts no volumes, 400 for a bad or doubled path (pure but for the driver). */
export function checkVolumes(mounts: VolumeMount[], driver: Pick<RuntimeDriver, 'name' | 'volumes'>): VolumeMount[] {
  if (!driver.volumes)
    throw new CubeError('VOLUME_RUNTIME', `the ${driver.name} runtime of this node cannot mount volumes: create with metadata cube.runtime=ns`);
  const seen = new Set<string>();
  for (const m of mounts) {
    const problem = mountPathProblem(m.path);
    if (problem !== undefined) throw new CubeError('BAD_REQUEST', problem);
    if (seen.has(m.path)) throw new CubeError('BAD_REQUEST', `two volumes are mounted at ${m.path}`);
    seen.add(m.path);
  }
  return mounts.map((m) => ({ volumeID: m.volumeID, name: m.name, path: m.path }));
}
