// The node's isolation policy: one nftables table per node tag, replaced atomically.
// Sandboxes reach nothing but their own veth peer: no host service on any host address
// (input dropped unless the connection was opened by the host: the daemon proxies into
// sandboxes), no other sandbox and nothing routed (forward dropped both ways). And nothing
// addressed to the node's range leaves by another link: an address of it with no slot behind
// it (a slot gone, a sandbox on another host) is refused here instead of following the default
// route to a real network.
import { hostIfPattern, nftTableName } from './names.js';
import type { Spawner } from './iproute.js';

export function policyScript(tag: string, allowHostAccess: boolean, cidr: string): string {
  const table = nftTableName(tag);
  const ifs = `"${hostIfPattern(tag)}"`;
  const input = allowHostAccess
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
    '  chain input {',
    '    type filter hook input priority -10; policy accept;',
    ...input.map((r) => `    ${r}`),
    '  }',
    '  chain forward {',
    '    type filter hook forward priority -10; policy accept;',
    `    iifname ${ifs} counter drop`,
    `    oifname ${ifs} counter drop`,
    `    ip daddr ${cidr} counter drop`,
    '  }',
    '  chain output {',
    '    type filter hook output priority -10; policy accept;',
    `    ip daddr ${cidr} oifname != ${ifs} counter reject`,
    '  }',
    '}',
    '',
  ].join('\n');
}

export function removeScript(tag: string): string {
  const table = nftTableName(tag);
  return `table inet ${table}\ndelete table inet ${table}\n`;
}

export async function installPolicy(sp: Spawner, tag: string, allowHostAccess: boolean, cidr: string): Promise<void> {
  await sp.nft(policyScript(tag, allowHostAccess, cidr));
}

export async function removePolicy(sp: Spawner, tag: string): Promise<void> {
  await sp.nft(removeScript(tag));
}
