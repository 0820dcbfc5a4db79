// The TAP mode of a network slot: what a microVM needs inside its pooled netns besides the
// veth, made when the slot is made and made again when it comes back, so a create finds it
// ready and the next tenant finds nothing of the last one. The guest sits on a TAP with a fixed
// address (every guest the same, so memory snapshots restore anywhere); the netns translates it
// to the slot's address both ways, so egress policy, port routing and the E2B port proxy see
// the same sandbox address as with the ns runtime.
import type { StateExtra } from './slot-script.js';
import type { ConnLimits } from './nft.js';
import type { SlotMode } from './types.js';

/** The TAP device inside the slot's netns (QEMU attaches to it by name). */
export const TAP_NAME = 'cubetap0';
/** The guest's own address on the TAP, and the netns's end of it (the guest's gateway). */
export const GUEST_IP = '10.0.2.15';
export const GATEWAY_IP = '10.0.2.2';
export const TAP_PREFIX = 24;
/** The netns's nftables table that translates between the guest's address and the slot's. */
export const TAP_NAT_TABLE = 'cube_vm';

/**
 * Run inside the slot's netns (sh, as root): the TAP made anew (a fresh device: no queue, offload
 * setting, neighbour or counter of a previous QEMU survives), forwarding on, the netns's tables
 * replaced in one transaction, and the netns's own conntrack table emptied (a previous guest's
 * translated connections would otherwise carry on into the next one). Idempotent: creation and
 * reset are the same script.
 *
 * Root in the guest writes any frame to the TAP, and the netns's neighbour and conntrack tables
 * count in the host's (gc_thresh3 and nf_conntrack_max are host-wide): 548 forged ARP took the
 * global neighbour table from 4 to 551 of its 1,024, 300 forged IPv6 solicitations from 75 to 327,
 * and 20,000 conntrack entries were made in 0.5 s. So, as for ns slots on the host's side
 * (nft.ts): only ARP from the guest's own address is heard, IPv6 is off on the TAP (the
 * kernel drops every IPv6 packet from it before neighbour discovery sees it), a guest sends only from its address and reaches no other
 * neighbour than its gateway, and its new connections are held to `limits` (the same
 * conntrack_max_per_sandbox and new_connections_per_sec as an ns sandbox: they are counted again
 * on the host, by the slot's address, after the NAT here).
 */
export function tapSetupScript(limits: ConnLimits): string {
  const tap = `iifname "${TAP_NAME}"`;
  const net = `${GATEWAY_IP.split('.').slice(0, 3).join('.')}.0/${TAP_PREFIX}`;
  const nft = [
    `add table ip ${TAP_NAT_TABLE}`,
    `delete table ip ${TAP_NAT_TABLE}`,
    `add table arp ${TAP_NAT_TABLE}`,
    `delete table arp ${TAP_NAT_TABLE}`,
    `table ip ${TAP_NAT_TABLE} {`,
    `chain pre { type nat hook prerouting priority -100; policy accept; iifname "eth0" dnat to ${GUEST_IP}; }`,
    'chain post { type nat hook postrouting priority 100; policy accept; oifname "eth0" masquerade; }',
    // After conntrack (-200), before the NAT: a dropped packet's entry is never confirmed.
    `chain guard { type filter hook prerouting priority -150; policy accept; ${tap} ip saddr != ${GUEST_IP} counter drop; ${tap} ip daddr ${net} ip daddr != ${GATEWAY_IP} counter drop; ${tap} ct state new limit rate over ${limits.newPerSec}/second burst ${limits.newPerSec} packets counter drop; }`,
    `chain input { type filter hook input priority 0; policy accept; ${tap} icmp type echo-request accept; ${tap} counter drop; }`,
    `chain forward { type filter hook forward priority 0; policy accept; ${tap} oifname != "eth0" counter drop; ${tap} ct state new ct count over ${limits.maxConnections} counter drop; }`,
    '}',
    `table arp ${TAP_NAT_TABLE} {`,
    `chain input { type filter hook input priority -10; policy accept; ${tap} arp saddr ip != ${GUEST_IP} counter drop; }`,
    '}',
  ];
  return [
    `ip link del ${TAP_NAME} 2>/dev/null`,
    `ip tuntap add dev ${TAP_NAME} mode tap || exit 1`,
    // No IPv6 on the guest's link (a kernel without IPv6 has no such file, and nothing to forge into).
    `if [ -d /proc/sys/net/ipv6/conf/${TAP_NAME} ]; then echo 1 > /proc/sys/net/ipv6/conf/${TAP_NAME}/disable_ipv6 || exit 1; fi`,
    `ip addr add ${GATEWAY_IP}/${TAP_PREFIX} dev ${TAP_NAME} || exit 1`,
    `ip link set ${TAP_NAME} up || exit 1`,
    'echo 1 > /proc/sys/net/ipv4/ip_forward || exit 1',
    `printf '%s\\n' ${nft.map((l) => `'${l}'`).join(' ')} | nft -f - || exit 1`,
    // -F exits 0 with an empty table; the tool is optional (install.sh installs it).
    'if command -v conntrack >/dev/null; then conntrack -F 2>/dev/null; fi',
    'exit 0',
  ].join('\n');
}

/** The TAP's share of a clean slot's state (slot-script.ts expectedState), as `ip -4 -j` reports it. */
export function tapExpectedState(): StateExtra {
  const net = GATEWAY_IP.split('.').slice(0, 3).join('.');
  return {
    links: [`${TAP_NAME} mtu=1500 up=true`],
    addrs: [`${TAP_NAME} ${GATEWAY_IP}/${TAP_PREFIX}`],
    routes: [
      `main unicast ${net}.0/${TAP_PREFIX} via=- dev=${TAP_NAME}`,
      `local local ${GATEWAY_IP} via=- dev=${TAP_NAME}`,
      `local broadcast ${net}.255 via=- dev=${TAP_NAME}`,
    ],
  };
}

/** The slot mode a runtime's sandboxes need: a microVM's QEMU attaches to a TAP. */
export function slotModeOf(runtime: string): SlotMode {
  return runtime === 'microvm' ? 'tap' : 'ns';
}
