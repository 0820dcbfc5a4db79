// The node's own figures for its node view and the console: the host's memory and disk (sampled
// at most twice a second), the host's and the sandboxes' CPU use (smoothed), and each live
// sandbox's use (its cgroup counters and link bytes).
import type { Logger } from 'pino';
import type { StoreView } from '../model/node.js';
import type { SandboxUsage, SandboxView } from '../model/sandbox.js';
import { linkBytes } from '../network/host-scan.js';
import type { NetSlot } from '../network/types.js';
import type { RuntimeDriver, SandboxHandle } from '../runtime/types.js';
import { cpuUtilPercent, sandboxCpuPercent, type CpuTimes, type HostReadings } from './host-metrics.js';
import { usageOf, type CpuReading } from './usage.js';

const CPU_SMOOTHING_MS = 30_000;
/**
 * How old the host's memory and disk figures of a node view may be. Every create reads the view:
 * re-reading /proc/meminfo and statfs-ing the data dir and the store each time was the largest
 * item of cubed's create path in --cpu-prof of bench/e2b-rollouts.ts at c=20; one sample shared for
 * half a second bounds it at 2 a second (statfs calls of a 320-rollout run 690 -> 68). The same
 * bound as the CPU samples below, and under the store's own USAGE_MAX_AGE_MS.
 */
const HOST_SAMPLE_MAX_AGE_MS = 500;

export interface HostSample {
  memAvailableMiB: number;
  memTotalMiB: number;
  diskUsedPercent: number;
  store?: StoreView;
}

/** What sandboxUsage() reads of a sandbox (the cubelet's entry); it keeps the reading for the next call. */
export interface UsageSubject {
  view: SandboxView;
  handle?: SandboxHandle;
  slot?: NetSlot;
  cpuReading?: CpuReading;
}

export class NodeMetrics {
  private cpuPrev: CpuTimes;
  private cpuUtil = 0;
  private cpuSampled = false;
  private cpuAt = Date.now();
  /** The sandboxes' CPU time (driver.cpuUsageUsec) at cpuAt, and their smoothed use in percent of the node's CPUs. */
  private sandboxCpuPrev: number | undefined;
  private sandboxCpuUtil: number | undefined;
  /** The last host sample (hostSample()), shared by the views read while it is young. */
  private hostCache?: { at: number; sample: Promise<HostSample> };

  constructor(private readonly o: { dataDir: string; driver: RuntimeDriver; host: HostReadings }) {
    this.cpuPrev = o.host.cpuTimes();
  }

  /**
   * Live use of every running and paused sandbox: its cgroup counters (no walk of its files: the
   * disk figure is the quota group's, as sampled), its link's byte counters. A sandbox whose
   * counters cannot be read (going away) is left out.
   */
  async sandboxUsage(entries: UsageSubject[]): Promise<SandboxUsage[]> {
    const live = entries.filter((e) => e.handle && (e.view.state === 'running' || e.view.state === 'paused'));
    const out = await Promise.all(
      live.map(async (e) => {
        try {
          const [s, link] = await Promise.all([this.o.driver.stats(e.handle!), e.slot ? linkBytes(e.slot.hostIf) : undefined]);
          const cur = { at: Date.now(), cpuUsageNs: s.cpuUsageNs };
          const u = usageOf(e.view, s, cur, e.cpuReading, link);
          e.cpuReading = cur;
          return u;
        } catch {
          return undefined;
        }
      }),
    );
    return out.filter((u): u is SandboxUsage => u !== undefined);
  }

  // Disk use of the running and paused sandboxes (their writable layers' quota groups), published
  // when it moved by at least 1 MiB or 1% of the sandbox's limit, so a busy writer is not an event a second.
  async sampleDisk<E extends UsageSubject>(entries: E[], o: { held: (sandboxID: string) => boolean; publish: (e: E) => void; log: Logger }): Promise<void> {
    const live = entries.filter((e) => e.handle && (e.view.state === 'running' || e.view.state === 'paused'));
    if (!live.length || !this.o.driver.storage) return;
    try {
      // Read by the ids the runtime knows them by (a claimed warm sandbox's is not its public one).
      const used = await this.o.driver.storage.diskUsed(live.map((e) => e.handle!.sandboxID));
      for (const e of live) {
        const bytes = used.get(e.handle!.sandboxID);
        if (bytes === undefined || !o.held(e.view.sandboxID)) continue;
        const step = Math.max(1024 ** 2, (e.view.spec.diskGiB * 1024 ** 3) / 100);
        if (e.view.diskUsedBytes !== undefined && Math.abs(bytes - e.view.diskUsedBytes) < step) continue;
        e.view.diskUsedBytes = bytes;
        o.publish(e);
      }
    } catch (err) {
      o.log.debug({ err }, 'disk use sample failed');
    }
  }

  /** Memory and disk of the host, read at most every HOST_SAMPLE_MAX_AGE_MS (a failed read is not kept). */
  hostSample(): Promise<HostSample> {
    const now = Date.now();
    if (this.hostCache && now - this.hostCache.at < HOST_SAMPLE_MAX_AGE_MS) return this.hostCache.sample;
    const { dataDir, driver, host: readings } = this.o;
    const sample = (async (): Promise<HostSample> => {
      const mem = readings.meminfo();
      const [disk, store] = await Promise.all([readings.diskUsedPercent(dataDir), driver.storage?.usage()]);
      return { memAvailableMiB: mem.availableMiB, memTotalMiB: mem.totalMiB, diskUsedPercent: disk, ...(store ? { store } : {}) };
    })();
    const host = { at: now, sample };
    this.hostCache = host;
    sample.catch(() => {
      if (this.hostCache === host) this.hostCache = undefined;
    });
    return sample;
  }

  // CPU utilisation of the host and of the node's sandboxes (their cgroups' CPU time over the
  // node's CPUs), smoothed with a 30 s time constant (like a load average): the cpu filter gates
  // placement on the sandboxes' figure, and a half-second spike (a burst of creates) must not
  // take the node out of scheduling. Samples come at least half a second apart.
  sampleCpu(cpus: number): { host: number; sandboxes: number | undefined } {
    const now = Date.now();
    const dt = now - this.cpuAt;
    if (dt < 500) return { host: this.cpuUtil, sandboxes: this.sandboxCpuUtil };
    const cur = this.o.host.cpuTimes();
    const alpha = this.cpuSampled ? 1 - Math.exp(-dt / CPU_SMOOTHING_MS) : 1;
    this.cpuUtil += alpha * (cpuUtilPercent(this.cpuPrev, cur) - this.cpuUtil);
    const used = this.o.driver.cpuUsageUsec?.();
    if (used !== undefined && this.sandboxCpuPrev !== undefined) {
      const sample = sandboxCpuPercent(used - this.sandboxCpuPrev, dt, cpus);
      this.sandboxCpuUtil = this.sandboxCpuUtil === undefined ? sample : this.sandboxCpuUtil + alpha * (sample - this.sandboxCpuUtil);
    }
    this.sandboxCpuPrev = used;
    this.cpuSampled = true;
    this.cpuPrev = cur;
    this.cpuAt = now;
    return { host: this.cpuUtil, sandboxes: this.sandboxCpuUtil };
  }
}
