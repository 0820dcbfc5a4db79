// meta.json in each sandbox's directory: what a restarted cubelet needs to re-adopt it.
// Written atomically (temp file + rename), so a kill -9 leaves either the old or the new file;
// a sandbox without one was never complete and is cleaned at the next start.
import { readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { withEpochTimes, type EgressRequest, type SandboxLifecycle, type SandboxSpecView } from '../model/sandbox.js';
import type { EgressRules } from '../network/egress.js';
import type { SlotMode } from '../network/types.js';
import { META_FILE as FILE, type DirRecords } from '../runtime/types.js';
import type { VolumeMount } from '../model/volume.js';

export interface SandboxMeta {
  sandboxID: string;
  /**
   * The id its runtime objects, network slot and egress rules are keyed by, when not sandboxID: a
   * sandbox that began warm (warm-pool.ts) keeps the internal id it was made with.
   */
  runtimeID?: string;
  /** A warm sandbox not yet claimed (sandboxID is its runtime id, never shown): a restart destroys it. */
  warm?: boolean;
  templateID: string;
  spec: SandboxSpecView;
  slotIndex: number;
  /** The mode of its network slot when not ns (a microVM's TAP-mode slot): a restart re-adopts it into that pool. */
  slotMode?: SlotMode;
  /** Epoch ms (ISO 8601 in files written before times were numbers: readMeta converts). */
  startedAt: number;
  endAt: number;
  metadata: Record<string, string>;
  env: Record<string, string>;
  paused: boolean;
  /** The sandbox's own egress rules, re-installed when a restarted daemon re-adopts it. */
  egress?: EgressRules;
  /** The same rules as the create or update asked for them (shown in views). */
  egressAsked?: EgressRequest;
  lifecycle?: SandboxLifecycle;
  owner?: string;
  /** Some file was given metadata (so reading it is worth a helper job per call). */
  fileMetadata?: boolean;
  /** The runtime it was created with, when the node offers several. */
  runtime?: string;
  /** The template's working directory: the default cwd of commands. */
  workdir?: string;
  /** The snapshot its writable layer started from. */
  fromSnapshot?: string;
  /** The volumes mounted in it. */
  volumes?: VolumeMount[];
}

/** The id the sandbox's runtime objects, slot and rules are keyed by. */
export const runtimeIdOf = (meta: Pick<SandboxMeta, 'sandboxID' | 'runtimeID'>): string => meta.runtimeID ?? meta.sandboxID;

export async function writeMeta(dir: string, meta: SandboxMeta): Promise<void> {
  const tmp = join(dir, `${FILE}.tmp`);
  await writeFile(tmp, JSON.stringify(meta), { mode: 0o600 });
  await rename(tmp, join(dir, FILE));
}

/** undefined when missing or unreadable (an incomplete create). */
export async function readMeta(dir: string): Promise<SandboxMeta | undefined> {
  try {
    const m = JSON.parse(await readFile(join(dir, FILE), 'utf8')) as SandboxMeta;
    return typeof m.sandboxID === 'string' && typeof m.slotIndex === 'number' ? withEpochTimes(m) : undefined;
  } catch {
    return undefined;
  }
}

/** Where a cubelet keeps its sandboxes' meta: meta.json in each sandbox directory (META_FILES) or a runtime's own keeping. */
export type MetaKeeper = DirRecords<SandboxMeta>;

export const META_FILES: MetaKeeper = { write: writeMeta, read: readMeta };
