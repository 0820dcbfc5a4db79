// Egress policy: which destinations a sandbox's own connections may reach through the host's
// NAT. The node sets a default (internet on or off) and a deny list no sandbox passes (private
// ranges and link-local by default: the host's LAN and cloud metadata); a sandbox may narrow it
// (E2B allow_internet_access=false, network.denyOut) or open single destinations back up
// (network.allowOut wins over its own denyOut and over internet=false, never over the node's
// deny list). Destinations are IPv4 addresses or CIDRs, merged into disjoint ranges because
// nftables interval sets refuse overlapping elements. Pure.
import { CubeError } from '../errors.js';
import type { EgressRequest } from '../model/sandbox.js';

/** A sandbox's resolved rules, as nftables set elements (ranges `a.b.c.d-e.f.g.h` or single addresses). */
export interface EgressRules {
  /** undefined: the node default applies. */
  internet?: boolean;
  allowOut: string[];
  denyOut: string[];
}

type Range = [number, number];

const IPV4 = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/;

function ipToInt(ip: string): number | undefined {
  const m = IPV4.exec(ip);
  if (!m) return undefined;
  const parts = m.slice(1).map(Number);
  if (parts.some((p) => p > 255)) return undefined;
  return ((parts[0]! << 24) >>> 0) + (parts[1]! << 16) + (parts[2]! << 8) + parts[3]!;
}

function intToIp(n: number): string {
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');
}

/** `1.2.3.4` or `10.0.0.0/8` as an inclusive range; a CubeError naming `field` otherwise. */
export function parseDestination(s: string, field: string): Range {
  const [ip, bits, extra] = String(s).trim().split('/');
  const base = ipToInt(ip ?? '');
  const prefix = bits === undefined ? 32 : /^\d{1,2}$/.test(bits) ? Number(bits) : NaN;
  if (base === undefined || extra !== undefined || !(prefix >= 0 && prefix <= 32)) {
    const hint = /[a-z]/i.test(s) ? ' (domain names are not supported: give IPv4 addresses or CIDRs)' : '';
    throw new CubeError('BAD_REQUEST', `${field}: "${s}" is not an IPv4 address or CIDR${hint}`);
  }
  const size = 2 ** (32 - prefix);
  const start = base - (base % size);
  return [start, start + size - 1];
}

/** Sorted, merged, disjoint ranges (adjacent ones joined). */
function merge(ranges: Range[]): Range[] {
  const out: Range[] = [];
  for (const [a, b] of [...ranges].sort((x, y) => x[0] - y[0])) {
    const last = out.at(-1);
    if (last && a <= last[1] + 1) last[1] = Math.max(last[1], b);
    else out.push([a, b]);
  }
  return out;
}

function render(ranges: Range[]): string[] {
  return ranges.map(([a, b]) => (a === b ? intToIp(a) : `${intToIp(a)}-${intToIp(b)}`));
}

/** An egress request from its three parts, empty lists left out; undefined when nothing is asked (pure). */
export function egressRequest(
  allowInternet: boolean | undefined,
  allowOut: readonly string[] | undefined,
  denyOut: readonly string[] | undefined,
): EgressRequest | undefined {
  const e: EgressRequest = {
    ...(allowInternet !== undefined ? { allowInternet } : {}),
    ...(allowOut?.length ? { allowOut: [...allowOut] } : {}),
    ...(denyOut?.length ? { denyOut: [...denyOut] } : {}),
  };
  return Object.keys(e).length ? e : undefined;
}

/** One line for events and logs: `internet off, allowOut 1.1.1.1, denyOut 0.0.0.0-255.255.255.255`. */
export function describeEgress(r: EgressRules): string {
  const parts = [
    ...(r.internet === undefined ? [] : [`internet ${r.internet ? 'on' : 'off'}`]),
    ...(r.allowOut.length ? [`allowOut ${r.allowOut.join(' ')}`] : []),
    ...(r.denyOut.length ? [`denyOut ${r.denyOut.join(' ')}`] : []),
  ];
  return parts.join(', ');
}

/** A destination list as nftables interval elements, validated and merged. */
export function destinationElements(list: readonly string[], field: string): string[] {
  return render(merge(list.map((s) => parseDestination(s, field))));
}

/**
 * A create's request against the node's deny list: the elements to install, or a 400 when an
 * allowOut entry lies inside the node's deny list (it could never be reached: say so now).
 */
export function resolveEgress(req: EgressRequest | undefined, nodeDenyOut: readonly string[]): EgressRules | undefined {
  if (!req || (req.allowInternet === undefined && !req.allowOut?.length && !req.denyOut?.length)) return undefined;
  const allow = merge((req.allowOut ?? []).map((s) => parseDestination(s, 'network.allowOut')));
  const nodeDeny = nodeDenyOut.map((s) => [s, parseDestination(s, 'deny_out')] as const);
  for (const [a, b] of allow) {
    const hit = nodeDeny.find(([, [c, d]]) => a <= d && c <= b);
    if (hit) {
      throw new CubeError(
        'BAD_REQUEST',
        `network.allowOut ${render([[a, b]])[0]} overlaps the node's deny_out ${hit[0]}: no sandbox on this node may reach it (ask the operator to change plugins."io.cubelet.internal.v1.network".deny_out)`,
      );
    }
  }
  return {
    ...(req.allowInternet !== undefined ? { internet: req.allowInternet } : {}),
    allowOut: render(allow),
    denyOut: destinationElements(req.denyOut ?? [], 'network.denyOut'),
  };
}
