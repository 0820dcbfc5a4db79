// The node's network policy: one nftables table per node tag, replaced atomically.
// Sandboxes reach no host service on any host address (input dropped unless the connection
// was opened by the host: the daemon proxies into sandboxes), and no other sandbox. Their own
// connections leave through the host's NAT subject to the egress policy (src/network/egress.ts):
// the node's deny list first, then the sandbox's own rules, then the node's default. A
// sandbox's rules live in a chain of its slot (`sb_<index>`), reached through a verdict map
// keyed by its host-side link (which it cannot forge, unlike an address), and are replaced or
// flushed whole: nothing is ever deleted from a large set, which costs the kernel a rebuild per
// element (200 ms for 24 elements among 500 measured here). Spoofed source addresses are
// dropped (reverse-path check). Nothing from outside opens a connection into a sandbox, and
// nothing addressed to the node's range leaves by another link: an address of it with no slot
// behind it (a slot gone, a sandbox on another host) is refused here instead of following the
// default route to a real network.
import { writeFile, readFile } from 'node:fs/promises';
import type { EgressRules } from './egress.js';
import { hostIfName, hostIfPattern, nftTableName } from './names.js';
import type { Spawner } from './iproute.js';

export interface NodePolicy {
  tag: string;
  cidr: string;
  allowHostAccess: boolean;
  /** Internet for sandboxes whose create did not say (E2B allow_internet_access). */
  internetDefault: boolean;
  /** The node's deny list as interval elements (destinationElements). */
  denyOut: readonly string[];
  /** The host's own networks (hostNetworks), denied like deny_out; empty when allowed. */
  hostNets: readonly string[];
  connLimits: ConnLimits;
  /** Rules of sandboxes that asked for their own, by slot index. */
  sandboxes: ReadonlyMap<number, EgressRules>;
}

/**
 * Per sandbox (by source address, which the reverse-path check makes its own): connections the
 * host's conntrack table holds for it at once, and new connections per second (burst: one
 * second's worth). The conntrack table is host-wide (nf_conntrack_max): one sandbox made 3,000
 * entries in 0.11 s without these.
 */
export interface ConnLimits {
  maxConnections: number;
  newPerSec: number;
}

const elements = (items: readonly string[]) => (items.length ? ` elements = { ${items.join(', ')} };` : '');

/** The slot chain's rules: allowOut, then denyOut, then the internet switch; nothing left = the node default. */
function sandboxRules(r: EgressRules): string[] {
  return [
    ...(r.allowOut.length ? [`ip daddr { ${r.allowOut.join(', ')} } accept`] : []),
    ...(r.denyOut.length ? [`ip daddr { ${r.denyOut.join(', ')} } counter drop`] : []),
    ...(r.internet === true ? ['accept'] : r.internet === false ? ['counter drop'] : []),
  ];
}

const slotChain = (index: number) => `sb_${index}`;
const jump = (tag: string, index: number) => `"${hostIfName(tag, index)}" : jump ${slotChain(index)}`;

export function policyScript(p: NodePolicy): string {
  const table = nftTableName(p.tag);
  const ifs = `"${hostIfPattern(p.tag)}"`;
  // Sandboxes have no IPv6, but the host's end of each link has a link-local address: IPv6 from a
  // slot link would let root inside (with NET_RAW) make the host learn forged neighbours (the
  // IPv6 neighbour table is as host-wide as the ARP one; test/hostile/link-layer-v6.test.ts).
  const input = [
    `iifname ${ifs} meta nfproto ipv6 counter drop`,
    ...(p.allowHostAccess
      ? []
      : [
          `iifname ${ifs} ct state established,related accept`,
          // Lets a sandbox check its link (ping the gateway); nothing listens on ICMP.
          `iifname ${ifs} icmp type echo-request accept`,
          `iifname ${ifs} counter drop`,
        ]),
  ];
  const slots = [...p.sandboxes.entries()].sort((a, b) => a[0] - b[0]);
  return [
    // Declaring then deleting makes the replacement work whether or not the table exists;
    // nft -f applies the whole script as one transaction.
    `table inet ${table}`,
    `delete table inet ${table}`,
    `table inet ${table} {`,
    `  set deny_out { type ipv4_addr; flags interval;${elements(p.denyOut)} }`,
    `  set host_nets { type ipv4_addr; flags interval;${elements(p.hostNets)} }`,
    `  map sb_jump { type ifname : verdict;${elements(slots.map(([i]) => jump(p.tag, i)))} }`,
    // Keyed by source address, filled as sandboxes connect: no element per create.
    '  set sb_conns { type ipv4_addr; size 65535; flags dynamic; }',
    '  set sb_rate { type ipv4_addr; size 65535; flags dynamic,timeout; timeout 1m; }',
    ...slots.flatMap(([i, r]) => [`  chain ${slotChain(i)} {`, ...sandboxRules(r).map((x) => `    ${x}`), '  }']),
    '  chain input {',
    '    type filter hook input priority -10; policy accept;',
    ...input.map((r) => `    ${r}`),
    '  }',
    '  chain forward {',
    '    type filter hook forward priority -10; policy accept;',
    `    oifname ${ifs} ct state established,related accept`,
    `    iifname ${ifs} meta nfproto ipv6 counter drop`,
    `    iifname ${ifs} fib saddr . iif oif missing counter drop`,
    `    iifname ${ifs} oifname ${ifs} counter drop`,
    `    iifname ${ifs} ip daddr ${p.cidr} counter drop`,
    `    iifname ${ifs} ct state new update @sb_rate { ip saddr limit rate over ${p.connLimits.newPerSec}/second burst ${p.connLimits.newPerSec} packets } counter drop`,
    `    iifname ${ifs} ct state new add @sb_conns { ip saddr ct count over ${p.connLimits.maxConnections} } counter drop`,
    `    iifname ${ifs} jump egress`,
    `    oifname ${ifs} counter drop`,
    `    ip daddr ${p.cidr} counter drop`,
    '  }',
    '  chain egress {',
    '    ip daddr @deny_out counter drop',
    '    ip daddr @host_nets counter drop',
    '    iifname vmap @sb_jump',
    p.internetDefault ? '    accept' : '    counter drop',
    '  }',
    '  chain output {',
    '    type filter hook output priority -10; policy accept;',
    `    ip daddr ${p.cidr} oifname != ${ifs} counter reject`,
    '  }',
    '  chain postrouting {',
    '    type nat hook postrouting priority srcnat; policy accept;',
    `    ip saddr ${p.cidr} oifname != ${ifs} masquerade`,
    '  }',
    '}',
    '',
  ].join('\n');
}

/**
 * One transaction replacing the rules of slot `index` (`undefined`: none, the node default
 * applies). The slot's chain and map entry are created on first use and kept (empty) after.
 */
export function sandboxRulesScript(tag: string, index: number, r: EgressRules | undefined): string {
  const table = nftTableName(tag);
  const chain = slotChain(index);
  return [
    `add chain inet ${table} ${chain}`,
    `add element inet ${table} sb_jump { ${jump(tag, index)} }`,
    `flush chain inet ${table} ${chain}`,
    ...(r ? sandboxRules(r).map((x) => `add rule inet ${table} ${chain} ${x}`) : []),
    '',
  ].join('\n');
}

/**
 * The link filter, a table of family `arp`: on a slot's host-side link only ARP whose sender
 * address is the slot's own passes. Root inside a sandbox keeps raw sockets when it asks for
 * them; without this, a forged ARP request makes the host learn a neighbour entry for any
 * address (the neighbour table is host-wide, and its gc_thresh3 limit then cuts every sandbox's
 * network). The set holds a (link, address) pair per slot ever made, added with the slot's
 * creation batch (one nft call per batch, off the create path); pairs are fixed by the slot
 * index, so they are never deleted (which would rebuild the set per element).
 */
export function linkFilterScript(tag: string, slots: readonly { hostIf: string; sandboxIp: string }[]): string {
  const table = nftTableName(tag);
  return [
    `table arp ${table}`,
    `delete table arp ${table}`,
    `table arp ${table} {`,
    `  set slot_addr { type ifname . ipv4_addr;${elements(slots.map(linkPair))} }`,
    '  chain input {',
    '    type filter hook input priority -10; policy accept;',
    `    iifname "${hostIfPattern(tag)}" iifname . arp saddr ip != @slot_addr counter drop`,
    '  }',
    '}',
    '',
  ].join('\n');
}

const linkPair = (s: { hostIf: string; sandboxIp: string }) => `"${s.hostIf}" . ${s.sandboxIp}`;

export function linkElementsScript(tag: string, slots: readonly { hostIf: string; sandboxIp: string }[]): string {
  return slots.length ? `add element arp ${nftTableName(tag)} slot_addr { ${slots.map(linkPair).join(', ')} }\n` : '';
}

export function removeScript(tag: string): string {
  const table = nftTableName(tag);
  return `table inet ${table}\ndelete table inet ${table}\ntable arp ${table}\ndelete table arp ${table}\n`;
}

export async function removePolicy(sp: Spawner, tag: string): Promise<void> {
  await sp.nft(removeScript(tag));
}

const IP_FORWARD = '/proc/sys/net/ipv4/ip_forward';

/**
 * Sandboxes' connections are routed through the host, which needs IPv4 forwarding (as for
 * Docker). Turned on when off, never turned back off: other software may rely on it by then.
 * Returns whether it changed.
 */
export async function enableIpForwarding(): Promise<boolean> {
  if ((await readFile(IP_FORWARD, 'utf8')).trim() === '1') return false;
  await writeFile(IP_FORWARD, '1\n');
  return true;
}
