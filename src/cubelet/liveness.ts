// The liveness and OOM watch, every second over the running and paused sandboxes: a dead init (an
// ns sandbox's, a microVM's QEMU) or a running microVM whose guest agent does not answer ends the
// sandbox with its reason; OOM kills inside are noted. One small read per sandbox a second (the
// memory cgroup's counter), never a walk of its files; an agent is asked every AGENT_PROBE_MS.
import type { Logger } from 'pino';
import type { RuntimeDriver } from '../runtime/types.js';
import { agentSilence, initDeath } from './deaths.js';
import { AGENT_ANSWER_MS } from './readopt.js';
import type { Entry } from './sandbox-calls.js';

/** How often a running sandbox's agent (a microVM's guest agent) is asked whether it answers. */
export const AGENT_PROBE_MS = 5_000;

export interface LivenessActions {
  driver: RuntimeDriver;
  log: Logger;
  /** The sandbox is dead: why. */
  died(entry: Entry, death: { reason: ReturnType<typeof initDeath>['reason']; message: string }): void;
  /** Processes of the sandbox were OOM-killed. */
  oom(entry: Entry, message: string): void;
}

/** One round of the watch; the probes of agents run together and the round ends when they answered or timed out. */
export async function watchLiveness(entries: Iterable<Entry>, a: LivenessActions): Promise<void> {
  const { driver } = a;
  const probes: Promise<void>[] = [];
  for (const entry of entries) {
    const h = entry.handle;
    if (!h || (entry.view.state !== 'running' && entry.view.state !== 'paused')) continue;
    if (!driver.alive(h)) {
      const oomKillsNow = await driver.stats(h).then(
        (s) => s.oomKills,
        () => undefined,
      );
      a.died(entry, initDeath({ runtime: entry.view.runtime, oomKillsBefore: entry.oomKills, oomKillsNow, driverReason: driver.deathReason?.(h) }));
      continue;
    }
    if (entry.view.state !== 'running') continue;
    // A pause, resume, snapshot or destroy in progress stops the guest on purpose: not asked then.
    const now = Date.now();
    if (driver.answers && !entry.op && now - (entry.probedAt ?? 0) >= AGENT_PROBE_MS) {
      entry.probedAt = now;
      probes.push(
        driver.answers(h, AGENT_ANSWER_MS).then((answered) => {
          // An operation that began meanwhile may have stopped it on purpose (the driver says
          // answered when one ran through the whole probe).
          if (answered || entry.op || entry.view.state !== 'running' || entry.handle !== h) return;
          a.died(entry, agentSilence(AGENT_ANSWER_MS, 'watch'));
        }),
      );
    }
    try {
      const kills = await driver.oomKills(h);
      if (kills > entry.oomKills) {
        const n = kills - entry.oomKills;
        entry.oomKills = kills;
        a.oom(entry, `${n} process(es) OOM-killed at the ${entry.view.spec.memoryMiB} MiB limit`);
      }
    } catch (err) {
      a.log.debug({ err, sandboxID: entry.view.sandboxID }, 'OOM counter read failed');
    }
  }
  await Promise.all(probes);
}
