// The config in force, with hot reload. Both files are watched (fs.watch on the directory,
// because editors replace files by rename, plus a slow poll for filesystems where watch
// events do not arrive). A new version is validated as a whole and swapped in one
// assignment; an invalid file leaves the old config in force and is reported path by path.
// Where the config is a cluster's (its versions live in a store), an authority numbers every
// change before it is put in force here, and every change made here (a file edit, a set, the
// cluster's version put in force) runs in one queue: no change can slip between another's
// compare-and-set and its outcome.
import { watch, type FSWatcher } from 'node:fs';
import { isDeepStrictEqual } from 'node:util';
import { chmod, rename, stat, writeFile } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { TypedEmitter } from '../emitter.js';
import { CubeError } from '../errors.js';
import type { ConfigChange, ConfigOverride, ConfigView, ReloadResult } from '../model/config.js';
import { diffConfig, patchConfig } from './diff.js';
import { setInText } from './edit.js';
import { formatPath, leafValues, needsRestart, resolvePath, type ConfigFile } from './introspect.js';
import { configPaths, FILE_NAMES, formatIssues, loadConfig, parseConfigText, parseSyntax, readIfExists, validate, type ConfigIssue } from './loader.js';
import type { Config } from './schema.js';

export interface ConfigVersion {
  version: number;
  /** ISO 8601. */
  loadedAt: string;
  /** Deep-frozen: readers may keep it as a consistent snapshot. */
  config: Readonly<Config>;
}

export interface ConfigEvents extends Record<string, unknown> {
  /** A new version is in force. `changes` is never empty. */
  change: { current: ConfigVersion; previous: ConfigVersion; changes: ConfigChange[] };
  /** A file was rejected; `kept` is the version still in force. */
  rejected: { errors: ConfigIssue[]; kept: ConfigVersion };
  /** Every reload and set, whatever its outcome. */
  reload: ReloadResult;
}

export interface ConfigStoreOptions {
  /** Watch the files and reload on change (default true). */
  watch?: boolean;
  /** Poll interval of the fallback, ms (default 5000). */
  pollMs?: number;
  /** Wait after a watch event before reading, so a burst of writes reads once (default 50). */
  debounceMs?: number;
}

/** Who makes a change and why, as the config history records it. */
export interface ConfigChangeMeta {
  /** API key id, or undefined for this process itself (its files). */
  actor?: string;
  /** "set host.quota.paused_resource_release_ratio"; undefined for an edit of the files (its changes say what). */
  reason?: string;
  /** The change comes from this process's files (an edit, a reload, a set that writes them). */
  files: boolean;
}

/** The outcome of offering a change to the authority: its version, or the version in force instead. */
export type ConfigCommit = { won: true; version: number } | { won: false; head: ConfigHead };

/** The version in force where versions are numbered (a cluster's store). */
export interface ConfigHead {
  version: number;
  config: Config;
  actor: string;
  reason: string;
}

/**
 * Where versions are numbered when the config is kept elsewhere (a cluster's store, see
 * ControlPlaneService): a change is put in force here only once `commit` recorded it as the
 * version after `over`; when another change came first, the version in force there is put in
 * force here instead and the change is reported lost.
 */
export interface ConfigAuthority {
  commit(next: Config, over: ConfigVersion, meta: ConfigChangeMeta, changes: ConfigChange[]): Promise<ConfigCommit>;
}

const FILES: ConfigFile[] = ['master', 'cubelet'];

function deepFreeze<T>(v: T): T {
  if (typeof v === 'object' && v !== null && !Object.isFrozen(v)) {
    Object.freeze(v);
    for (const x of Object.values(v)) deepFreeze(x);
  }
  return v;
}

export class ConfigStore extends TypedEmitter<ConfigEvents> {
  readonly dir: string;
  readonly files: Record<ConfigFile, string>;
  private current: ConfigVersion;
  private prev: ConfigVersion | undefined;
  /** File texts last read (applied or rejected), so an unchanged file is not reported twice. */
  private seen: Record<ConfigFile, string | undefined>;
  private queue: Promise<unknown> = Promise.resolve();
  private watcher: FSWatcher | undefined;
  private poller: NodeJS.Timeout | undefined;
  private debounce: NodeJS.Timeout | undefined;
  private closed = false;
  /** The files on disk as last read do not validate (ConfigView.rejected). */
  private rejected: ConfigView['rejected'];
  /** Values the daemon put over the files (flags, the bound address): ConfigView.overrides. */
  private overrides: ConfigOverride[] = [];
  /** Paths the files of the version in force set (ConfigView.inFile); undefined once a cluster's version was adopted. */
  private inFile: string[] | undefined;
  /**
   * The config the files gave when last read valid. A file edit changes what it changed, over
   * the config in force (which a cluster's version may have replaced): it does not put back
   * every other key the files hold.
   */
  private fromFiles: Config;
  /** The config this process started with: what restart keys still run with (ConfigView.restartPending). */
  private readonly started: Readonly<Config>;
  private pending: { version: number; list: NonNullable<ConfigView['restartPending']> } | undefined;
  private authority: ConfigAuthority | undefined;

  /** Loads the directory; throws CONFIG_INVALID (every `path: reason`) when a file is invalid. */
  constructor(dir: string, opts: ConfigStoreOptions = {}) {
    super();
    this.dir = dir;
    this.files = configPaths(dir);
    this.seen = { master: readIfExists(this.files.master), cubelet: readIfExists(this.files.cubelet) };
    this.current = this.version(1, loadConfig(dir));
    this.fromFiles = this.current.config;
    this.started = this.current.config;
    this.inFile = pathsIn(this.seen);
    if (opts.watch ?? true) this.startWatching(opts.pollMs ?? 5000, opts.debounceMs ?? 50);
  }

  get config(): Readonly<Config> {
    return this.current.config;
  }

  get versionInfo(): ConfigVersion {
    return this.current;
  }

  /** The version before the one in force (undefined until the first change). */
  get previous(): ConfigVersion | undefined {
    return this.prev;
  }

  view(): ConfigView {
    return {
      version: this.current.version,
      loadedAt: this.current.loadedAt,
      master: this.current.config.master,
      cubelet: this.current.config.cubelet,
      files: { ...this.files },
      ...(this.rejected ? { rejected: this.rejected } : {}),
      ...(this.overrides.length ? { overrides: this.overrides } : {}),
      ...(this.inFile ? { inFile: this.inFile } : {}),
      ...(this.restartPending().length ? { restartPending: this.restartPending() } : {}),
    };
  }

  /**
   * Restart keys whose value in force differs from the one this process started with: the
   * console showed the file's tap_init_num as in force while the old one ran. Computed once per version.
   */
  private restartPending(): NonNullable<ConfigView['restartPending']> {
    if (this.pending?.version === this.current.version) return this.pending.list;
    const list: NonNullable<ConfigView['restartPending']> = [];
    for (const file of ['master', 'cubelet'] as const) {
      const running = new Map(leafValues(this.started[file]).map((l) => [l.segs.join('.'), l.value]));
      for (const { segs, value } of leafValues(this.current.config[file])) {
        const key = segs.join('.');
        if (needsRestart(file, segs) && !isDeepStrictEqual(running.get(key), value)) list.push({ path: `${file}.${key}`, running: running.get(key) });
      }
    }
    this.pending = { version: this.current.version, list };
    return list;
  }

  /**
   * Says which values in force are not the files' (a daemon flag, the address it listens on):
   * the config view showed `api.listen 127.0.0.1:3000` for a daemon started with --listen elsewhere.
   */
  setOverrides(overrides: readonly ConfigOverride[]): void {
    this.overrides = [...overrides];
  }

  /** Re-reads both files. Rejected files keep the old config (ok=false with the reasons). */
  reload(): Promise<ReloadResult> {
    return this.serial(async () => this.applyTexts(this.readTexts()));
  }

  /**
   * Sets one key (e.g. `host.quota.paused_resource_release_ratio`), validates the file as a
   * whole, writes it (comments kept; see edit.ts for TOML) and applies it live.
   * Throws CONFIG_INVALID with `path: reason` and changes nothing when the value is refused.
   */
  set(path: string, value: unknown, actor?: string): Promise<ReloadResult> {
    return this.serial(async () => {
      const { file, segs } = resolved(path);
      const onDisk = readIfExists(this.files[file]);
      let edit;
      try {
        edit = setInText(file, onDisk, segs, value);
      } catch (e) {
        throw invalid([{ path: formatPath(segs), message: (e as Error).message }]);
      }
      const parsed = parseConfigText(file, edit.text);
      if (!parsed.ok) throw invalid(parsed.errors);
      const fromFiles = { ...this.fromFiles, [file]: parsed.value };
      const next = this.overFiles(fromFiles);
      if (!next.ok) throw invalid(next.errors);
      await writeAtomic(this.files[file], edit.text);
      this.seen[file] = edit.text;
      // Written valid: the rejection is over unless the other file is still bad.
      const other = FILES.find((f) => f !== file)!;
      if (parseConfigText(other, this.seen[other]).ok) this.rejected = undefined;
      const { result } = await this.apply(next.value, { ...(actor ? { actor } : {}), reason: `set ${path}`, files: true });
      this.fromFiles = fromFiles;
      if (result.ok) this.inFile = pathsIn(this.seen);
      return result;
    });
  }

  /**
   * Sets one key in the config in force without writing the files (a cluster's config, kept by
   * the authority): validated as a whole over the version in force when its turn comes. Throws
   * CONFIG_INVALID when the value is refused and CONFLICT (the version in force, then put in
   * force here) when another change was recorded first.
   */
  change(path: string, value: unknown, actor?: string): Promise<ReloadResult> {
    return this.serial(async () => {
      const { result, lostTo } = await this.apply(this.withValue(path, value), { ...(actor ? { actor } : {}), reason: `set ${path}`, files: false });
      if (lostTo)
        throw new CubeError(
          'CONFLICT',
          `config changed meanwhile: version ${lostTo.version} (${lostTo.reason}, by ${lostTo.actor}) is in force, ${path} was not set; read it and set again`,
        );
      return result;
    });
  }

  /** Numbers every later change through `authority` (undefined: numbered here, as without a cluster). */
  useAuthority(authority: ConfigAuthority | undefined): void {
    this.authority = authority;
  }

  /**
   * The config in force with one key set (e.g. `host.quota.paused_resource_release_ratio`),
   * validated as a whole; nothing is written or applied. Throws CONFIG_INVALID like set().
   */
  withValue(path: string, value: unknown): Config {
    const { file, segs } = resolved(path);
    const tree = structuredClone(this.current.config[file]) as Record<string, unknown>;
    let node = tree;
    for (const seg of segs.slice(0, -1)) {
      if (typeof node[seg] !== 'object' || node[seg] === null) node[seg] = {};
      node = node[seg] as Record<string, unknown>;
    }
    node[segs.at(-1)!] = value;
    const checked = validate(file, tree);
    if (!checked.ok) throw invalid(checked.errors);
    return { ...this.current.config, [file]: checked.value };
  }

  /**
   * Puts `config` in force as `version` (a cluster's replicas follow the version in the store):
   * 'change' fires when it differs from what is in force. A function is called when its turn in
   * the queue comes, with the version then in force: what it reads (the store's head, this
   * node's own cubelet section) cannot be overtaken by a change made meanwhile. Undefined: nothing to adopt.
   */
  adopt(version: number, config: Config): Promise<ReloadResult>;
  adopt(next: (current: ConfigVersion) => Promise<{ version: number; config: Config } | undefined>): Promise<ReloadResult>;
  adopt(a: number | ((current: ConfigVersion) => Promise<{ version: number; config: Config } | undefined>), b?: Config): Promise<ReloadResult> {
    return this.serial(async () => {
      const next = typeof a === 'number' ? { version: a, config: b! } : await a(this.current);
      if (!next) return { ok: true, version: this.current.version, changes: [] };
      const result = this.putInForce(next.version, next.config);
      this.inFile = undefined;
      return result;
    });
  }

  /**
   * Continues a stored history at start-up. Files that give the config of `head` (the version in
   * force when the history was last written) keep its version: a restart is no change (each start
   * recorded a new version, so a daemon restarted on the same files showed "config v2").
   * Otherwise the files are the version after `latest` (the highest the history holds), so a
   * restart never overwrites what earlier runs recorded. Answers whether that is a new version,
   * for the caller to record.
   */
  resumeNumbering(head: { version: number; config: Config } | undefined, latest: number): boolean {
    if (head && diffConfig(head.config, this.current.config).length === 0) {
      this.current = deepFreeze({ ...this.current, version: head.version });
      return false;
    }
    if (latest >= this.current.version) this.current = deepFreeze({ ...this.current, version: latest + 1 });
    return true;
  }

  close(): void {
    this.closed = true;
    this.watcher?.close();
    clearInterval(this.poller);
    clearTimeout(this.debounce);
  }

  private version(version: number, config: Config): ConfigVersion {
    return deepFreeze({ version, loadedAt: new Date().toISOString(), config });
  }

  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.queue.then(fn, fn);
    this.queue = run.catch(() => undefined); // the caller gets run's error; the queue only orders
    return run;
  }

  private readTexts(): Record<ConfigFile, string | undefined> {
    return { master: readIfExists(this.files.master), cubelet: readIfExists(this.files.cubelet) };
  }

  private async applyTexts(texts: Record<ConfigFile, string | undefined>): Promise<ReloadResult> {
    // A file that vanishes (rm, or an editor between unlink and rename) is not a request for
    // the defaults: that would silently undo every setting. Only a start reads "absent" so.
    const removed = FILES.filter((f) => texts[f] === undefined && this.seen[f] !== undefined).map((f) => ({
      path: FILE_NAMES[f],
      message: 'file was removed; the config in force stays (restore the file, or restart cubed to use the defaults)',
    }));
    // Likewise an empty file: mostly a writer caught between truncate and write.
    const emptied = FILES.filter((f) => texts[f] !== undefined && texts[f]!.trim() === '' && (this.seen[f] ?? '').trim() !== '').map((f) => ({
      path: FILE_NAMES[f],
      message: 'file is empty; the config in force stays (a write in progress is picked up when it completes)',
    }));
    removed.push(...emptied);
    const seenBefore = this.seen;
    this.seen = texts;
    const master = parseConfigText('master', texts.master);
    const cubelet = parseConfigText('cubelet', texts.cubelet);
    const fromFiles = master.ok && cubelet.ok ? { master: master.value, cubelet: cubelet.value } : undefined;
    const next = fromFiles && this.overFiles(fromFiles);
    if (removed.length > 0 || !fromFiles || !next?.ok) {
      const errors = [...removed, ...(master.ok ? [] : master.errors), ...(cubelet.ok ? [] : cubelet.errors), ...(next && !next.ok ? next.errors : [])];
      const result: ReloadResult = { ok: false, version: this.current.version, changes: [], error: errors };
      this.rejected = { at: new Date().toISOString(), errors };
      this.emit('rejected', { errors, kept: this.current });
      this.emit('reload', result);
      return result;
    }
    this.rejected = undefined;
    let result: ReloadResult;
    try {
      ({ result } = await this.apply(next.value, { files: true }));
    } catch (e) {
      // The authority could not be asked (its store is away): the edit is read again by the next poll.
      this.seen = seenBefore;
      throw e;
    }
    this.fromFiles = fromFiles;
    if (result.ok) this.inFile = pathsIn(texts);
    return result;
  }

  /** The config in force with what the files changed since they were last read valid, validated as a whole. */
  private overFiles(fromFiles: Config): { ok: true; value: Config } | { ok: false; errors: ConfigIssue[] } {
    const patched = patchConfig(this.current.config, this.fromFiles, fromFiles);
    const master = validate('master', patched.master);
    const cubelet = validate('cubelet', patched.cubelet);
    if (master.ok && cubelet.ok) return { ok: true, value: { master: master.value, cubelet: cubelet.value } };
    return { ok: false, errors: [...(master.ok ? [] : master.errors), ...(cubelet.ok ? [] : cubelet.errors)] };
  }

  /**
   * Makes `next` the version after the one in force: numbered here, or by the authority. When
   * the authority recorded another change first, its version is put in force instead and the
   * result says the change was lost (ok false, `lostTo`).
   */
  private async apply(next: Config, meta: ConfigChangeMeta): Promise<{ result: ReloadResult; lostTo?: ConfigHead }> {
    const changes = diffConfig(this.current.config, next);
    let out: { result: ReloadResult; lostTo?: ConfigHead };
    if (changes.length === 0) out = { result: { ok: true, version: this.current.version, changes } };
    else if (!this.authority) out = { result: this.putInForce(this.current.version + 1, next) };
    else {
      const c = await this.authority.commit(next, this.current, meta, changes);
      if (c.won) out = { result: this.putInForce(c.version, next) };
      else {
        const { version, actor, reason } = c.head;
        this.putInForce(version, c.head.config);
        this.inFile = undefined;
        const message = `version ${version} (${reason}, by ${actor}) was recorded first; this change was not applied`;
        out = { result: { ok: false, version, changes: [], error: changes.map((x) => ({ path: x.path, message })) }, lostTo: c.head };
      }
    }
    this.emit('reload', out.result);
    return out;
  }

  /** Puts `config` in force as `version`; 'change' fires when the config differs. */
  private putInForce(version: number, config: Config): ReloadResult {
    const changes = diffConfig(this.current.config, config);
    if (changes.length === 0 && version === this.current.version) return { ok: true, version, changes };
    const previous = this.current;
    this.prev = previous;
    this.current = this.version(version, config);
    if (changes.length > 0) this.emit('change', { current: this.current, previous, changes });
    return { ok: true, version, changes };
  }

  private startWatching(pollMs: number, debounceMs: number): void {
    const names = new Set(Object.values(this.files).map((p) => basename(p)));
    const trigger = () => {
      clearTimeout(this.debounce);
      this.debounce = setTimeout(() => void this.checkFiles(), debounceMs);
    };
    try {
      this.watcher = watch(this.dir, { persistent: false }, (_event, name) => {
        if (name === null || names.has(String(name))) trigger();
      });
      // A vanished directory or an exhausted inotify budget leaves the poll in charge.
      this.watcher.on('error', () => this.watcher?.close());
    } catch {
      this.watcher = undefined;
    }
    this.poller = setInterval(() => void this.checkFiles(), pollMs);
    this.poller.unref();
  }

  private checkFiles(): Promise<unknown> {
    if (this.closed) return Promise.resolve();
    // Unlike an explicit reload, a file seen before (applied or rejected) is not reported again.
    return this.serial(async () => {
      const texts = this.readTexts();
      if (FILES.some((f) => texts[f] !== this.seen[f])) await this.applyTexts(texts);
    }).catch((e: unknown) => {
      // An unreadable file (permissions, I/O) is reported like an invalid one.
      const errors = [{ path: this.dir, message: (e as Error).message }];
      this.rejected = { at: new Date().toISOString(), errors };
      this.emit('rejected', { errors, kept: this.current });
    });
  }
}

/** "a.b: reason" -> {path, message}. */
/** The file and key path of a dotted key; CONFIG_INVALID when there is no such key. */
function resolved(path: string): ReturnType<typeof resolvePath> {
  try {
    return resolvePath(path);
  } catch (e) {
    throw invalid([issueOf((e as Error).message)]);
  }
}

function issueOf(line: string): ConfigIssue {
  const i = line.indexOf(': ');
  return i < 0 ? { path: '', message: line } : { path: line.slice(0, i), message: line.slice(i + 2) };
}

function invalid(errors: ConfigIssue[]): CubeError {
  return new CubeError('CONFIG_INVALID', formatIssues(errors), { details: { errors } });
}

/** Write to a temporary file beside it and rename, so readers (and the watcher) never see half a file. */
async function writeAtomic(path: string, text: string): Promise<void> {
  const tmp = join(dirname(path), `.${basename(path)}.${process.pid}.tmp`);
  const mode = await stat(path).then(
    (s) => s.mode & 0o7777,
    () => 0o644,
  );
  await writeFile(tmp, text, { mode });
  await chmod(tmp, mode);
  await rename(tmp, path);
}

export type { ConfigIssue };

/** The leaf paths (`master.api.listen`) the file texts set, as the console's config rows name them. */
function pathsIn(texts: Record<ConfigFile, string | undefined>): string[] {
  return FILES.flatMap((f) => {
    const raw = parseSyntax(f, texts[f]);
    // An empty file is one empty table: no key set.
    return raw.ok ? leafValues(raw.value).flatMap((l) => (l.segs.length ? [[f, ...l.segs].join('.')] : [])) : [];
  });
}
