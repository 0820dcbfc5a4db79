// Read-only looks at the host through /proc, /sys and /run: no process spawned.
import { readdir, readFile } from 'node:fs/promises';
import { NETNS_DIR, SYS_NET_DIR, hostIfIndex, netnsIndex } from './names.js';

async function names(dir: string): Promise<string[]> {
  try {
    return await readdir(dir);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw e;
  }
}

/** Slot indices of this tag that have a netns under /run/netns. */
export async function netnsIndices(tag: string): Promise<Set<number>> {
  const out = new Set<number>();
  for (const n of await names(NETNS_DIR)) {
    const i = netnsIndex(tag, n);
    if (i !== undefined) out.add(i);
  }
  return out;
}

/** Slot indices of this tag whose host-side veth exists in the root netns. */
export async function hostIfIndices(tag: string): Promise<Set<number>> {
  const out = new Set<number>();
  for (const n of await names(SYS_NET_DIR)) {
    const i = hostIfIndex(tag, n);
    if (i !== undefined) out.add(i);
  }
  return out;
}

/**
 * A reader whose callers share reads: each caller gets a read that starts after its call (so it
 * sees everything that happened before), and every caller that arrives before that read starts
 * gets the same one. At most one read runs at a time; callers arriving during it share the next.
 */
export function sharedReads<T>(read: () => Promise<T>): () => Promise<T> {
  let running: Promise<unknown> = Promise.resolve();
  let next: Promise<T> | undefined;
  return () => {
    next ??= running
      .then(
        () => undefined,
        () => undefined,
      )
      .then(() => {
        next = undefined;
        const r = read();
        running = r;
        return r;
      });
    return next;
  };
}

// The kernel formats the whole table for each read (ct_get_next and vsnprintf were 3.5% of the
// daemon tree's CPU at c=20 in `perf record` of bench/e2b-rollouts.ts, one read per released
// slot): releases that arrive together share one read.
const conntrackTable = sharedReads(() => readFile('/proc/net/nf_conntrack', 'utf8'));

/** Whether the host's connection tracking table holds an entry to or from `ip` (read after the call). */
export async function conntrackMentions(ip: string): Promise<boolean> {
  try {
    const text = await conntrackTable();
    return text.includes(`src=${ip} `) || text.includes(`dst=${ip} `);
  } catch {
    return false; // conntrack not loaded: nothing to flush
  }
}

/** MAC addresses the host's ARP table holds on `dev`, by IP. */
export async function arpEntries(dev: string): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  const text = await readFile('/proc/net/arp', 'utf8').catch(() => '');
  for (const line of text.split('\n').slice(1)) {
    const f = line.trim().split(/\s+/);
    if (f.length >= 6 && f[5] === dev) out.set(f[0]!, f[3]!);
  }
  return out;
}

/**
 * The host's own IPv4 networks, as a sandbox must not reach them: every connected subnet and
 * every gateway of the routing table (`/proc/net/route`), leaving out loopback and `cube*`
 * links (sandbox slots of this and other nodes, which their own rules govern, and test
 * stand-ins for the internet). Without this, a sandbox's traffic to the host's LAN (other
 * machines, the router's admin page) is forwarded and NATed like internet traffic. Pure.
 */
export function hostNetworksOf(routeTable: string): string[] {
  const out = new Set<string>();
  const ipOf = (hex: string) => [0, 1, 2, 3].map((i) => (parseInt(hex, 16) >>> (8 * i)) & 0xff).join('.');
  for (const line of routeTable.split('\n').slice(1)) {
    const f = line.trim().split(/\s+/);
    if (f.length < 8) continue;
    const [iface, dest, gw, flags, , , , mask] = f as [string, string, string, string, string, string, string, string];
    if (iface === 'lo' || iface === '*' || iface.startsWith('cube')) continue;
    const up = (parseInt(flags, 16) & 0x1) !== 0;
    if (!up) continue;
    if (parseInt(gw, 16) !== 0) out.add(ipOf(gw));
    if (parseInt(gw, 16) === 0 && parseInt(mask, 16) !== 0) {
      const bits = (parseInt(mask, 16) >>> 0)
        .toString(2)
        .split('')
        .filter((b) => b === '1').length;
      out.add(`${ipOf(dest)}/${bits}`);
    }
  }
  return [...out].sort();
}

export async function hostNetworks(): Promise<string[]> {
  return hostNetworksOf(await readFile('/proc/net/route', 'utf8').catch(() => ''));
}

/** A host link's byte counters (/sys/class/net/IF/statistics), or undefined when it has none. */
export async function linkBytes(ifName: string): Promise<{ rx: number; tx: number } | undefined> {
  try {
    const [rx, tx] = await Promise.all(['rx_bytes', 'tx_bytes'].map((f) => readFile(`${SYS_NET_DIR}/${ifName}/statistics/${f}`, 'utf8')));
    return { rx: Number(rx), tx: Number(tx) };
  } catch {
    return undefined;
  }
}
