// cubed's start-up steps shared by its roles: flags, the data dir's lock, the config overlay of
// flags, the OOM score and signals.
import { closeSync, ftruncateSync, mkdirSync, readFileSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { hostname } from 'node:os';
import { join, resolve } from 'node:path';
import pino, { type Logger } from 'pino';
import { resolveConfigDir, packageRoot } from '../../config/loader.js';
import { ConfigStore } from '../../config/store.js';
import type { Config, MasterConfig } from '../../config/schema.js';
import type { ConfigOverride } from '../../api/types.js';
import { HostTaken, lockFile } from '../../cubelet/host-claims.js';

export interface Flags {
  role: 'all' | 'control' | 'compute';
  listen?: string;
  dataDir?: string;
  configDir?: string;
  apiKey?: string;
  nodeId?: string;
  destroyOnExit?: boolean;
  redis?: string;
  mysql?: string;
  redisPrefix?: string;
  control?: string;
  advertise?: string;
  sandboxDomain?: string;
  runtime?: 'ns' | 'microvm' | 'sim';
  simNodes?: string;
  nodeIdPrefix?: string;
}

export function version(): string {
  return (JSON.parse(readFileSync(join(packageRoot(), 'package.json'), 'utf8')) as { version: string }).version;
}

export function parseListen(s: string): { host: string; port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:]*)):(\d{1,5})$/.exec(s);
  const port = Number(m?.[3]);
  if (!m || !(port >= 0 && port <= 65535)) throw new UsageError(`--listen ${s}: expected ADDR:PORT such as 127.0.0.1:3000`);
  return { host: m[1] ?? (m[2] || '0.0.0.0'), port };
}

export class UsageError extends Error {}

/**
 * One daemon per data dir: a second one would fight over the same kernel objects. The pid file
 * is flock'd for the daemon's life (the kernel unlocks it when the process dies), where a pid
 * read back and looked up in /proc raced with a second start and with pid reuse.
 */
export function takePidLock(dataDir: string): () => void {
  const path = join(dataDir, 'cubed.pid');
  const fd = lockFile(path);
  if (fd === undefined) {
    const other = readFileSync(path, 'utf8').trim();
    throw new HostTaken(`another cubed (pid ${other || '?'}) is running with data dir ${dataDir}`);
  }
  ftruncateSync(fd, 0);
  writeSync(fd, `${process.pid}\n`);
  return () => {
    rmSync(path, { force: true });
    closeSync(fd);
  };
}

/** The master config in force with --sandbox-domain laid over it (rebuilt only when the config changes). */
export function apiConfig(config: ConfigStore, flags: Flags): () => MasterConfig {
  const domain = flags.sandboxDomain;
  if (domain === undefined) return () => config.config.master;
  let base: MasterConfig | undefined;
  let merged: MasterConfig | undefined;
  return () => {
    const m = config.config.master;
    if (m !== base || !merged) {
      base = m;
      merged = { ...m, api: { ...m.api, sandbox_domain: domain } };
    }
    return merged;
  };
}

/**
 * What the daemon runs with where the files say otherwise (ConfigView.overrides): its flags, the
 * address it listens on (port 0 in the file picks one) and the host name standing for an empty
 * node_id. The console's config view showed the file's `api.listen 127.0.0.1:3000` for a daemon
 * started with --listen elsewhere.
 */
export function overridesOf(
  flags: Flags,
  cfg: Readonly<Config>,
  found: { listen: { address: string; port: number }; nodeID?: string; dataDir?: string },
): ConfigOverride[] {
  const out: ConfigOverride[] = [];
  // A flag always counts; what the daemon found only when it differs from the file.
  const add = (path: string, value: unknown, inFile: unknown, flag: string | undefined, found?: string) => {
    if (flag) out.push({ path, value, from: flag });
    else if (found && JSON.stringify(value) !== JSON.stringify(inFile)) out.push({ path, value, from: found });
  };
  const { address, port } = found.listen;
  add('master.api.listen', `${address.includes(':') ? `[${address}]` : address}:${port}`, cfg.master.api.listen, flags.listen && '--listen', 'listening');
  add('master.api.sandbox_domain', flags.sandboxDomain, cfg.master.api.sandbox_domain, flags.sandboxDomain && '--sandbox-domain');
  if (found.nodeID !== undefined) add('cubelet.node_id', found.nodeID, cfg.cubelet.node_id, flags.nodeId && '--node-id', 'host name');
  if (found.dataDir !== undefined) add('cubelet.data_dir', found.dataDir, cfg.cubelet.data_dir, flags.dataDir && '--data-dir', 'resolved');
  add('cubelet.runtime', flags.runtime, cfg.cubelet.runtime, flags.runtime && '--runtime');
  return out;
}

/** Config, identity, data dir (locked: one daemon per data dir) and logger of roles all and compute. */
export function openNode(flags: Flags) {
  const configDir = resolveConfigDir(flags.configDir);
  const config = new ConfigStore(configDir);
  const cfg = config.config;
  const nodeID = flags.nodeId ?? (cfg.cubelet.node_id || hostname());
  const dataDir = resolve(flags.dataDir ?? cfg.cubelet.data_dir);
  const listen = parseListen(flags.listen ?? cfg.master.api.listen);
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const log: Logger = pino({ level: process.env.CUBE_LOG_LEVEL ?? 'info', base: { nodeID } });
  const unlock = takePidLock(dataDir);
  protectFromOomKiller(log);
  return { configDir, config, nodeID, dataDir, listen, log, unlock };
}

/**
 * The node's agent is the last thing the host's OOM killer should take: -900 for cubed (and the
 * launch helper it starts), while every sandbox command runs at +500 and its init at +250 (cube-launch).
 */
export const DAEMON_OOM_SCORE_ADJ = -900;
export function protectFromOomKiller(log: Logger): void {
  try {
    writeFileSync('/proc/self/oom_score_adj', `${DAEMON_OOM_SCORE_ADJ}\n`);
  } catch (err) {
    // Without CAP_SYS_RESOURCE (some containers) it stays at 0: still below the sandboxes' +500.
    log.warn({ err }, "could not lower the daemon's oom_score_adj below 0 (no CAP_SYS_RESOURCE): sandboxes (+500) still go first");
  }
}

/** What became of the startup key (KeyBook.bootstrap), in the log. */
export function logBootstrap(log: Logger, outcome: 'migrated' | 'present' | 'not-a-key', from: string): void {
  if (outcome === 'migrated') log.info({ from }, 'API key recorded as the first admin key ("admin"); cubectl key create makes more');
  else if (outcome === 'not-a-key')
    log.warn({ from }, 'the startup API key is not one of the stored API keys (it was removed): clients using it get 401; cubectl key ls lists the keys');
}

/** SIGTERM/SIGINT/SIGUSR2 run `stop` once (exit 0, or 1 when it fails); a second signal exits at once. */
export function onSignals(log: Logger, stop: (signal: string) => Promise<void>): void {
  let stopping = false;
  const handle = async (signal: string) => {
    if (stopping) {
      log.warn({ signal }, 'second signal: exiting now');
      process.exit(1);
    }
    stopping = true;
    try {
      await stop(signal);
      log.info('stopped');
      process.exit(0);
    } catch (err) {
      log.error({ err }, 'shutdown failed');
      process.exit(1);
    }
  };
  process.on('SIGTERM', () => void handle('SIGTERM'));
  process.on('SIGINT', () => void handle('SIGINT'));
  process.on('SIGUSR2', () => void handle('SIGUSR2'));
}
