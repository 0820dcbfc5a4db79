// What a create may ask of a sandbox's host-wide shares beyond its spec, through metadata labels
// (E2B's create has no fields for them; `cube.*` labels are how an unchanged E2B client asks, as
// cube.runtime and cube.net_raw): its open files and its I/O on the sandbox store's device. The
// node's settings (cubelet sandbox_limits) are the default and the bound: a create may ask for
// less, never more (the node refuses more with 400).

/** The node's limits per sandbox (cubelet sandbox_limits): each create's default and bound. */
export interface NodeSandboxLimits {
  /** Share of fs.file-max one sandbox's processes may hold together. */
  openFilesShare: number;
  io: IoLimits;
}

/**
 * The default share of fs.file-max per sandbox: sixteen sandboxes at their limits fill the
 * table, where three did (issue 29 item 8).
 */
export const DEFAULT_OPEN_FILES_SHARE = 1 / 16;
/**
 * The default I/O limits per sandbox on the store's device: writes at 32 MiB/s, nothing else.
 * Measured with bench/io-neighbour.ts (docs/benchmarks.md "I/O between neighbours"): a sandbox
 * writing 64 MiB + fsync in a loop took a neighbour sandbox's 4 KiB fsync from p50 1.9 / p90 8.1
 * ms (idle) to 7.3 / 29.6; held to 32 MiB/s, 2.4 / 11.1. No operations-per-second limit: one of
 * 500 writes/s on a 4 KiB write + fsync loop made the neighbour's fsync worse (p90 5.1 -> 89.9 ms),
 * as the throttled writer holds the store's btrfs log while its writes wait in the throttle; reads
 * are not limited (no effect on fsync latency measured, and template layers are not on the store).
 */
export const DEFAULT_IO_LIMITS: IoLimits = { readMiBps: 0, writeMiBps: 32, readIops: 0, writeIops: 0 };
export const DEFAULT_SANDBOX_LIMITS: NodeSandboxLimits = { openFilesShare: DEFAULT_OPEN_FILES_SHARE, io: DEFAULT_IO_LIMITS };

/** I/O limits on the store's device; 0 = not limited. */
export interface IoLimits {
  readMiBps: number;
  writeMiBps: number;
  readIops: number;
  writeIops: number;
}

export const IO_KEYS = ['readMiBps', 'writeMiBps', 'readIops', 'writeIops'] as const satisfies readonly (keyof IoLimits)[];

export interface LimitAsk {
  /** Open files its processes may hold together. */
  openFiles?: number;
  io?: Partial<IoLimits>;
}

export const OPEN_FILES_LABEL = 'cube.open_files';
export const IO_LABELS: Record<keyof IoLimits, string> = {
  readMiBps: 'cube.io.read_mibps',
  writeMiBps: 'cube.io.write_mibps',
  readIops: 'cube.io.read_iops',
  writeIops: 'cube.io.write_iops',
};

/**
 * A sandbox's I/O limits (pure): the node's, or lower where the create asks (any limit where the
 * node sets none); more than the node's is the problem, a string: an API key must not lift its own
 * sandbox's limit.
 */
export function ioLimitsFor(node: IoLimits, ask: Partial<IoLimits> | undefined): IoLimits | string {
  const out = { ...node };
  for (const k of IO_KEYS) {
    const v = ask?.[k];
    if (v === undefined) continue;
    if (node[k] !== 0 && v > node[k]) return `${IO_LABELS[k]}=${v}: more than this node's limit ${node[k]} (cubelet sandbox_limits.io)`;
    out[k] = v;
  }
  return out;
}

/** A positive whole number of at most 2^31 - 1, else undefined. */
function count(v: string): number | undefined {
  if (!/^[1-9][0-9]{0,9}$/.test(v)) return undefined;
  const n = Number(v);
  return n <= 2 ** 31 - 1 ? n : undefined;
}

/** The limits a create's labels ask for, or why they are not valid (pure). */
export function limitAsk(metadata: Readonly<Record<string, string>> | undefined): { ask: LimitAsk } | { problem: string } {
  const ask: LimitAsk = {};
  const read = (label: string): number | undefined | string => {
    const v = metadata?.[label];
    if (v === undefined) return undefined;
    return count(v) ?? `metadata ${label}=${JSON.stringify(v.slice(0, 40))}: must be a whole number from 1 to ${2 ** 31 - 1}`;
  };
  const files = read(OPEN_FILES_LABEL);
  if (typeof files === 'string') return { problem: files };
  if (files !== undefined) ask.openFiles = files;
  for (const k of IO_KEYS) {
    const n = read(IO_LABELS[k]);
    if (typeof n === 'string') return { problem: n };
    if (n !== undefined) (ask.io ??= {})[k] = n;
  }
  return { ask };
}
