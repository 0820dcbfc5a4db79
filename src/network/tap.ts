// The TAP mode of a network slot: what a microVM needs inside its pooled netns besides the
// veth, made when the slot is made and made again when it comes back, so a create finds it
// ready and the next tenant finds nothing of the last one. The guest sits on a TAP with a fixed
// address (every guest the same, so memory snapshots restore anywhere); the netns translates it
// to the slot's address both ways, so egress policy, port routing and the E2B port proxy see
// the same sandbox address as with the ns runtime.
import type { StateExtra } from './slot-script.js';
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
 * setting, neighbour or counter of a previous QEMU survives), forwarding on, the NAT table
 * replaced in one transaction, and the netns's own conntrack table emptied (a previous guest's
 * translated connections would otherwise carry on into the next one). Idempotent: creation and
 * reset are the same script.
 */
export function tapSetupScript(): string {
  const nat = [
    `add table ip ${TAP_NAT_TABLE}`,
    `delete table ip ${TAP_NAT_TABLE}`,
    `table ip ${TAP_NAT_TABLE} {`,
    `chain pre { type nat hook prerouting priority -100; policy accept; iifname "eth0" dnat to ${GUEST_IP}; }`,
    'chain post { type nat hook postrouting priority 100; policy accept; oifname "eth0" masquerade; }',
    '}',
  ];
  return [
    `ip link del ${TAP_NAME} 2>/dev/null`,
    `ip tuntap add dev ${TAP_NAME} mode tap || exit 1`,
    `ip addr add ${GATEWAY_IP}/${TAP_PREFIX} dev ${TAP_NAME} || exit 1`,
    `ip link set ${TAP_NAME} up || exit 1`,
    'echo 1 > /proc/sys/net/ipv4/ip_forward || exit 1',
    `printf '%s\\n' ${nat.map((l) => `'${l}'`).join(' ')} | nft -f - || exit 1`,
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
    routes: [`main unicast ${net}.0/${TAP_PREFIX} via=- dev=${TAP_NAME}`, `local local ${GATEWAY_IP} via=- dev=${TAP_NAME}`, `local broadcast ${net}.255 via=- dev=${TAP_NAME}`],
  };
}

/** The slot mode a runtime's sandboxes need: a microVM's QEMU attaches to a TAP. */
export function slotModeOf(runtime: string): SlotMode {
  return runtime === 'microvm' ? 'tap' : 'ns';
}
