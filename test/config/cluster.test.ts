// The cluster's config under concurrent changes (issue 11): two control replicas in this process
// over the machine's Redis and MariaDB (own prefix and database), each with its own config
// dir. In each trial both replicas set one key at once while replica A's file edits another:
// every change either wins (a version of its own) or says it lost, two configs never share a
// version, and both replicas end on the store's version. The replicas' files racing the
// compare-and-set left a replica on its own config under the winner's version number.
import { mkdtempSync, readFileSync, rmSync, writeFileSync, copyFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ReloadResult } from '../../src/api/types.js';
import { packageRoot } from '../../src/config/loader.js';
import { ConfigStore } from '../../src/config/store.js';
import { CubeError } from '../../src/errors.js';
import { ControlPlaneService } from '../../src/control/service.js';
import { clusterControl } from '../../src/control/wiring.js';
import { ClusterStore } from '../../src/store/cluster/index.js';
import { clusterStateScope, type ClusterStateScope } from '../helpers/cluster-state.js';
import { until } from '../helpers/cluster.js';

const KEY = 'host.quota.paused_resource_release_ratio';
const FILE_KEY = 'node_max_cpu_util';
const OPERATOR = 'key-ops';

interface Replica {
  name: string;
  dir: string;
  config: ConfigStore;
  store: ClusterStore;
  cp: ControlPlaneService;
}

let scope: ClusterStateScope;
const replicas: Replica[] = [];
const dirs: string[] = [];

async function replica(name: string): Promise<Replica> {
  const dir = mkdtempSync(join(tmpdir(), `cube-test-config-${name}-`));
  dirs.push(dir);
  for (const f of ['cubemaster.yaml', 'cubelet.toml']) copyFileSync(join(packageRoot(), 'config', f), join(dir, f));
  // The edits are reloaded by the test's call (the watcher's path, applyTexts, without its timing).
  const config = new ConfigStore(dir, { watch: false });
  const store = new ClusterStore(scope);
  await store.init();
  const cp = new ControlPlaneService({
    store,
    config,
    log: pino({ level: 'silent' }),
    replicaID: name,
    tickMs: 200,
    ...clusterControl(store, 'secret', () => 30_000),
  });
  const r = { name, dir, config, store, cp };
  replicas.push(r);
  await cp.start();
  return r;
}

const ratio = (r: Replica) => r.config.config.master.host.quota.paused_resource_release_ratio;
const cpuCap = (r: Replica) => r.config.config.master.scheduler.node_max_cpu_util;

beforeAll(() => {
  scope = clusterStateScope();
});

afterAll(async () => {
  for (const r of replicas) {
    await r.cp.stop();
    r.config.close();
    await r.store.close();
  }
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
  await scope?.drop();
}, 60_000);

describe("a cluster's config under concurrent changes", () => {
  it('concurrent sets on two replicas and a file edit on one: each wins with a version of its own or says it lost, and both replicas converge', async () => {
    const a = await replica('replica-a');
    const b = await replica('replica-b');
    expect(a.config.versionInfo.version).toBe(b.config.versionInfo.version);
    const outcomes: string[] = [];
    for (let trial = 0; trial < 12; trial++) {
      const values = [0.1 + trial / 100, 0.6 + trial / 100];
      const cap = 50 + trial;
      const file = join(a.dir, 'cubemaster.yaml');
      const text = readFileSync(file, 'utf8');
      const edited = text.replace(/node_max_cpu_util: \d+/, `node_max_cpu_util: ${cap}`);
      expect(edited).not.toBe(text);
      writeFileSync(file, edited);
      // Started in a different order each trial: which reaches the store first varies.
      // Both sets by one operator's key (as through the admin API): the same actor on both
      // replicas, in the same millisecond, so the two commits differ in their content only.
      const calls = [() => a.cp.setConfig(KEY, values[0], OPERATOR), () => b.cp.setConfig(KEY, values[1], OPERATOR), () => a.cp.reloadConfig()];
      const order = [
        [0, 1, 2],
        [2, 1, 0],
        [1, 2, 0],
      ][trial % 3]!;
      const started: Promise<ReloadResult>[] = [];
      for (const k of order) started[k] = calls[k]!();
      const settled = await Promise.allSettled(started);

      const won: { what: string; version: number }[] = [];
      for (const [i, s] of settled.entries()) {
        const what = i < 2 ? `set ${values[i]}` : `file ${FILE_KEY} ${cap}`;
        if (s.status === 'rejected') {
          // Only a set has a caller to answer 409.
          expect(i).toBeLessThan(2);
          expect(s.reason).toBeInstanceOf(CubeError);
          expect((s.reason as CubeError).code).toBe(130409);
          outcomes.push(`${trial} ${what}: 409`);
        } else if (s.value.ok) {
          expect(s.value.changes.length).toBeGreaterThan(0);
          won.push({ what, version: s.value.version });
        } else {
          expect(i).toBe(2);
          expect(s.value.error?.[0]?.message).toMatch(/was recorded first; this change was not applied/);
          outcomes.push(`${trial} ${what}: lost`);
        }
      }
      outcomes.push(...won.map((w) => `${trial} ${w.what}: version ${w.version}`));
      expect(won.length).toBeGreaterThan(0);
      // Never two changes under one version.
      expect(new Set(won.map((w) => w.version)).size).toBe(won.length);

      const head = (await a.store.configHead())!;
      await until(
        `both replicas on version ${head.version}`,
        async () => {
          const now = (await a.store.configHead())!;
          return [a, b].every((r) => r.config.versionInfo.version === now.version && isDeepStrictEqual(r.config.config.master, now.master)) ? true : undefined;
        },
        30_000,
      );
      // What won is in force: the last set's value, and the file's edit exactly when it won.
      const lastSet = won.filter((w) => w.what.startsWith('set')).sort((x, y) => y.version - x.version)[0];
      if (lastSet) expect(ratio(a)).toBe(Number(lastSet.what.slice(4)));
      const fileWon = won.some((w) => w.what.startsWith('file'));
      expect({ trial, fileWon, cap: cpuCap(a) === cap }).toEqual({ trial, fileWon, cap: fileWon });
      expect(cpuCap(b)).toBe(cpuCap(a));
    }

    // The history holds each version once, each as it was in force.
    const history = await a.store.listConfigVersions(100);
    expect(new Set(history.map((h) => h.version)).size).toBe(history.length);
    const lost = outcomes.filter((o) => o.endsWith('lost'));
    const events = await a.store.listEvents({ limit: 1000 });
    // A lost file edit has no caller: it is reported as an event.
    expect(events.filter((e) => e.kind === 'config.rejected' && e.code === 130409)).toHaveLength(lost.length);
  }, 180_000);
});
