// Every write the console makes to the admin API, each reporting its outcome in the flash
// line. Confirmation and prompts are opened by commands.ts; these run after them.
import type { EventView, NodeView, SandboxView } from '../api/types.js';
import { CubeClient, type DrainOptions } from '../cli/client.js';
import type { MasterConfig } from '../config/schema.js';
import { computeDensity, computeHeadroom, densityParamsFromConfig, headroomFromUsage, type DensityParams, type Headroom } from '../model/density.js';
import { densityText, inline, mib, ratio } from './format.js';
import { EVENT_PAGE, withOlderEvents } from './model.js';
import { flash, setUi, type ConsoleStore, type Follow } from './store.js';
import type { OutputLine } from '../cubelet/output-log.js';

export const RELEASE_RATIO_PATH = 'host.quota.paused_resource_release_ratio';

/** Where the admin API is and the key to it. */
export interface ApiTarget {
  baseUrl: string;
  /** Control-plane replicas, baseUrl first: the watch moves to the next when its stream drops. */
  urls?: string[];
  apiKey: string;
}

export interface LaunchSpec {
  templateID: string;
  cpus: number;
  memoryMiB: number;
  timeoutSec: number;
  nodeID?: string;
}

const errText = (e: unknown): string => (e instanceof Error ? e.message : String(e));

/** The density line the operator reads after a ratio change: live / ceiling (safe), what pausing frees. */
export function densitySummary(n: NodeView): string {
  const d = n.density;
  return `${n.nodeID}: ${densityText(n.sandboxes.running + n.sandboxes.paused, d.effectiveCeiling, d.safetyBoundary)}, all paused ${d.allPausedCeiling}, ratio ${ratio(d.releaseRatio)} frees ${mib(d.releasedMiB)}, headroom ${d.headroom}`;
}

/**
 * The node's headroom at another ratio: the daemon's own usage figures with the paused
 * sandboxes' footprints moved from released to held, through the daemon's headroomFromUsage (so
 * 128 MiB sandboxes count as 128 MiB, not as the default spec: issue 16 saw 117 -> 112 at the
 * current ratio). Nodes that do not report paused footprints: counted at the default spec.
 */
function headroomAt(n: NodeView, params: DensityParams, spec: { cpus: number; memoryMiB: number }): Pick<Headroom, 'headroom' | 'releasedMiB'> {
  const d = n.density;
  if (d.pausedFootprintMiB === undefined || d.pausedCpus === undefined)
    return computeHeadroom(n.capacity, params, spec, { running: n.sandboxes.running, paused: n.sandboxes.paused });
  const shift = d.releaseRatio - params.releaseRatio;
  return headroomFromUsage(n.capacity, params, spec, {
    memUsedMiB: n.usage.quotaMemUsedMiB + d.pausedFootprintMiB * shift,
    cpuUsed: n.usage.quotaCpuUsed + d.pausedCpus * shift,
    releasedMiB: d.pausedFootprintMiB * params.releaseRatio,
    count: n.sandboxes.total,
  });
}

/** What a release ratio would give on a node, from the config in force (same model as the scheduler); at the ratio in force, the daemon's own figures. */
export function previewReleaseRatio(n: NodeView, master: MasterConfig, r: number): string {
  const params = { ...densityParamsFromConfig(master), releaseRatio: r };
  const spec = { cpus: master.sandbox.default_spec.cpus, memoryMiB: master.sandbox.default_spec.memory_mib };
  const same = r === n.density.releaseRatio;
  const d = same ? n.density : computeDensity(n.capacity, params, spec);
  const h = same ? n.density : headroomAt(n, params, spec);
  return `${n.nodeID}: all paused ${n.density.allPausedCeiling} -> ${d.allPausedCeiling}, frees ${mib(n.density.releasedMiB)} -> ${mib(h.releasedMiB)}, headroom ${n.density.headroom} -> ${h.headroom}`;
}

/** The evict deadline the drain prompt offers: long enough for a rollout step to finish. */
export const DRAIN_DEADLINE_SEC = 300;

export function parseDeadline(text: string): number | string {
  const t = text.trim();
  if (!/^\d+$/.test(t)) return 'whole seconds, e.g. 300 (0 destroys at once)';
  return Number(t);
}

export function parseRatio(text: string): number | string {
  const t = text.trim();
  if (!/^(\d+(\.\d*)?|\.\d+)$/.test(t)) return 'a number between 0 and 1, e.g. 0.75';
  const v = Number(t);
  return v >= 0 && v <= 1 ? v : 'must be between 0 and 1';
}

/** `template=host cpus=1 mem=4096 timeout=300` -> LaunchSpec (unknown words are an error, not ignored). */
export function parseLaunch(text: string, base: LaunchSpec): LaunchSpec | string {
  const spec = { ...base };
  for (const word of text.trim().split(/\s+/).filter(Boolean)) {
    const [k, v = ''] = word.split('=', 2);
    const num = Number(v);
    if (k === 'template') {
      if (!v) return 'template= needs a name';
      spec.templateID = v;
    } else if (k === 'node') {
      if (v && v !== 'any') spec.nodeID = v;
      else delete spec.nodeID;
    } else if (k === 'cpus' || k === 'mem' || k === 'timeout') {
      if (!(Number.isFinite(num) && num > 0)) return `${k}= needs a positive number`;
      if (k === 'cpus') spec.cpus = num;
      else if (k === 'mem') spec.memoryMiB = Math.round(num);
      else spec.timeoutSec = Math.round(num);
    } else return `unknown field "${k}" (template, cpus, mem, timeout, node)`;
  }
  return spec;
}

export function formatLaunch(s: LaunchSpec): string {
  return `template=${s.templateID} cpus=${s.cpus} mem=${s.memoryMiB} timeout=${s.timeoutSec} node=${s.nodeID ?? 'any'}`;
}

/** A command run from the console is killed after this long: the console shows its output when it ends. */
export const EXEC_TIMEOUT_MS = 10_000;
/** Lines of output kept per sandbox (the describe pane shows them all, scrolled). */
export const EXEC_KEEP = 200;

/** The console's words for how a command ended. */
export function execEnd(e: { exitCode: number; signal?: string; oomKilled: boolean; timedOut: boolean; error?: string }): string {
  if (e.error) return `[failed: ${e.error}]`;
  if (e.timedOut) return `[killed after ${EXEC_TIMEOUT_MS / 1000}s]`;
  if (e.oomKilled) return '[killed: out of memory]';
  return e.signal ? `[killed by ${e.signal}]` : `[exit ${e.exitCode}]`;
}

export interface Actions {
  reload(): Promise<void>;
  setReleaseRatio(r: number, nodeID?: string): Promise<void>;
  cordon(nodeID: string): Promise<void>;
  uncordon(nodeID: string): Promise<void>;
  drain(nodeID: string, opts?: DrainOptions): Promise<void>;
  launch(spec: LaunchSpec): Promise<void>;
  destroy(ids: string[]): Promise<void>;
  togglePause(sb: SandboxView): Promise<void>;
  /** Sets one config key (`host.quota...` without the file prefix) through the daemon, which validates and persists it. */
  setConfig(path: string, value: unknown): Promise<void>;
  /** Runs `sh -c command` in the sandbox; its output lands in ui.output (the describe pane shows it). */
  exec(sandboxID: string, command: string): Promise<void>;
  /** The sandbox's lifecycle from the daemon's whole event history (not only the console's buffer) into ui.logs. */
  logs(sandboxID: string): Promise<void>;
  /** The page of events before the oldest the console holds, from the daemon's history; resolves to the newest of them (undefined: none older). */
  olderEvents(): Promise<EventView | undefined>;
}

/** Log lines kept per sandbox in the console (k9s keeps about 500): a chatty process cannot grow it. */
export const LOG_KEEP = 1000;

const eventLogLine = (e: EventView): string =>
  `${e.at.slice(0, 19).replace('T', ' ')} ${e.kind}${e.code === undefined ? '' : ` ${e.code}`}: ${e.message}${e.durationMs === undefined ? '' : ` (${e.durationMs}ms)`}`;

/** One line of a process's output as the logs show it: time to the ms, pid and stream, the text (tabs as spaces: Ink measures a tab as one column). */
export const outputLogLine = (l: OutputLine): string => `${l.at.slice(0, 23).replace('T', ' ')} [${l.pid} ${l.stream}] ${l.line.replace(/\t/g, '    ')}`;

/** Where following a sandbox's output resumes: its last line's time and how many lines had that time (the next poll asks from it, inclusive). */
export function followFrom(sandboxID: string, lines: readonly OutputLine[], prev?: Follow): Follow {
  const last = lines.at(-1);
  if (!last) return prev ?? { sandboxID, since: '', atSince: 0 };
  let n = 0;
  for (let i = lines.length - 1; i >= 0 && lines[i]!.at === last.at; i--) n++;
  return { sandboxID, since: last.at, atSince: n };
}

/** The lines of a poll from `f.since` on that are new: those after it, and those at it past the ones already held (pure). */
export function newOutput(f: Follow, lines: readonly OutputLine[]): OutputLine[] {
  let skip = f.atSince;
  return lines.filter((l) => {
    if (l.at !== f.since) return l.at > f.since;
    return skip-- <= 0;
  });
}

/** Events the daemon keeps at most (the store's retention): `l` reads them all. */
const HISTORY_LIMIT = 10_000;

export function createActions(target: ApiTarget, store: ConsoleStore): Actions {
  // Actions go where the watch stream is connected (it fails over between replicas).
  let client: CubeClient | null = null;
  const api = (): CubeClient => {
    const url = store.getState().settings.apiUrl;
    if (client?.baseUrl !== url) client = new CubeClient({ baseUrl: url, apiKey: target.apiKey });
    return client;
  };
  /** One action at a time, its name in the footer while it runs; failures land in the flash. */
  const run = async (what: string, fn: () => Promise<void>): Promise<void> => {
    if (store.getState().ui.busy) {
      flash(store, `busy: ${store.getState().ui.busy}`, 'warn');
      return;
    }
    setUi(store, { busy: what });
    try {
      await fn();
    } catch (e) {
      flash(store, `${what} failed: ${errText(e)}`, 'bad');
    } finally {
      setUi(store, { busy: '' });
    }
  };

  const nodeAction = (verb: 'cordon' | 'uncordon', past: string) => (nodeID: string) =>
    run(`${verb} ${nodeID}`, async () => {
      const n = await api()[verb](nodeID);
      flash(store, `${nodeID} ${past}: ${n.schedulable ? 'schedulable' : `not schedulable (${n.reason})`}`);
    });

  return {
    reload: () =>
      run('reload config', async () => {
        const r = await api().reloadConfig();
        if (!r.ok) {
          const errs = (r.error ?? []).map((e) => `${e.path}: ${e.message}`);
          flash(store, `reload rejected, config v${r.version} kept`, 'bad', errs);
          return;
        }
        const diff = r.changes.map((c) => `${c.path}: ${inline(c.from)} -> ${inline(c.to)}${c.needsRestart ? ' (needs restart)' : ''}`);
        flash(store, r.changes.length ? `config v${r.version} loaded: ${r.changes.length} change(s)` : `config v${r.version}: no change on disk`, 'ok', diff);
      }),
    setReleaseRatio: (r, nodeID) =>
      run('set release ratio', async () => {
        const res = await api().setConfig(RELEASE_RATIO_PATH, r);
        if (!res.ok) {
          flash(
            store,
            `release ratio ${r} rejected`,
            'bad',
            (res.error ?? []).map((e) => `${e.path}: ${e.message}`),
          );
          return;
        }
        // The daemon's own numbers after the change, not our preview.
        const nodes = await api().nodes();
        const shown = nodes.filter((n) => !nodeID || n.nodeID === nodeID).slice(0, 3);
        flash(store, `release ratio ${ratio(r)} applied (config v${res.version})`, 'ok', shown.map(densitySummary));
      }),
    setConfig: (path, value) =>
      run(`set ${path}`, async () => {
        const res = await api().setConfig(path, value);
        if (!res.ok)
          return flash(
            store,
            `${path} ${inline(value)} rejected`,
            'bad',
            (res.error ?? []).map((e) => `${e.path}: ${e.message}`),
          );
        const c = res.changes.find((x) => x.path === path);
        flash(store, c ? `${path}: ${inline(c.from)} -> ${inline(c.to)} applied (config v${res.version})` : `${path} unchanged (config v${res.version})`);
      }),
    cordon: nodeAction('cordon', 'cordoned'),
    uncordon: nodeAction('uncordon', 'uncordoned'),
    drain: (nodeID, opts = {}) =>
      run(`drain ${nodeID}`, async () => {
        const n = await api().drain(nodeID, opts);
        const left = `${n.sandboxes.total} sandbox(es)`;
        flash(
          store,
          opts.evict
            ? `${nodeID} draining: ${left} destroyed in ${opts.deadlineSec ?? 0}s unless they end first`
            : `${nodeID} draining: takes no new sandbox; ${left} run until they end (not migrated)`,
        );
      }),
    launch: (spec) =>
      run('launch', async () => {
        const sb = await api().createSandbox({
          templateID: spec.templateID,
          cpus: spec.cpus,
          memoryMiB: spec.memoryMiB,
          timeoutSec: spec.timeoutSec,
          ...(spec.nodeID ? { nodeID: spec.nodeID } : {}),
        });
        flash(store, `launched ${sb.sandboxID} on ${sb.nodeID} (${sb.state})`);
      }),
    destroy: (ids) =>
      run(`destroy ${ids.length}`, async () => {
        const failed: string[] = [];
        for (const id of ids) {
          try {
            await api().deleteSandbox(id);
          } catch (e) {
            failed.push(`${id}: ${errText(e)}`);
          }
        }
        setUi(store, { marked: [] });
        if (failed.length) flash(store, `destroyed ${ids.length - failed.length} of ${ids.length}`, 'bad', failed);
        else flash(store, `destroyed ${ids.length === 1 ? ids[0] : `${ids.length} sandboxes`}`);
      }),
    togglePause: (sb) => {
      const verb = sb.state === 'paused' ? 'resume' : 'pause';
      return run(`${verb} ${sb.sandboxID}`, async () => {
        const after = await api()[verb](sb.sandboxID);
        flash(store, `${sb.sandboxID} ${after.state}`);
      });
    },
    exec: (sandboxID, command) =>
      run(`exec in ${sandboxID}`, async () => {
        let text = '';
        let end = '[no end]';
        for await (const ev of api().exec(sandboxID, { argv: ['sh', '-c', command], timeoutMs: EXEC_TIMEOUT_MS })) {
          if (ev.type === 'stdout' || ev.type === 'stderr' || ev.type === 'pty') text += ev.data.toString('utf8');
          else if (ev.type === 'end') end = execEnd(ev);
        }
        const lines = [
          `$ ${command}`,
          ...text
            .replace(/\n$/, '')
            .split('\n')
            .filter((l, i, all) => l !== '' || i < all.length - 1),
          end,
        ];
        const { output } = store.getState().ui;
        setUi(store, { output: { ...output, [sandboxID]: [...(output[sandboxID] ?? []), ...lines].slice(-EXEC_KEEP) } });
        flash(store, `${sandboxID}: ${command} ${end}`, end === '[exit 0]' ? 'ok' : 'warn');
      }),
    logs: (sandboxID) =>
      run(`logs of ${sandboxID}`, async () => {
        const [events, output] = await Promise.all([api().events({ limit: HISTORY_LIMIT }), api().output(sandboxID)]);
        const mine = events.filter((e) => e.sandboxID === sandboxID);
        const lines = [...mine.map(eventLogLine), ...output.map(outputLogLine)].sort();
        setUi(store, {
          logs: { ...store.getState().ui.logs, [sandboxID]: lines.length ? lines.slice(-LOG_KEEP) : ['no event about it in the daemon history and no output'] },
          follow: followFrom(sandboxID, output),
        });
        flash(store, `${sandboxID}: ${mine.length} event(s) from the daemon history, ${output.length} output line(s); following its output`);
      }),
    olderEvents: async () => {
      let newest: EventView | undefined;
      await run('older events', async () => {
        const oldest = store.getState().data.events[0];
        const page = await api().events({ ...(oldest ? { before: oldest.id } : {}), limit: EVENT_PAGE });
        store.setState((s) => ({ data: withOlderEvents(s.data, page) }));
        newest = page.at(-1);
        if (page.length) flash(store, `${page.length} older event(s) from the daemon history, back to ${page[0]!.at.slice(0, 19).replace('T', ' ')}`);
        else
          flash(store, `no event before ${oldest ? oldest.at.slice(0, 19).replace('T', ' ') : 'now'} in the daemon history (its retention ends there)`, 'warn');
      });
      return newest;
    },
  };
}
