// What the kernel is told to build a slot and what a clean slot looks like. Pure: the agent
// feeds these lines to `ip -b` and compares what `ip -j` reports with expectedState().
import { SLOT_PREFIX, type SlotAddresses } from './ipam.js';

export interface SlotNames extends SlotAddresses {
  netns: string;
  hostIf: string;
}

/** Root-netns part: the peer `eth0` is created inside the netns (moving a link costs 16 ms). */
export function rootCreateLines(s: SlotNames): string[] {
  return [
    `netns add ${s.netns}`,
    `link add ${s.hostIf} type veth peer name eth0 netns ${s.netns}`,
    `addr add ${s.hostIp}/${s.prefixLen} dev ${s.hostIf}`,
    `link set ${s.hostIf} up`,
  ];
}

/** Inside-the-netns part, run with `ip -n <netns>`. */
export function innerCreateLines(s: SlotNames): string[] {
  return ['link set lo up', `addr add ${s.sandboxIp}/${s.prefixLen} dev eth0`, 'link set eth0 up', `route add default via ${s.hostIp}`];
}

/** Removal: deleting the netns takes its veth pair with it, in the kernel's batched cleanup. */
export function removeLines(netns: readonly string[]): string[] {
  return netns.map((n) => `netns del ${n}`);
}

/**
 * Reset of a returned slot, run with `ip -4 -j -n <netns>`: forget the old tenant's
 * neighbours, then print links, addresses, routes and rules (one JSON array per show).
 */
export const RESET_LINES = ['neigh flush all', 'link show', 'addr show', 'route show table all', 'rule show'];

interface IpLink {
  ifname: string;
  address?: string;
  mtu?: number;
  flags?: string[];
  addr_info?: { family?: string; local?: string; prefixlen?: number }[];
}
interface IpRoute {
  type?: string;
  dst: string;
  gateway?: string;
  dev?: string;
  table?: string;
}
interface IpRule {
  priority: number;
  src?: string;
  table?: string;
  [k: string]: unknown;
}

export interface SlotState {
  /** Everything a tenant could have changed (links, IPv4 addresses, routes, rules), canonical. */
  fingerprint: string;
  eth0Mac?: string;
}

function canon(links: string[], addrs: string[], routes: string[], rules: string[]): string {
  return JSON.stringify({ links: links.sort(), addrs: addrs.sort(), routes: routes.sort(), rules: rules.sort() });
}

/** Parses the four JSON arrays printed for RESET_LINES. Throws on anything else. */
export function parseSlotState(stdout: string): SlotState {
  const arrays = stdout
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l.startsWith('['))
    .map((l) => JSON.parse(l) as unknown[]);
  if (arrays.length !== 4) throw new Error(`expected 4 JSON listings from ip, got ${arrays.length}`);
  const [links, addrs, routes, rules] = arrays as [IpLink[], IpLink[], IpRoute[], IpRule[]];
  const eth0 = links.find((l) => l.ifname === 'eth0');
  return {
    fingerprint: canon(
      links.map((l) => `${l.ifname} mtu=${l.mtu} up=${(l.flags ?? []).includes('UP')}`),
      addrs.flatMap((l) => (l.addr_info ?? []).filter((a) => a.family === 'inet').map((a) => `${l.ifname} ${a.local}/${a.prefixlen}`)),
      routes.map((r) => `${r.table ?? 'main'} ${r.type ?? 'unicast'} ${r.dst} via=${r.gateway ?? '-'} dev=${r.dev ?? '-'}`),
      rules.map((r) => JSON.stringify(Object.fromEntries(Object.entries(r).sort(([a], [b]) => a.localeCompare(b))))),
    ),
    ...(eth0?.address ? { eth0Mac: eth0.address } : {}),
  };
}

type Ends = Pick<SlotAddresses, 'hostIp' | 'sandboxIp'>;

function broadcastOf(s: Ends): string {
  const parts = s.sandboxIp.split('.');
  parts[3] = String(Number(parts[3]) + 1);
  return parts.join('.');
}

function networkOf(s: Ends): string {
  const parts = s.hostIp.split('.');
  parts[3] = String(Number(parts[3]) - 1);
  return parts.join('.');
}

/** What a slot's mode adds to its state (the TAP mode's device: tap.ts tapExpectedState). */
export interface StateExtra {
  links: string[];
  addrs: string[];
  routes: string[];
}

/** The fingerprint of a slot exactly as innerCreateLines() (and its mode's setup, `extra`) leaves it. */
export function expectedState(s: Ends, extra: StateExtra = { links: [], addrs: [], routes: [] }): string {
  return canon(
    ['lo mtu=65536 up=true', 'eth0 mtu=1500 up=true', ...extra.links],
    ['lo 127.0.0.1/8', `eth0 ${s.sandboxIp}/${SLOT_PREFIX}`, ...extra.addrs],
    [
      ...extra.routes,
      `main unicast default via=${s.hostIp} dev=eth0`,
      `main unicast ${networkOf(s)}/${SLOT_PREFIX} via=- dev=eth0`,
      `local local ${s.sandboxIp} via=- dev=eth0`,
      `local broadcast ${broadcastOf(s)} via=- dev=eth0`,
      'local local 127.0.0.0/8 via=- dev=lo',
      'local local 127.0.0.1 via=- dev=lo',
      'local broadcast 127.255.255.255 via=- dev=lo',
    ],
    [
      JSON.stringify({ priority: 0, src: 'all', table: 'local' }),
      JSON.stringify({ priority: 32766, src: 'all', table: 'main' }),
      JSON.stringify({ priority: 32767, src: 'all', table: 'default' }),
    ],
  );
}
