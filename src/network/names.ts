// Kernel object names of a node's network slots (docs/architecture.md): one source for the
// agent, its policy and the tests that count leftovers.

export const NETNS_DIR = '/run/netns';
export const SYS_NET_DIR = '/sys/class/net';

export function netnsName(tag: string, index: number): string {
  return `cube-${tag}-${index}`;
}

/** `cube` + tag + index: at most 15 chars (IFNAMSIZ - 1): a 6-character tag and indices up to MAX_SLOT_INDEX (a 4-hex tag of an older data dir, likewise). */
export function hostIfName(tag: string, index: number): string {
  return `cube${tag}${index}`;
}

export function nftTableName(tag: string): string {
  return `cube_${tag}`;
}

/** nftables wildcard matching every host-side veth of the tag (the tag has a fixed width). */
export function hostIfPattern(tag: string): string {
  return `cube${tag}*`;
}

/** Slot index from a netns name of this tag, or undefined. */
export function netnsIndex(tag: string, name: string): number | undefined {
  const m = new RegExp(`^cube-${tag}-(\\d+)$`).exec(name);
  return m ? Number(m[1]) : undefined;
}

export function hostIfIndex(tag: string, name: string): number | undefined {
  const m = new RegExp(`^cube${tag}(\\d+)$`).exec(name);
  return m ? Number(m[1]) : undefined;
}
