// The node's isolation policy: one nftables table per node tag, replaced atomically.
// Sandboxes reach nothing but their own veth peer: no host service on any host address
// (input dropped unless the connection was opened by the host: the daemon proxies into
// sandboxes), no other sandbox and nothing routed (forward dropped both ways).
import { hostIfPattern, nftTableName } from './names.js';
import type { Spawner } from './iproute.js';

export function policyScript(tag: string, allowHostAccess: boolean): string {
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
    '  }',
    '}',
    '',
  ].join('\n');
}

export function removeScript(tag: string): string {
  const table = nftTableName(tag);
  return `table inet ${table}\ndelete table inet ${table}\n`;
}

export async function installPolicy(sp: Spawner, tag: string, allowHostAccess: boolean): Promise<void> {
  await sp.nft(policyScript(tag, allowHostAccess));
}

export async function removePolicy(sp: Spawner, tag: string): Promise<void> {
  await sp.nft(removeScript(tag));
}
