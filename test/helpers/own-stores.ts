// A Redis and a MariaDB of one's own, on free ports with data dirs under a temporary dir, for a
// benchmark or test that kills, freezes and restarts them (bench/chaos.ts): the machine's shared
// ones are restarted only through services-lock.ts. Redis keeps nothing on disk, as the shared
// one; MariaDB keeps its data dir across restarts (InnoDB recovers after a kill -9).
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { execa } from 'execa';
import { MysqlRecords } from '../../src/store/cluster/mysql-records.js';
import type { ClusterStateScope } from './cluster-state.js';
import { exited, freePort } from './daemon.js';

/** A store process the chaos can act on. */
export interface StoreProcess {
  readonly name: string;
  readonly pid: number;
  alive(): boolean;
  start(): Promise<void>;
  kill9(): Promise<void>;
  /** SIGTERM and wait for the exit. */
  stop(): Promise<void>;
}

export interface OwnStores {
  redis: StoreProcess;
  mariadb: StoreProcess;
  /** For startCluster({ state }): drop() stops both and removes their data. */
  scope: ClusterStateScope;
}

async function until(what: string, probe: () => Promise<boolean>, ms: number): Promise<void> {
  for (const end = Date.now() + ms; ;) {
    if (await probe().catch(() => false)) return;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

function storeProcess(name: string, argv: string[], ready: () => Promise<boolean>): StoreProcess {
  let child: ChildProcess | undefined;
  const p: StoreProcess = {
    name,
    get pid() {
      return child?.pid ?? 0;
    },
    alive: () => child !== undefined && child.exitCode === null && child.signalCode === null,
    async start() {
      child = spawn(argv[0]!, argv.slice(1), { stdio: 'ignore' });
      await until(`${name} ready`, ready, 120_000);
    },
    async kill9() {
      if (!child || !p.alive()) return;
      child.kill('SIGKILL');
      await exited(child);
    },
    async stop() {
      if (!child || !p.alive()) return;
      child.kill('SIGCONT');
      child.kill('SIGTERM');
      await exited(child);
    },
  };
  return p;
}

export async function startOwnStores(): Promise<OwnStores> {
  const dir = mkdtempSync('/tmp/cubed-own-stores-');
  const [redisPort, mysqlPort] = [await freePort(), await freePort()];
  const redis = storeProcess(
    'redis',
    ['redis-server', '--bind', '127.0.0.1', '--port', String(redisPort), '--save', '', '--appendonly', 'no', '--dir', dir],
    async () => (await execa('redis-cli', ['-p', String(redisPort), 'ping'], { reject: false })).stdout === 'PONG',
  );
  const data = join(dir, 'mariadb');
  mkdirSync(data);
  // --no-defaults: the machine's my.cnf names its own data dir, user and log.
  await execa('mariadb-install-db', ['--no-defaults', `--datadir=${data}`, '--user=root', '--auth-root-authentication-method=normal', '--skip-test-db']);
  const mariadb = storeProcess(
    'mariadb',
    [
      '/usr/sbin/mariadbd',
      '--no-defaults',
      `--datadir=${data}`,
      `--port=${mysqlPort}`,
      '--bind-address=127.0.0.1',
      `--socket=${join(dir, 'mysql.sock')}`,
      '--user=root',
      `--log-error=${join(dir, 'mariadb.log')}`,
    ],
    async () => (await execa('mysqladmin', ['-h127.0.0.1', `-P${mysqlPort}`, '-uroot', 'ping'], { reject: false })).exitCode === 0,
  );
  await Promise.all([redis.start(), mariadb.start()]);
  const mysqlURL = `mysql://root@127.0.0.1:${mysqlPort}/cube_chaos`;
  return {
    redis,
    mariadb,
    scope: {
      redisURL: `redis://127.0.0.1:${redisPort}/0`,
      mysqlURL,
      keyPrefix: 'cube:chaos:',
      async drop() {
        try {
          if (mariadb.alive()) await new MysqlRecords(mysqlURL).dropDatabase().catch(() => undefined);
        } finally {
          await Promise.all([redis.stop(), mariadb.stop()]);
          rmSync(dir, { recursive: true, force: true });
        }
      },
    },
  };
}
