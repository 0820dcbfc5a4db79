// The config in force as the control plane shows it, and what a reload or a `config set` changed
// (built by src/config/store.ts).

export interface ConfigChange {
  path: string;
  from: unknown;
  to: unknown;
  needsRestart: boolean;
}

export interface ConfigView {
  version: number;
  /** ISO 8601. */
  loadedAt: string;
  master: unknown;
  cubelet: unknown;
  files: { master: string; cubelet: string };
  /** Set while the files on disk are rejected (the version above stays in force); cleared when they validate again. */
  rejected?: { at: string; errors: { path: string; message: string }[] };
  /**
   * Values in force that are not the files': daemon flags (`--listen`, `--data-dir`, `--node-id`,
   * `--sandbox-domain`, `--runtime`) and what the daemon worked out (the address it listens on,
   * the host name as node id). Paths as the console shows them: `master.api.listen`.
   */
  overrides?: ConfigOverride[];
  /** Paths (`master.api.listen`) the files on disk set; the other keys are the schema's defaults. Absent where the config came from a cluster store. */
  inFile?: string[];
  /**
   * Keys that wait for a restart (`master.api.listen`, `cubelet.tap_init_num`) whose value above
   * is not the one the running process uses: `running` is that one. Absent: none pending.
   */
  restartPending?: { path: string; running: unknown }[];
}

export interface ConfigOverride {
  path: string;
  value: unknown;
  /** Where the value came from: the flag (`--listen`), or `listening` / `host name` for what the daemon found. */
  from: string;
}

export interface ReloadResult {
  ok: boolean;
  version: number;
  changes: ConfigChange[];
  /** Set when the new file was rejected; the old config stays in force. */
  error?: { path: string; message: string }[];
}
