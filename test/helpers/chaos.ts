// The chaos run (bench/chaos.ts, and its short version in test/cluster/chaos.test.ts): RL
// rollouts through the real `e2b` SDK (create with an idempotency key, run a command, kill) at a
// fixed concurrency against a cluster of 2 control replicas and 3 compute nodes on its own Redis
// and MariaDB, while one component at a time is killed with -9, frozen (SIGSTOP) or restarted.
// What it counts, against the nodes' own lists (the truth):
//   lost      rollouts with no known outcome: the create, or the kill, never got an answer that
//             says what happened (a success, or a refusal), however often it was retried
//   orphans   sandboxes the nodes hold after the run that no client holds (every rollout kills its own)
//   unexplained  sandboxes that died under their client (a command found them gone) with no
//             event naming a reason
//   lies      answers the truth contradicts: a kill answered as done whose sandbox a node still
//             holds after the run, a kill answered 404 (nothing to kill) while a node held the
//             sandbox, read from the nodes right after the answer. A kill answered with an error
//             and then 404 is not one by itself: a delete that was accepted answers its repeat as
//             done (204), so the 404 says the error's "not done" was true and the sandbox went
//             otherwise (its node restarted without it), which the nodes' lists confirm
//   stale     records still `creating` 10 s past their create's deadline, counted from when the
//             stores were last back (not while one is down), sampled every 2 s
import { Sandbox } from 'e2b';
import type { EventView, SandboxView } from '../../src/api/types.js';
import type { SandboxView as NodeSandbox } from '../../src/model/sandbox.js';
import { RemoteNode } from '../../src/cubelet/remote.js';
import { burst, startCluster, type ClusterProcess, type TestCluster } from './cluster.js';
import { startOwnStores, type StoreProcess } from './own-stores.js';

export type FaultAction = 'kill9' | 'freeze' | 'restart';
export type FaultTarget = 'replica' | 'node' | 'redis' | 'mariadb';
export interface Fault {
  action: FaultAction;
  target: FaultTarget;
}

export interface ChaosOptions {
  /** Rollouts in the quiet run (no faults) that the chaos run's rate is compared with; 0: none. */
  quiet: number;
  /** Rollouts in the chaos run. */
  rollouts: number;
  concurrency: number;
  /** A fault starts this often. */
  faultEveryMs: number;
  freezeMs: number;
  /** The faults in order (repeated); default: a random one each time. */
  faults?: Fault[];
  /** Rollouts go on past `rollouts` until this many faults have happened (the short run: each of `faults` once). */
  faultsAtLeast?: number;
  log?: (line: string) => void;
}

export interface ChaosReport {
  quiet?: { rollouts: number; seconds: number; perSec: number };
  chaos: { rollouts: number; seconds: number; perSec: number };
  faults: string[];
  counts: { lost: number; orphans: number; unexplained: number; lies: number; stale: number };
  /** Rollouts whose command failed (the sandbox died under it, or its node was frozen): not a target, said for context. */
  commandFailures: number;
  /** One line per finding, for the report. */
  findings: string[];
}

/** The create deadline in the cluster (sandbox.create_deadline_sec). */
const CREATE_DEADLINE_MS = 10_000;
/** How long a record may stay `creating` past its deadline, or past the stores' return. */
const STALE_AFTER_MS = 10_000;
/** How long the check of a 404 waits for each node's list (a frozen node says nothing). */
const TRUTH_LOOK_MS = 3000;
/** How long a rollout keeps retrying a step before its outcome counts as lost. */
const STEP_PATIENCE_MS = 120_000;

interface Rollout {
  key: string;
  sandboxID?: string;
  outcome?: 'created' | 'refused';
  killed?: 'done' | 'gone';
  /** The kill answered an error (not done) and a later try found the sandbox gone (context, not a lie by itself). */
  killErrorThenGone?: boolean;
  /** The kill answered 404 while a node held the sandbox (its node and state then): a lie. */
  notFoundWhileHeld?: string;
  commandError?: string;
}

const isRefusal = (e: unknown): boolean => {
  const status = (e as { statusCode?: number }).statusCode;
  return status !== undefined && status >= 400 && status < 500 && status !== 429;
};

export async function runChaos(o: ChaosOptions): Promise<ChaosReport> {
  const log = o.log ?? (() => undefined);
  const stores = await startOwnStores();
  let c: TestCluster | undefined;
  try {
    c = await startCluster({ computes: 3, controls: 2, state: stores.scope, master: { scheduler: { heartbeat_timeout_ms: 5000 } } });
    const cluster = c;
    const sdk = (i: number) => ({ apiKey: cluster.apiKey, apiUrl: cluster.controls[i % 2]!.url, sandboxUrl: cluster.controls[i % 2]!.url });
    const findings: string[] = [];

    async function rollout(r: Rollout, k: number): Promise<void> {
      for (let attempt = 0, until = Date.now() + STEP_PATIENCE_MS; !r.outcome && Date.now() < until; attempt++) {
        try {
          r.sandboxID = (await Sandbox.create({ ...sdk(k + attempt), timeoutMs: 600_000, metadata: { 'cube.idempotency_key': r.key } })).sandboxId;
          r.outcome = 'created';
        } catch (e) {
          if (isRefusal(e)) r.outcome = 'refused';
          else await new Promise((res) => setTimeout(res, 500));
        }
      }
      if (r.outcome !== 'created') return;
      try {
        const sbx = await Sandbox.connect(r.sandboxID!, sdk(k));
        const out = await sbx.commands.run('echo ok', { requestTimeoutMs: 30_000 });
        if (out.stdout !== 'ok\n') r.commandError = `stdout ${JSON.stringify(out.stdout)}`;
      } catch (e) {
        r.commandError = (e as Error).message;
      }
      let erred = false;
      for (let attempt = 0, until = Date.now() + STEP_PATIENCE_MS; !r.killed && Date.now() < until; attempt++) {
        try {
          const done = await Sandbox.kill(r.sandboxID!, sdk(k + attempt));
          r.killed = done ? 'done' : 'gone';
          if (!done && erred) r.killErrorThenGone = true;
          if (!done) {
            // Nothing to kill: the nodes' truth at that moment says whether that was so.
            const held = await holderOf(cluster, r.sandboxID!);
            if (held) r.notFoundWhileHeld = held;
          }
        } catch (e) {
          // Only an answer from the server says "not done"; a client timeout or a dropped connection says nothing.
          if ((e as Error).name === 'ServiceBusyError' || (e as { statusCode?: number }).statusCode !== undefined) erred = true;
          await new Promise((res) => setTimeout(res, 500));
        }
      }
    }

    async function run(n: number, prefix: string): Promise<{ rs: Rollout[]; seconds: number }> {
      const rs = Array.from({ length: n }, (_, k): Rollout => ({ key: `${prefix}-${k}` }));
      const t0 = Date.now();
      await burst(n, o.concurrency, (k) => rollout(rs[k]!, k));
      return { rs, seconds: (Date.now() - t0) / 1000 };
    }

    let quiet: ChaosReport['quiet'];
    if (o.quiet > 0) {
      const q = await run(o.quiet, 'quiet');
      quiet = { rollouts: o.quiet, seconds: q.seconds, perSec: o.quiet / q.seconds };
      log(`quiet: ${o.quiet} rollouts in ${q.seconds.toFixed(1)} s (${quiet.perSec.toFixed(2)}/s)`);
    }

    // Stale records, sampled through whichever replica answers: `creating` 10 s past the create's
    // deadline, counted from when the stores were last back (nothing can be settled without them),
    // and not while a store is down (a fault on one in progress).
    const stale = new Map<string, string>();
    let storesBackAt = 0;
    let storesDown = false;
    let sampling = true;
    const sampler = (async () => {
      for (let i = 0; sampling; i++) {
        const at = Date.now();
        const listed = await cluster.api<SandboxView[]>(i % 2, '/admin/v1/sandboxes?state=creating').catch(() => undefined);
        if (Array.isArray(listed?.body) && !storesDown) {
          for (const s of listed.body) {
            const startedAt = Date.parse(String(s.startedAt));
            if (at - Math.max(startedAt + CREATE_DEADLINE_MS, storesBackAt) > STALE_AFTER_MS && !stale.has(s.sandboxID)) {
              stale.set(
                s.sandboxID,
                `on ${s.nodeID}, started ${new Date(startedAt).toISOString()}, seen ${new Date(at).toISOString()}, stores back ${storesBackAt ? new Date(storesBackAt).toISOString() : 'never down'}`,
              );
            }
          }
        }
        await new Promise((res) => setTimeout(res, 2000));
      }
    })();

    // One fault at a time.
    const faults: string[] = [];
    let faulting = true;
    const faulter = (async () => {
      for (let i = 0; faulting; i++) {
        await new Promise((res) => setTimeout(res, o.faultEveryMs));
        if (!faulting) break;
        const f = o.faults ? o.faults[i % o.faults.length]! : randomFault();
        const store = f.target === 'redis' || f.target === 'mariadb';
        storesDown ||= store;
        faults.push(
          `${new Date().toISOString()} ${await inject(cluster, stores, f, o.freezeMs).catch((e: Error) => `${f.action} ${f.target} failed: ${e.message}`)}`,
        );
        if (store) [storesBackAt, storesDown] = [Date.now(), false];
        log(`fault: ${faults.at(-1)}`);
      }
    })();
    const ch = await run(o.rollouts, 'chaos');
    // More, a burst at a time, while the faults asked for have not all happened yet.
    for (let round = 1; faults.length < (o.faultsAtLeast ?? 0); round++) {
      const more = await run(o.concurrency * 5, `chaos${round}`);
      ch.rs.push(...more.rs);
      ch.seconds += more.seconds;
    }
    faulting = false;
    await faulter;
    const rollouts = ch.rs.length;
    log(`chaos: ${rollouts} rollouts in ${ch.seconds.toFixed(1)} s (${(rollouts / ch.seconds).toFixed(2)}/s)`);

    // Everything back, then time for the cluster to settle what it has to (deadlines, sweeps, lists).
    await restoreAll(cluster, stores);
    await new Promise((res) => setTimeout(res, 30_000));
    sampling = false;
    await sampler;

    const all = ch.rs.concat();
    const held = new Set(all.filter((r) => r.outcome === 'created' && !r.killed).map((r) => r.sandboxID!));
    const truth = new Map<string, NodeSandbox>();
    for (const n of cluster.computes) for (const s of await new RemoteNode(n.nodeID, n.url, cluster.secret).listSandboxes()) truth.set(s.sandboxID, s);
    const lost = all.filter((r) => !r.outcome || (r.outcome === 'created' && !r.killed));
    for (const r of lost)
      findings.push(`lost: ${r.key} (${r.outcome ?? 'create never answered'}${r.sandboxID ? `, ${r.sandboxID} never answered its kill` : ''})`);
    const orphans = [...truth.keys()].filter((id) => !held.has(id));
    for (const id of orphans) findings.push(`orphan: ${id} (${truth.get(id)!.state}) on ${truth.get(id)!.nodeID}`);
    const lies = all.filter((r) => (r.killed === 'done' && truth.has(r.sandboxID!)) || r.notFoundWhileHeld !== undefined);
    for (const r of lies)
      findings.push(
        `lie: ${r.sandboxID}: ${r.notFoundWhileHeld !== undefined ? `a kill answered 404 while ${r.notFoundWhileHeld} held it` : 'killed, but still on its node'}`,
      );
    for (const r of all.filter((x) => x.killErrorThenGone && x.notFoundWhileHeld === undefined))
      findings.push(`note: ${r.sandboxID}: a kill answered an error, a later one 404 with no node holding it (it went otherwise)`);
    const events = (await cluster.api<EventView[]>(0, '/admin/v1/events?limit=10000').catch(() => ({ body: [] as EventView[] }))).body;
    const why = new Map<string, string[]>();
    for (const e of Array.isArray(events) ? events : []) if (e.sandboxID) why.set(e.sandboxID, [...(why.get(e.sandboxID) ?? []), e.kind]);
    const died = all.filter((r) => r.commandError && /not found|was killed|is lost/i.test(r.commandError));
    const unexplained = died.filter((r) => !(why.get(r.sandboxID!) ?? []).some((k) => k !== 'sandbox.created'));
    for (const r of unexplained) findings.push(`unexplained death: ${r.sandboxID}: ${r.commandError}`);
    const told = (id: string): string =>
      (Array.isArray(events) ? events : [])
        .filter((e) => e.sandboxID === id)
        .map((e) => `${e.at} ${e.kind}: ${e.message}`)
        .join(' | ') || 'none';
    for (const [id, what] of stale) findings.push(`stale: ${id} creating past its deadline + 10 s (${what}); its events: ${told(id)}`);
    return {
      ...(quiet ? { quiet } : {}),
      chaos: { rollouts, seconds: ch.seconds, perSec: rollouts / ch.seconds },
      faults,
      counts: { lost: lost.length, orphans: orphans.length, unexplained: unexplained.length, lies: lies.length, stale: stale.size },
      commandFailures: all.filter((r) => r.commandError).length,
      findings,
    };
  } finally {
    if (c) await restoreAll(c, stores).catch(() => undefined);
    try {
      await c?.stop();
    } finally {
      await stores.scope.drop();
    }
  }
}

/** The node holding `sandboxID` now, and the sandbox's state there (one being destroyed does not count); nodes that do not answer say nothing. */
async function holderOf(c: TestCluster, sandboxID: string): Promise<string | undefined> {
  const lists = await Promise.all(
    c.computes.map(async (n) => ({ n, list: await new RemoteNode(n.nodeID, n.url, c.secret, TRUTH_LOOK_MS).listSandboxes().catch(() => []) })),
  );
  for (const { n, list } of lists) {
    const s = list.find((x) => x.sandboxID === sandboxID && x.state !== 'destroying' && x.state !== 'gone');
    if (s) return `node ${n.nodeID} (${s.state})`;
  }
  return undefined;
}

function randomFault(): Fault {
  const pick = <T>(xs: T[]): T => xs[Math.floor(Math.random() * xs.length)]!;
  return { action: pick<FaultAction>(['kill9', 'freeze', 'restart']), target: pick<FaultTarget>(['replica', 'node', 'redis', 'mariadb']) };
}

/** Carries out one fault and brings the component back; returns what was done. */
async function inject(c: TestCluster, stores: { redis: StoreProcess; mariadb: StoreProcess }, f: Fault, freezeMs: number): Promise<string> {
  const pick = <T>(xs: T[]): [T, number] => {
    const i = Math.floor(Math.random() * xs.length);
    return [xs[i]!, i];
  };
  let proc: ClusterProcess | StoreProcess;
  let name: string;
  if (f.target === 'replica') [proc, name] = ((p) => [p[0], `replica ${p[1]}`])(pick(c.controls));
  else if (f.target === 'node') [proc, name] = ((p) => [p[0], `node ${p[0].nodeID}`])(pick(c.computes));
  else [proc, name] = [stores[f.target], f.target];
  const t0 = Date.now();
  if (f.action === 'freeze') {
    process.kill(proc.pid, 'SIGSTOP');
    await new Promise((res) => setTimeout(res, freezeMs));
    process.kill(proc.pid, 'SIGCONT');
  } else {
    // kill -9, or a restart: a stop the process sees (SIGTERM; nodes and replicas are stopped
    // with -9 too: a node's own stop destroys its sandboxes, --destroy-on-exit in the test cluster).
    if (f.action === 'restart' && 'stop' in proc) await proc.stop();
    else await proc.kill9();
    if (f.action === 'kill9') await new Promise((res) => setTimeout(res, 3000));
    await proc.start();
  }
  return `${f.action} ${name} (${((Date.now() - t0) / 1000).toFixed(1)} s)`;
}

async function restoreAll(c: TestCluster, stores: { redis: StoreProcess; mariadb: StoreProcess }): Promise<void> {
  for (const p of [...c.controls, ...c.computes, stores.redis, stores.mariadb]) {
    if (p.alive()) process.kill(p.pid, 'SIGCONT');
    else await p.start();
  }
}
