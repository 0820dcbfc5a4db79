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

/** Whether the host's connection tracking table holds an entry to or from `ip`. */
export async function conntrackMentions(ip: string): Promise<boolean> {
  try {
    const text = await readFile('/proc/net/nf_conntrack', 'utf8');
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
