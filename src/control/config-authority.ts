// The cluster's config as this replica serves it: the store numbers every version by
// compare-and-set (ConfigStore.useAuthority), and `config set` is a compare-and-set over the
// version in force. Where the config in force comes from is the one difference between role all
// and a cluster here, chosen at wiring (wiring.ts): FilesConfig (role all: the files are the
// cluster's config, recorded at start, written by `config set`) or StoreConfig (a cluster: every
// replica follows the store's version, seeded from the files of the first).
import type { Config } from '../config/schema.js';
import type { ConfigChangeMeta, ConfigCommit, ConfigStore, ConfigVersion } from '../config/store.js';
import { CubeError } from '../errors.js';
import type { ConfigChange, ConfigView, ReloadResult } from '../model/config.js';
import { audit, audited } from './admission.js';
import type { ControlContext } from './context.js';
import type { WatchStream } from './watch.js';

/** What the origins write to: the history (and through it the watchers). */
type EventWriter = Pick<WatchStream, 'appendEvent'>;

/** Where the config in force comes from. */
export interface ConfigOrigin {
  /** At start, before this replica serves: puts the cluster's config in force here. */
  start(ctx: ControlContext, events: EventWriter): Promise<void>;
  /** Every tick. */
  tick(ctx: ControlContext, events: EventWriter): Promise<void>;
  /** `config set` of one key (recorded through the authority either way). */
  set(cfg: ConfigStore, path: string, value: unknown, actor?: string): Promise<ReloadResult>;
}

export class ConfigAuthority {
  constructor(
    private readonly ctx: ControlContext,
    private readonly watch: WatchStream,
    private readonly origin: ConfigOrigin,
  ) {}

  /** Puts the cluster's config in force and becomes the config's authority; returns what undoes it. */
  async start(): Promise<(() => void)[]> {
    const { cfg, replicaID } = this.ctx;
    await this.origin.start(this.ctx, this.watch);
    // Every change of the config here (a file edit, a set, the cluster's version put in force)
    // runs in the config's one queue, and is numbered by the store's compare-and-set before it
    // is in force: a change made here either becomes the cluster's next version or is reported
    // lost, and two configs never share a version (both happened when the files' changes were
    // put in force first and offered after, beside the queue).
    cfg.useAuthority({ commit: (next, over, meta, changes) => this.commitConfig(next, over, meta, changes) });
    return [
      () => cfg.useAuthority(undefined),
      cfg.on('change', ({ changes }) => this.watch.broadcast({ type: 'config', config: cfg.view(), changes })),
      // A rejection, or files fixed back to what is in force, change no version but the view's `rejected`.
      cfg.on('reload', (r) => {
        if (!r.ok || r.changes.length === 0) this.watch.broadcast({ type: 'config', config: cfg.view(), changes: [] });
      }),
      cfg.on('rejected', ({ errors, kept }) => {
        void this.watch
          .appendEvent({
            kind: 'config.rejected',
            code: 130483,
            message: `config rejected on ${replicaID}, version ${kept.version} stays: ${errors.map((e) => `${e.path}: ${e.message}`).join('; ')}`,
          })
          .catch((err: unknown) => this.ctx.log.warn({ err }, 'could not record a config rejection event'));
      }),
    ];
  }

  /** The tick's part: the cluster's version in force here within a tick. */
  async tick(): Promise<void> {
    await this.origin.tick(this.ctx, this.watch);
  }

  config(): ConfigView {
    return this.ctx.cfg.view();
  }

  async reloadConfig(actor?: string): Promise<ReloadResult> {
    const r = await this.ctx.cfg.reload();
    await audit(this.ctx.store, actor, 'config.reload', this.ctx.cfg.dir, r.ok ? 'ok' : (r.error ?? []).map((e) => `${e.path}: ${e.message}`).join('; '), {
      version: r.version,
      replica: this.ctx.replicaID,
    });
    return r;
  }

  /**
   * Sets one key of the cluster's config: compare-and-set over the version this replica runs, so
   * of two concurrent sets (on any replicas) one wins and the other answers 409 with the version
   * in force; never both "ok" with one lost. The files are not written: they only seed an empty
   * store (GET /admin/v1/config exports what is in force). Role all (FilesConfig), the files are
   * the cluster's: written, then recorded the same way.
   */
  setConfig(path: string, value: unknown, actor?: string): Promise<ReloadResult> {
    const { cfg, store, replicaID } = this.ctx;
    return audited(store, actor, 'config.set', path, () => this.origin.set(cfg, path, value, actor), { value, replica: replicaID });
  }

  /**
   * The config's authority (ConfigStore.useAuthority): records `next` as the version after
   * `over` if that is still the one in force in the store; otherwise answers the store's.
   */
  private async commitConfig(next: Config, over: ConfigVersion, meta: ConfigChangeMeta, changes: ConfigChange[]): Promise<ConfigCommit> {
    const { store, replicaID } = this.ctx;
    const what = changes.map((c) => `${c.path} ${JSON.stringify(c.from)} -> ${JSON.stringify(c.to)}`).join(', ');
    const reason = meta.reason ?? `files of ${replicaID}: ${changes.map((c) => c.path).join(', ')}`;
    const rec = { version: over.version + 1, at: new Date().toISOString(), actor: meta.actor ?? replicaID, reason, master: next.master, cubelet: next.cubelet };
    if (await store.casConfigHead(rec, over.version)) {
      await this.watch.appendEvent({
        kind: 'config.reloaded',
        message: `config version ${rec.version} (${reason}, by ${rec.actor}) in force on ${replicaID}: ${what}`,
      });
      return { won: true, version: rec.version };
    }
    const head = await store.configHead();
    if (!head) throw new CubeError('STATE_UNAVAILABLE', 'the cluster has no config in force (its store was emptied); a replica seeds it again within a tick');
    // A set that lost answers 409 to its caller; an edit of the files has no caller to tell.
    if (meta.files)
      await this.watch.appendEvent({
        kind: 'config.rejected',
        code: 130409,
        message: `the files of ${replicaID} changed (${what}) but version ${head.version} (${head.reason}, by ${head.actor}) was recorded first; the cluster's version stays`,
      });
    return {
      won: false,
      head: { version: head.version, config: { master: head.master, cubelet: head.cubelet } as Config, actor: head.actor, reason: head.reason },
    };
  }
}

/** Role all: the files are the cluster's config; `config set` writes them. */
export class FilesConfig implements ConfigOrigin {
  /**
   * configFromFiles: the files, as loaded at start, become the config in force: the version in
   * force in the store when they give its config, else a new version after every one the store
   * holds (a restart never renumbers over the history).
   */
  async start(ctx: ControlContext): Promise<void> {
    const { store, cfg, replicaID } = ctx;
    const head = await store.configHead();
    const latest = Math.max(head?.version ?? 0, (await store.latestConfigVersion())?.version ?? 0);
    if (!cfg.resumeNumbering(head && { version: head.version, config: { master: head.master, cubelet: head.cubelet } as Config }, latest)) return;
    const v = cfg.versionInfo;
    const rec = { version: v.version, at: v.loadedAt, actor: replicaID, reason: 'start', master: v.config.master, cubelet: v.config.cubelet };
    if (!(await store.casConfigHead(rec, head?.version ?? 0)))
      throw new CubeError('CONFLICT', `the config in the store moved on while ${replicaID} started; is another replica using this store?`);
  }

  /** Nothing to follow: this replica is the cluster's only one. */
  async tick(): Promise<void> {}

  set(cfg: ConfigStore, path: string, value: unknown, actor?: string): Promise<ReloadResult> {
    return cfg.set(path, value, actor);
  }
}

/** A cluster: the store's config is in force on every replica; the files only seed an empty store. */
export class StoreConfig implements ConfigOrigin {
  /**
   * Puts the cluster's config (the store's) in force on this replica; an empty store is seeded
   * from this replica's config. Runs at start and on every tick, so every replica runs the
   * version in force within a tick. The store is read in the config's queue: a read that a
   * change made here overtook cannot put an older version back.
   */
  async start(ctx: ControlContext, events: EventWriter): Promise<void> {
    const { store, replicaID } = ctx;
    const r = await ctx.cfg.adopt(async (cur) => {
      const head = await store.configHead();
      if (head) return { version: head.version, config: { master: head.master, cubelet: head.cubelet } as Config };
      // Numbered after every version the history or this replica ran, so none is reused.
      const version = Math.max((await store.latestConfigVersion())?.version ?? 0, cur.version) + 1;
      const seeded = await store.casConfigHead(
        {
          version,
          at: new Date().toISOString(),
          actor: replicaID,
          reason: `seeded from the files of ${replicaID}`,
          master: cur.config.master,
          cubelet: cur.config.cubelet,
        },
        0,
      );
      const now = seeded ? undefined : await store.configHead();
      return now ? { version: now.version, config: { master: now.master, cubelet: now.cubelet } as Config } : { version, config: cur.config };
    });
    if (r.changes.length > 0)
      await events.appendEvent({
        kind: 'config.reloaded',
        message: `config version ${r.version} in force on ${replicaID}: ${r.changes.map((c) => `${c.path} ${JSON.stringify(c.from)} -> ${JSON.stringify(c.to)}`).join(', ')}`,
      });
  }

  tick(ctx: ControlContext, events: EventWriter): Promise<void> {
    return this.start(ctx, events);
  }

  set(cfg: ConfigStore, path: string, value: unknown, actor?: string): Promise<ReloadResult> {
    return cfg.change(path, value, actor);
  }
}
