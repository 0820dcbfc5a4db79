// The config in force, with hot reload. Both files are watched (fs.watch on the directory,
// because editors replace files by rename, plus a slow poll for filesystems where watch
// events do not arrive). A new version is validated as a whole and swapped in one
// assignment; an invalid file leaves the old config in force and is reported path by path.
import { watch, type FSWatcher } from 'node:fs';
import { chmod, rename, stat, writeFile } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { TypedEmitter } from '../emitter.js';
import { CubeError } from '../errors.js';
import type { ConfigChange, ConfigOverride, ConfigView, ReloadResult } from '../model/config.js';
import { diffConfig } from './diff.js';
import { setInText } from './edit.js';
import { formatPath, leafValues, resolvePath, type ConfigFile } from './introspect.js';
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

  /** Loads the directory; throws CONFIG_INVALID (every `path: reason`) when a file is invalid. */
  constructor(dir: string, opts: ConfigStoreOptions = {}) {
    super();
    this.dir = dir;
    this.files = configPaths(dir);
    this.seen = { master: readIfExists(this.files.master), cubelet: readIfExists(this.files.cubelet) };
    this.current = this.version(1, loadConfig(dir));
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
    };
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
  set(path: string, value: unknown): Promise<ReloadResult> {
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
      await writeAtomic(this.files[file], edit.text);
      this.seen[file] = edit.text;
      // Written valid: the rejection is over unless the other file is still bad.
      const other = FILES.find((f) => f !== file)!;
      if (parseConfigText(other, this.seen[other]).ok) this.rejected = undefined;
      const result = this.apply({ ...this.current.config, [file]: parsed.value });
      this.inFile = pathsIn(this.seen);
      return result;
    });
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
   * 'change' fires when it differs from what is in force.
   */
  adopt(version: number, config: Config): Promise<ReloadResult> {
    return this.serial(async () => {
      const changes = diffConfig(this.current.config, config);
      if (changes.length === 0 && version === this.current.version) return { ok: true, version, changes };
      const previous = this.current;
      this.prev = previous;
      this.current = this.version(version, config);
      this.inFile = undefined;
      if (changes.length > 0) this.emit('change', { current: this.current, previous, changes });
      return { ok: true, version, changes };
    });
  }

  /**
   * Continues the numbering of a stored history at start-up: the version in force becomes
   * `after + 1` when the history already holds its number, so a restart never overwrites
   * what earlier runs recorded.
   */
  resumeNumbering(after: number): void {
    if (after >= this.current.version) this.current = deepFreeze({ ...this.current, version: after + 1 });
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
    this.queue = run.catch(() => undefined);
    return run;
  }

  private readTexts(): Record<ConfigFile, string | undefined> {
    return { master: readIfExists(this.files.master), cubelet: readIfExists(this.files.cubelet) };
  }

  private applyTexts(texts: Record<ConfigFile, string | undefined>): ReloadResult {
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
    this.seen = texts;
    const master = parseConfigText('master', texts.master);
    const cubelet = parseConfigText('cubelet', texts.cubelet);
    if (removed.length > 0 || !master.ok || !cubelet.ok) {
      const errors = [...removed, ...(master.ok ? [] : master.errors), ...(cubelet.ok ? [] : cubelet.errors)];
      const result: ReloadResult = { ok: false, version: this.current.version, changes: [], error: errors };
      this.rejected = { at: new Date().toISOString(), errors };
      this.emit('rejected', { errors, kept: this.current });
      this.emit('reload', result);
      return result;
    }
    this.rejected = undefined;
    const result = this.apply({ master: master.value, cubelet: cubelet.value });
    this.inFile = pathsIn(texts);
    return result;
  }

  private apply(next: Config): ReloadResult {
    const changes = diffConfig(this.current.config, next);
    if (changes.length > 0) {
      const previous = this.current;
      this.prev = previous;
      this.current = this.version(previous.version + 1, next);
      this.emit('change', { current: this.current, previous, changes });
    }
    const result: ReloadResult = { ok: true, version: this.current.version, changes };
    this.emit('reload', result);
    return result;
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
      if (FILES.some((f) => texts[f] !== this.seen[f])) this.applyTexts(texts);
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
  const mode = await stat(path).then((s) => s.mode & 0o7777, () => 0o644);
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
