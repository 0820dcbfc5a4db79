// What a node daemon holds of its host, claimed at start so two daemons on one host never harm
// each other (issue 30 item 3). Found before: a second daemon with the same node id (the host
// name by default) swept all 16 sandboxes of the first as its own stale objects, and its stop
// deleted the first's nftables table and netns; one whose pool CIDR overlapped the first's broke
// the first's port routing; two handed out the same sandbox host ids. A daemon now claims its node
// id, its tag (the names of its kernel objects), its pool CIDR (in its network namespace) and its
// sandbox host id ranges in /run/cube, and refuses to start (HostTaken, exit 3) when a live daemon
// holds one of them or the CIDR meets a route or address of the host.
//
// A claim is a file `/run/cube/node-<hash of the node id>.json` holding its facts, flock'd by
// the daemon for its life: the kernel drops the lock when the process dies however it dies (kill
// -9 included), so a claim is live exactly while its file is locked. Every look at the claims and
// every new claim happens under `/run/cube/claims.lock`, so two daemons starting at once are
// judged one after the other. The pure half (hostConflicts, routeConflicts) takes the facts;
// the shell below reads them (flock(1) locks our own open file description, and the lock stays
// ours after it exits: Node has no flock of its own).
import { spawnSync, execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  closeSync,
  existsSync,
  ftruncateSync,
  mkdirSync,
  openSync,
  readFileSync,
  readdirSync,
  readlinkSync,
  unlinkSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { join } from 'node:path';
import { isNodeTag, legacyNodeTag, nodeTag } from '../ids.js';
import { formatIPv4, parseIPv4, parseRange } from '../network/ipam.js';
import { hostIfIndex } from '../network/names.js';

export const CLAIMS_DIR = '/run/cube';
/** The data dir's record of its tag (kernel objects are named by it): made at the first start. */
export const TAG_FILE = 'node-tag';
/** How long a start waits for another daemon's start to finish its claims. */
const CLAIMS_WAIT_SEC = 30;

/** A start refused because the host is taken: exit code 3 of cubed (not retried by a supervisor that honours it). */
export class HostTaken extends Error {
  readonly exitCode = 3;
  constructor(message: string) {
    super(message);
    this.name = 'HostTaken';
  }
}

/** What one daemon holds of the host. */
export interface HostClaim {
  pid: number;
  nodeID: string;
  tag: string;
  dataDir: string;
  /** The network namespace the daemon runs in (readlink /proc/self/ns/net): pools of two namespaces never meet. */
  netns: string;
  cidr?: string;
  /** First and last host id of the sandboxes' ranges (user namespaces are the host's: any namespace). */
  hostIds?: [number, number];
}

/** A route of the host (`ip -j -4 route show table all`), as far as the check needs it. */
export interface HostRoute {
  dst: string;
  type?: string;
  dev?: string;
  table?: string;
}

function span(cidr: string): [number, number] {
  const r = parseRange(cidr);
  return [r.base, r.base + 2 ** (32 - r.prefixLen) - 1];
}

const meet = (a: [number, number], b: [number, number]) => a[0] <= b[1] && b[0] <= a[1];

function who(c: HostClaim): string {
  return `cubed pid ${c.pid} (node id ${JSON.stringify(c.nodeID)}, data dir ${c.dataDir})`;
}

/** Why `mine` may not start beside the live claims `others`, one reason per line (pure). */
export function hostConflicts(mine: HostClaim, others: readonly HostClaim[]): string[] {
  const out: string[] = [];
  for (const o of others) {
    if (o.nodeID === mine.nodeID)
      out.push(
        `node id ${JSON.stringify(mine.nodeID)} is held by ${who(o)}: give this daemon another --node-id (and its own data dir, pool cidr and identity.host_id_base)`,
      );
    else if (o.tag === mine.tag)
      out.push(
        `node tag ${mine.tag} (the names of its netns, links, cgroups and nftables table; recorded in ${join(mine.dataDir, TAG_FILE)}) is held by ${who(o)}: was this data dir copied from that one?`,
      );
    if (mine.cidr && o.cidr && o.netns === mine.netns && meet(span(mine.cidr), span(o.cidr))) {
      out.push(`pool cidr ${mine.cidr} overlaps ${o.cidr} of ${who(o)}: give each daemon its own range (network cidr in cubelet.toml)`);
    }
    if (mine.hostIds && o.hostIds && meet(mine.hostIds, o.hostIds)) {
      out.push(
        `sandbox host ids ${mine.hostIds[0]}-${mine.hostIds[1]} overlap ${o.hostIds[0]}-${o.hostIds[1]} of ${who(o)}: move identity.host_id_base (or lower identity.host_id_ranges) so the ranges are apart`,
      );
    }
  }
  return out;
}

/** Routes that carry no traffic: an operator's (or a test's) guard over a range is no conflict. */
const NO_TRAFFIC = new Set(['unreachable', 'blackhole', 'prohibit', 'throw']);

/**
 * Routes and addresses of the host (every table; the local table lists each address) that
 * overlap `cidr`, except the default route, routes that carry no traffic and those of this tag's
 * own links (a crashed run of the same identity: re-adopted or removed by the start, as before).
 * As Docker checks a network against the host's routes (pure).
 */
export function routeConflicts(cidr: string, tag: string, routes: readonly HostRoute[]): string[] {
  const mine = span(cidr);
  const out: string[] = [];
  for (const r of routes) {
    if (r.dst === 'default' || NO_TRAFFIC.has(r.type ?? 'unicast')) continue;
    if (r.dev !== undefined && hostIfIndex(tag, r.dev) !== undefined) continue;
    const [addr, bits] = r.dst.split('/');
    let first: number;
    try {
      first = parseIPv4(addr!);
    } catch {
      continue;
    }
    const size = 2 ** (32 - (bits === undefined ? 32 : Number(bits)));
    const theirs: [number, number] = [first - (first % size), first - (first % size) + size - 1];
    if (!meet(mine, theirs)) continue;
    const what = r.type === 'local' ? `address ${addr}` : `route ${formatIPv4(theirs[0])}/${32 - Math.log2(size)}`;
    out.push(
      `pool cidr ${cidr} overlaps the host's ${what}${r.dev ? ` on ${r.dev}` : ''}${r.table && r.table !== 'main' ? ` (table ${r.table})` : ''}: pick a range the host does not use (network cidr in cubelet.toml)`,
    );
  }
  return out;
}

/**
 * The tag of the node whose data dir is `dataDir`: the one recorded there, else (first start)
 * made from the node id and recorded. A data dir that a version before the long tag ran in
 * (it has sandboxes, and no record) keeps the 4-hex tag its kernel objects carry, so its
 * sandboxes are re-adopted; a new data dir gets the 6-character one.
 */
export function dataDirTag(dataDir: string, nodeID: string): string {
  const path = join(dataDir, TAG_FILE);
  let recorded: string | undefined;
  try {
    recorded = readFileSync(path, 'utf8').trim();
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
  }
  if (recorded !== undefined) {
    if (!isNodeTag(recorded))
      throw new Error(
        `${path} holds ${JSON.stringify(recorded.slice(0, 40))}, not a node tag: restore it or remove it (after removing every sandbox of this data dir)`,
      );
    return recorded;
  }
  const older = existsSync(join(dataDir, 'sandboxes')) || existsSync(join(dataDir, 'microvm'));
  const tag = older ? legacyNodeTag(nodeID) : nodeTag(nodeID);
  writeFileSync(path, `${tag}\n`, { mode: 0o644 });
  return tag;
}

/** flock(2) on our open file `fd` through flock(1); false when another process holds it (within `waitSec`). */
function flock(fd: number, waitSec?: number): boolean {
  const r = spawnSync('flock', [...(waitSec ? ['-w', String(waitSec)] : ['-n']), '-E', '75', '3'], { stdio: ['ignore', 'ignore', 'pipe', fd] });
  if (r.status === 0) return true;
  if (r.status === 75) return false;
  throw new Error(`flock(1) failed (util-linux): ${r.error?.message ?? String(r.stderr).trim()}`);
}

/** Opens `path` and locks it for this process's life (closing the fd unlocks): the fd, or undefined when held. */
export function lockFile(path: string, waitSec?: number): number | undefined {
  const fd = openSync(path, 'a+', 0o600);
  if (flock(fd, waitSec)) return fd;
  closeSync(fd);
  return undefined;
}

/** Live claims in `dir` (those of dead daemons removed: we hold claims.lock). */
function liveClaims(dir: string, except: string): HostClaim[] {
  const out: HostClaim[] = [];
  for (const name of readdirSync(dir)) {
    if (!/^node-[0-9a-f]{24}\.json$/.test(name) || name === except) continue;
    const path = join(dir, name);
    const fd = lockFile(path);
    if (fd !== undefined) {
      // Its daemon is gone: nobody else opens claims while we hold claims.lock.
      unlinkSync(path);
      closeSync(fd);
      continue;
    }
    try {
      out.push(JSON.parse(readFileSync(path, 'utf8')) as HostClaim);
    } catch {
      // Being written by a daemon that holds it: it cannot be starting now (we hold claims.lock).
    }
  }
  return out;
}

function hostRoutes(): HostRoute[] {
  return JSON.parse(execFileSync('ip', ['-j', '-4', 'route', 'show', 'table', 'all'], { encoding: 'utf8' }) || '[]') as HostRoute[];
}

export interface ClaimRequest {
  nodeID: string;
  tag: string;
  dataDir: string;
  /** Omitted by a node that makes no network slots. */
  cidr?: string;
  hostIds?: [number, number];
  /** Tests of the pure half aside, always CLAIMS_DIR. */
  dir?: string;
}

/** Claims the host for this daemon (HostTaken when it may not start); the claim lasts until the process dies or `release` runs. */
export function claimHost(req: ClaimRequest): { claim: HostClaim; release: () => void } {
  const dir = req.dir ?? CLAIMS_DIR;
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const gate = lockFile(join(dir, 'claims.lock'), CLAIMS_WAIT_SEC);
  if (gate === undefined) throw new HostTaken(`${join(dir, 'claims.lock')} stayed locked for ${CLAIMS_WAIT_SEC}s: another daemon is stuck starting`);
  try {
    const claim: HostClaim = {
      pid: process.pid,
      nodeID: req.nodeID,
      tag: req.tag,
      dataDir: req.dataDir,
      netns: readlinkSync('/proc/self/ns/net'),
      ...(req.cidr ? { cidr: parseRange(req.cidr).cidr } : {}),
      ...(req.hostIds ? { hostIds: req.hostIds } : {}),
    };
    const name = `node-${createHash('sha256').update(req.nodeID).digest('hex').slice(0, 24)}.json`;
    const path = join(dir, name);
    const fd = lockFile(path);
    if (fd === undefined) {
      let holder = '';
      try {
        holder = ` by ${who(JSON.parse(readFileSync(path, 'utf8')) as HostClaim)}`;
      } catch {
        // unreadable: name the file only
      }
      throw new HostTaken(`node id ${JSON.stringify(req.nodeID)} is held${holder} (${path}): give this daemon another --node-id`);
    }
    const reasons = [...hostConflicts(claim, liveClaims(dir, name)), ...(claim.cidr ? routeConflicts(claim.cidr, claim.tag, hostRoutes()) : [])];
    if (reasons.length) {
      closeSync(fd);
      throw new HostTaken(reasons.join('\n'));
    }
    ftruncateSync(fd, 0);
    writeSync(fd, `${JSON.stringify(claim)}\n`, 0);
    return { claim, release: () => closeSync(fd) };
  } finally {
    closeSync(gate);
  }
}
