// Why a sandbox whose init is gone died (pure): the cubelet's liveness watch asks, then ends the
// sandbox and reports the reason (src/model/death.ts). A microVM's init is its QEMU; an ns
// sandbox's init counts as OOM-killed when its memory cgroup counted a kill since the last look
// (the kernel picks the largest process, and an idle sandbox's largest is its init).
import type { DeathReason } from '../model/death.js';

export interface InitDeath {
  /** The sandbox's runtime (ns, microvm). */
  runtime: string;
  /** OOM kills its memory cgroup counted when last looked at, and now (undefined: it could not be read). */
  oomKillsBefore: number;
  oomKillsNow: number | undefined;
  /** What the driver says of it (e.g. the guest console's last lines). */
  driverReason: string | undefined;
}

export function initDeath(d: InitDeath): { reason: DeathReason; message: string } {
  if (d.runtime === 'microvm') return { reason: 'vm_exited', message: d.driverReason ?? "the microVM's QEMU exited" };
  if (d.oomKillsNow !== undefined && d.oomKillsNow > d.oomKillsBefore)
    return { reason: 'oom', message: `sandbox init process died: its memory cgroup counted ${d.oomKillsNow - d.oomKillsBefore} OOM kill(s)` };
  return { reason: 'init_exited', message: d.driverReason ?? 'sandbox init process died' };
}

/** A microVM whose QEMU runs but whose guest agent did not answer within `deadlineMs` (pure). */
export function agentSilence(deadlineMs: number, when: 'watch' | 'restart'): { reason: DeathReason; message: string } {
  const what = `its guest agent did not answer a ping within ${deadlineMs} ms although its QEMU was running`;
  return { reason: 'agent_silent', message: when === 'restart' ? `the node restarted and did not take it back: ${what}` : `${what}: the microVM was killed` };
}
