// The node's network policy: one nftables table per node tag, replaced atomically.
// Sandboxes reach no host service on any host address (input dropped unless the connection
// was opened by the host: the daemon proxies into sandboxes), and no other sandbox. Their own
// connections leave through the host's NAT subject to the egress policy (src/network/egress.ts):
// the node's deny list first, then the sandbox's allowOut, denyOut and internet switch (per
// sandbox set elements keyed by its host-side link, which it cannot forge, unlike an address),
// then the node's default. Spoofed source addresses are dropped (reverse-path check). Nothing
// from outside opens a connection into a sandbox, and nothing addressed to the node's range
// leaves by another link: an address of it with no slot behind it (a slot gone, a sandbox on
// another host) is refused here instead of following the default route to a real network.
import { writeFile, readFile } from 'node:fs/promises';
import type { EgressRules } from './egress.js';
import { hostIfPattern, nftTableName } from './names.js';
import type { Spawner } from './iproute.js';

export interface NodePolicy {
  tag: string;
  cidr: string;
  allowHostAccess: boolean;
  /** Internet for sandboxes whose create did not say (E2B allow_internet_access). */
  internetDefault: boolean;
  /** The node's deny list as interval elements (destinationElements). */
  denyOut: readonly string[];
  /** Rules of sandboxes that asked for their own, by host-side link name. */
  sandboxes: ReadonlyMap<string, EgressRules>;
}

const elements = (items: readonly string[]) => (items.length ? ` elements = { ${items.join(', ')} };` : '');

/** The per-sandbox set elements of `hostIf`, by set name. */
function sandboxElements(hostIf: string, r: EgressRules): Record<string, string[]> {
  const ifname = `"${hostIf}"`;
  return {
    sb_allow: r.allowOut.map((d) => `${ifname} . ${d}`),
    sb_deny: r.denyOut.map((d) => `${ifname} . ${d}`),
    sb_internet_off: r.internet === false ? [ifname] : [],
    sb_internet_on: r.internet === true ? [ifname] : [],
  };
}

export function policyScript(p: NodePolicy): string {
  const table = nftTableName(p.tag);
  const ifs = `"${hostIfPattern(p.tag)}"`;
  const sets: Record<string, string[]> = { sb_allow: [], sb_deny: [], sb_internet_off: [], sb_internet_on: [] };
  for (const [hostIf, r] of p.sandboxes) for (const [set, items] of Object.entries(sandboxElements(hostIf, r))) sets[set]!.push(...items);
  const input = p.allowHostAccess
    ? []
    : [
        `iifname ${ifs} ct state established,related accept`,
        // Lets a sandbox check its link (ping the gateway); nothing listens on ICMP.
        `iifname ${ifs} icmp type echo-request accept`,
        `iifname ${ifs} counter drop`,
      ];
  return [
    // Declaring then deleting makes the replacement work whether or not the table exists;
    // nft -f applies the whole script as one transaction.
    `table inet ${table}`,
    `delete table inet ${table}`,
    `table inet ${table} {`,
    `  set deny_out { type ipv4_addr; flags interval;${elements(p.denyOut)} }`,
    `  set sb_allow { type ifname . ipv4_addr; flags interval;${elements(sets.sb_allow!)} }`,
    `  set sb_deny { type ifname . ipv4_addr; flags interval;${elements(sets.sb_deny!)} }`,
    `  set sb_internet_off { type ifname;${elements(sets.sb_internet_off!)} }`,
    `  set sb_internet_on { type ifname;${elements(sets.sb_internet_on!)} }`,
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
    `    iifname ${ifs} jump egress`,
    `    oifname ${ifs} counter drop`,
    `    ip daddr ${p.cidr} counter drop`,
    '  }',
    '  chain egress {',
    '    ip daddr @deny_out counter drop',
    '    iifname . ip daddr @sb_allow accept',
    '    iifname . ip daddr @sb_deny counter drop',
    '    iifname @sb_internet_off counter drop',
    '    iifname @sb_internet_on accept',
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

/** One transaction adding (or deleting) a sandbox's own rules. */
export function sandboxRulesScript(tag: string, hostIf: string, r: EgressRules, op: 'add' | 'delete'): string {
  const table = nftTableName(tag);
  return Object.entries(sandboxElements(hostIf, r))
    .filter(([, items]) => items.length > 0)
    .map(([set, items]) => `${op} element inet ${table} ${set} { ${items.join(', ')} }\n`)
    .join('');
}

export function removeScript(tag: string): string {
  const table = nftTableName(tag);
  return `table inet ${table}\ndelete table inet ${table}\n`;
}

export async function installPolicy(sp: Spawner, p: NodePolicy): Promise<void> {
  await sp.nft(policyScript(p));
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
