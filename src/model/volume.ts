// Volumes (E2B's volume API): a directory with a size limit that outlives sandboxes and is mounted
// into several at once. The data lives on one node (ns: a btrfs subvolume of its store with a
// quota-group limit, src/storage/btrfs-store.ts); the record is in the state store, and a sandbox
// that mounts volumes is placed on the node that holds them (src/control/volumes.ts).

export interface VolumeRecord {
  volumeID: string;
  /** Unique per owner. */
  name: string;
  /** The API key (id) that made it; a user key sees only its own (as sandboxes). */
  owner?: string;
  nodeID: string;
  /** The limit of its data and metadata (the subvolume's quota group). */
  sizeBytes: number;
  /** Epoch ms. */
  createdAt: number;
  /** The bearer token of its content API (E2B VolumeAndToken.token). */
  token: string;
}

/** A volume as a create asks to mount it (E2B volumeMounts: by name). */
export interface VolumeMountRequest {
  name: string;
  path: string;
}

/** A volume mounted in a sandbox: resolved by the control plane, carried to the node and in the sandbox's view. */
export interface VolumeMount {
  volumeID: string;
  name: string;
  /** Absolute path inside the sandbox. */
  path: string;
}

/** Volume names: what E2B names look like, and safe in messages and paths (pure check). */
export const VOLUME_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/;

/** Mount paths: absolute, plain characters, no `.`/`..` components, not over the sandbox's own mounts. */
const MOUNT_PATH = /^(\/[A-Za-z0-9_][A-Za-z0-9._@+-]{0,254})+$/;
const RESERVED = ['/proc', '/dev', '/sys', '/tmp', '/usr'];

/** Why a mount path cannot be used, or undefined (pure). */
export function mountPathProblem(path: string): string | undefined {
  if (path.length > 1024 || !MOUNT_PATH.test(path) || path.split('/').some((c) => c === '.' || c === '..'))
    return `mount path ${JSON.stringify(path)} must be absolute, of letters, digits and . _ @ + - (no '.' or '..' components)`;
  const under = RESERVED.find((r) => path === r || path.startsWith(`${r}/`));
  if (under !== undefined) return `mount path ${path} is at or under ${under}, which the sandbox mounts itself`;
  return undefined;
}
