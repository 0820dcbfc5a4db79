// Template builds (the E2B `Template.build` flow): a build runs its steps one at a time, each in
// a sandbox of its own on the ns runtime (a hostile step is contained like any code: cgroups,
// namespaces, the node's network policy), made from the layers so far. A RUN, COPY or WORKDIR
// step yields a layer: the sandbox's overlay upper dir, snapshotted into the layer store under the
// sha256 of its tree. Steps are cached by the chain (parent key, step, files hash); `force`
// skips the cache. A template with a start and ready command is started once at the end and
// registered only when its ready command passes (ready-check.ts). A build that fails registers
// nothing and drops the layers it added.
// Builds hold the template store's writer lock, so they run one at a time (and a template rm
// never removes a layer a build is taking).
import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, readdir, rename, rm, rmdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import type { Logger } from 'pino';
import type { Config } from '../../config/schema.js';
import { CubeError, toCubeError } from '../../errors.js';
import { newSandboxID } from '../../ids.js';
import type { NetworkAgent } from '../../network/types.js';
import { ensureStoreDir, scratchDir } from '../layers/import.js';
import { parseImageRef, pullLocked, resolveImage, type ImagePeers } from '../layers/pull.js';
import { BuildRecordFiles, type BuildRecord, type BuildLogEntry } from './record.js';
import { BuildUploads } from './uploads.js';
import { EMPTY_TREE, treeDigest, writeTree } from '../layers/tree.js';
import { DEFAULT_CONFIG, etcHosts, layerDir, layersRoot, parseTemplateRef, type TemplateRecord, type TemplateStore } from '../store.js';
import type { RuntimeDriver, SandboxHandle, SandboxStorage, TemplateConfig, TemplateRef } from '../../runtime/types.js';
import { Tail } from '../../cubelet/start-cmd.js';
import { checkReady } from './ready-check.js';
import { afterLayer, applyStep, copyTarget, describeStep, makesLayer, parseBuild, stepKey, type BuildPlan, type Step } from './steps.js';
import { readTextOrAbsent } from '../../fsx.js';
import { HOST_TEMPLATE, splitTemplateRef } from '../../model/template.js';

export type { BuildStatus, BuildLogEntry, BuildRecord } from './record.js';

export interface TemplateBuilderOptions {
  dataDir: string;
  templates: TemplateStore;
  driver: RuntimeDriver;
  network: NetworkAgent;
  config: () => Config;
  log: Logger;
  /** A cluster compute node: fetches a base template the node lacks from the cluster (templates/fetch.ts) before the build takes it. */
  fetchTemplate?: (name: string) => Promise<unknown>;
  /** A cluster compute node: a registry base is taken from a node holding it, or pulled by one node at a time (layers/pull.ts pullLocked). */
  peers?: ImagePeers;
}

/** Builds kept for status queries (oldest dropped first). */
const KEEP_BUILDS = 200;
/** A step's output kept in the failure reason. */
const TAIL_BYTES = 2048;
/** A RUN step is killed after this long (E2B's builds are bounded too). */
const STEP_TIMEOUT_MS = 30 * 60_000;
/**
 * A build's log keeps at most this many lines of its steps' output (cubed's own lines come on
 * top: a few per step), each cut at OUTPUT_LINE_CHARS; what is past them is counted in one line.
 * A step printing a million lines grew cubed by 300 MiB, stalled the API for 6.6-10 s (the
 * record written again as it grew) and left an 86 MB record read back at every start.
 */
export const BUILD_OUTPUT_LINES = 10_000;
export const OUTPUT_LINE_CHARS = 2000;

class StepFailed extends CubeError {
  constructor(
    readonly step: number,
    message: string,
  ) {
    super('BUILD_STEP_FAILED', message);
  }
}

export class TemplateBuilder {
  private readonly builds = new Map<string, BuildRecord>();
  /** The uploads COPY steps take, per API key. */
  private readonly uploads: BuildUploads;
  private readonly cacheFile: string;
  /** `<dataDir>/builds/<buildID>.json`: each build's record, so its status and logs outlive a restart. */
  private readonly buildsDir: string;
  /** The builds' records on disk. */
  private readonly records: BuildRecordFiles;

  constructor(private readonly o: TemplateBuilderOptions) {
    this.uploads = new BuildUploads(o.dataDir, o.templates.unpackMaxBytes);
    this.cacheFile = join(layersRoot(o.dataDir), 'build-cache.json');
    this.buildsDir = join(o.dataDir, 'builds');
    this.records = new BuildRecordFiles(this.buildsDir, o.log);
  }

  /**
   * Loads the builds a previous run recorded (the newest KEEP_BUILDS). One that was building when
   * the daemon stopped ended there: it is `error`, registered nothing (its captured layers, held by
   * no template, go with the store's next garbage collection), and says so in its status.
   */
  async restore(): Promise<void> {
    const names = (await readdir(this.buildsDir).catch(() => [] as string[])).filter((n) => n.endsWith('.json'));
    const found: BuildRecord[] = [];
    for (const n of names) {
      try {
        const r = JSON.parse(await readFile(join(this.buildsDir, n), 'utf8')) as Partial<BuildRecord> | null;
        if (typeof r?.buildID !== 'string' || typeof r.templateID !== 'string' || typeof r.createdAt !== 'string' || !Array.isArray(r.logs))
          throw new Error('not a build record');
        found.push(r as BuildRecord);
      } catch (err) {
        this.o.log.warn({ err, file: n }, 'unreadable build record skipped');
      }
    }
    found.sort((a, b) => a.createdAt.localeCompare(b.createdAt));
    for (const b of found.slice(0, Math.max(0, found.length - KEEP_BUILDS))) await rm(join(this.buildsDir, `${b.buildID}.json`), { force: true });
    for (const b of found.slice(-KEEP_BUILDS)) {
      this.builds.set(b.buildID, b);
      if (b.status !== 'building') continue;
      const message = 'cubed stopped during the build: nothing was registered; start a new build';
      this.log(b, 'error', `Build failed: ${message}`);
      b.status = 'error';
      b.reason = { message, logEntries: b.logs.filter((l) => l.level === 'error') };
      b.finishedAt = b.updatedAt;
      this.records.save(b);
    }
  }

  /** Resolves once the build records changed so far are on disk (shutdown). */
  async flush(): Promise<void> {
    await this.records.flush();
  }

  /** `POST /v3/templates`: a build of NAME[:TAG] (plus `tags`), waiting for its steps. */
  request(o: { name: string; tags?: string[]; cpuCount?: number; memoryMB?: number }): BuildRecord {
    const target = parseTemplateRef(o.name);
    if (target.name === HOST_TEMPLATE || target.name === 'base') throw new CubeError('CONFLICT', `template name '${target.name}' is reserved`);
    const tagged = o.name.includes(':');
    const tags = [...new Set([...(tagged ? [target.tag] : []), ...(o.tags ?? [])])];
    const refs = (tags.length ? tags : ['latest']).map((t) => parseTemplateRef(`${target.name}:${t}`).ref);
    const spec = this.o.config().master.sandbox.default_spec;
    const now = new Date().toISOString();
    const b: BuildRecord = {
      templateID: target.name,
      buildID: randomUUID(),
      refs,
      status: 'waiting',
      logs: [],
      cpuCount: o.cpuCount ?? spec.cpus,
      memoryMB: o.memoryMB ?? spec.memory_mib,
      createdAt: now,
      updatedAt: now,
    };
    this.builds.set(b.buildID, b);
    this.records.save(b);
    for (const id of [...this.builds.keys()].slice(0, Math.max(0, this.builds.size - KEEP_BUILDS))) {
      this.builds.delete(id);
      void rm(join(this.buildsDir, `${id}.json`), { force: true });
    }
    return b;
  }

  get(templateID: string, buildID: string): BuildRecord {
    const b = this.builds.get(buildID);
    if (!b || b.templateID !== templateID) throw new CubeError('NOT_FOUND', `build ${buildID} of template ${templateID} not found`);
    return b;
  }

  /** Builds of a template, newest first. */
  list(templateID: string): BuildRecord[] {
    return [...this.builds.values()].filter((b) => b.templateID === templateID).reverse();
  }

  /** Whether the files of a COPY (by the SDK's hash) were uploaded by `owner`. */
  hasFiles(hash: string, owner?: string): boolean {
    return this.uploads.has(hash, owner);
  }

  /** Keeps an upload under its files hash, among `owner`'s (BuildUploads.put). */
  async putFiles(hash: string, body: Readable, owner?: string): Promise<void> {
    return this.uploads.put(hash, body, owner);
  }

  /** Whether `owner`'s upload for a COPY holds what its files hash says (BuildUploads.verify). */
  async verifyUpload(s: { src: string; dest: string; filesHash: string }, owner?: string): Promise<boolean | undefined> {
    return this.uploads.verify(s, owner);
  }

  /**
   * `POST /v2/templates/{id}/builds/{buildID}`: checks the body (400), the base (404) and the
   * uploads (400) at once, then runs the steps in the background; the status follows them.
   */
  async start(templateID: string, buildID: string, body: unknown, owner?: string): Promise<BuildRecord> {
    const uploads = this.uploads.owner(owner);
    const b = this.get(templateID, buildID);
    if (b.status !== 'waiting' || b.logs.length) throw new CubeError('CONFLICT', `build ${buildID} was started already (${b.status})`);
    const plan = parseBuild(body);
    plan.from = await this.resolveFrom(plan.from); // 404 (template, image, tag), 403 (registry credentials), 503 (registry down) now rather than a failed build
    const missing = plan.steps.flatMap((s, i) => (s.type === 'COPY' && !this.hasFiles(s.filesHash, owner) ? [`step ${i + 1} (${describeStep(s)})`] : []));
    if (missing.length)
      throw new CubeError('BAD_REQUEST', `the files of ${missing.join(', ')} were not uploaded (GET /templates/${templateID}/files/{hash} gives the link)`);
    for (const [i, s] of plan.steps.entries()) {
      if (s.type !== 'COPY' || (await this.verifyUpload(s, owner)) !== false) continue;
      await rm(this.uploads.file(uploads, s.filesHash), { force: true });
      this.o.log.warn({ templateID, buildID, hash: s.filesHash }, 'an upload did not match its files hash: removed');
      throw new CubeError(
        'BAD_REQUEST',
        `the files uploaded for step ${i + 1} (${describeStep(s)}) do not match its files hash ${s.filesHash}: removed; upload them again (GET /templates/${templateID}/files/{hash} gives the link)`,
      );
    }
    this.log(b, 'info', `Build ${buildID} of ${b.refs.join(', ')}: ${plan.steps.length} step(s)`);
    void this.run(b, plan, uploads);
    return b;
  }

  private log(b: BuildRecord, level: BuildLogEntry['level'], message: string, step?: number): void {
    b.logs.push({ timestamp: new Date().toISOString(), level, message, ...(step !== undefined ? { step: String(step) } : {}) });
    b.updatedAt = new Date().toISOString();
    this.records.save(b);
  }

  /** `uploads`: whose uploads the COPY steps take (uploadsOf). */
  private async run(b: BuildRecord, plan: BuildPlan, uploads: string): Promise<void> {
    const added: string[] = [];
    try {
      await this.o.templates.exclusive(async () => {
        b.status = 'building';
        this.log(b, 'info', 'Building');
        try {
          await this.steps(b, plan, added, uploads);
        } catch (e) {
          await this.o.templates.dropUnusedLayers(added);
          throw e;
        }
      });
      b.status = 'ready';
      this.log(b, 'info', `Template ${b.refs.join(', ')} is ready (${b.cached} step(s) cached, ${b.ran} run)`);
    } catch (e) {
      const err = toCubeError(e, 'INTERNAL');
      const step = err instanceof StepFailed ? String(err.step) : undefined;
      this.log(b, 'error', `Build failed: ${err.message}`, err instanceof StepFailed ? err.step : undefined);
      b.status = 'error';
      b.reason = { message: err.message, ...(step ? { step } : {}), logEntries: b.logs.filter((l) => l.level === 'error') };
      this.o.log.warn({ buildID: b.buildID, refs: b.refs, code: err.code, err: err.message }, 'template build failed');
    } finally {
      b.finishedAt = b.updatedAt = new Date().toISOString();
      this.records.save(b);
    }
  }

  private async steps(b: BuildRecord, plan: BuildPlan, added: string[], uploads: string): Promise<void> {
    const base = await this.base(plan.from, { b, added });
    await ensureStoreDir(this.o.dataDir);
    const cache = await this.readCache();
    let key = base.key;
    let config = base.config;
    const layers = [...base.layers];
    let cached = 0;
    let ran = 0;
    for (const [i, s] of plan.steps.entries()) {
      const n = i + 1;
      const k = stepKey(key, s, uploads);
      config = applyStep(config, s);
      if (!makesLayer(s)) {
        this.log(b, 'info', `[${n}/${plan.steps.length}] ${describeStep(s)}`, n);
        key = k;
        continue;
      }
      const hit = plan.force || s.force ? undefined : cache[k];
      if (hit && this.haveLayer(hit)) {
        this.log(b, 'info', `[${n}/${plan.steps.length}] CACHED ${describeStep(s)}`, n);
        if (hit !== EMPTY_TREE) layers.push(hit);
        cached++;
        key = afterLayer(k, hit);
        continue;
      }
      this.log(b, 'info', `[${n}/${plan.steps.length}] ${describeStep(s)}`, n);
      const t0 = performance.now();
      const r = await this.runStep(b, n, s, layers, config, base.bindHostUsr, uploads);
      if (r.added) added.push(r.digest);
      if (r.digest !== EMPTY_TREE) layers.push(r.digest);
      cache[k] = r.digest;
      await this.writeCache(cache);
      ran++;
      this.log(
        b,
        'info',
        `[${n}/${plan.steps.length}] done in ${Math.round(performance.now() - t0)} ms: ${r.digest === EMPTY_TREE ? 'no file changed, no layer' : `layer ${r.digest.slice(0, 19)}`}`,
        n,
      );
      key = afterLayer(k, r.digest);
    }
    b.cached = cached;
    b.ran = ran;
    const finalConfig: TemplateConfig = {
      ...config,
      ...(plan.startCmd ? { startCmd: plan.startCmd } : {}),
      ...(plan.readyCmd ? { readyCmd: plan.readyCmd } : {}),
    };
    if (finalConfig.startCmd && finalConfig.readyCmd) await this.checkReady(b, layers, finalConfig, base.bindHostUsr);
    for (const ref of b.refs) {
      const rec = await this.o.templates.putLocked({
        ...parseTemplateRef(ref),
        layers,
        config: finalConfig,
        source: 'build',
        buildID: b.buildID,
        ...(base.parent ? { parent: base.parent } : {}),
        ...(base.bindHostUsr ? { bindHostUsr: true } : {}),
        ...(base.registry ? { registry: base.registry } : {}),
      });
      this.log(b, 'info', `Registered ${rec.ref} ${rec.digest}`);
    }
  }

  /** The registries this node reaches without TLS checks (cubelet.toml [registry] insecure). */
  private insecureRegistries(): readonly string[] {
    return this.o.config().cubelet.registry.insecure;
  }

  /**
   * What `fromImage` names: a template of the store (an imported image, by name; fetched from
   * the cluster where it is elsewhere) unless registry credentials come with it, else an image
   * of a registry, resolved to its digest now (so the build pulls what the start saw).
   */
  private async resolveFrom(from: BuildPlan['from']): Promise<BuildPlan['from']> {
    if ('template' in from) {
      await this.base(from);
      return from;
    }
    // A name no template can have (HOST:PORT/..., a path) is looked up nowhere but its registry.
    if (!from.creds && !('problem' in splitTemplateRef(from.image))) {
      try {
        await this.base({ image: from.image });
        return from;
      } catch (e) {
        if (!(e instanceof CubeError && e.kind === 'NOT_FOUND')) throw e;
        try {
          parseImageRef(from.image);
        } catch {
          throw e; // not an image reference either: the template's 404
        }
      }
    }
    const { ref, digest } = await resolveImage(this.o.dataDir, from.image, {
      ...(from.creds ? { creds: from.creds } : {}),
      insecure: this.insecureRegistries(),
    });
    return { ...from, registry: { ref, digest, ...(from.creds ? { creds: from.creds } : {}) } };
  }

  /** The template a build starts from: `fromTemplate` (host/base included), an imported image by name, or a registry image (pulled into the store here, under the writer lock: `pull`). */
  private async base(
    from: BuildPlan['from'],
    pull?: { b: BuildRecord; added: string[] },
  ): Promise<{ key: string; layers: string[]; config: TemplateConfig; bindHostUsr: boolean; parent?: string; registry?: { image: string; digest: string } }> {
    if ('registry' in from && from.registry) {
      const r = from.registry;
      if (!pull) throw new CubeError('INTERNAL', 'a registry base is pulled only inside a build');
      const img = await pullLocked(
        this.o.templates,
        r.ref,
        r.digest,
        { ...(r.creds ? { creds: r.creds } : {}), insecure: this.insecureRegistries() },
        pull.added,
        (line) => this.log(pull.b, 'info', line, 0),
        this.o.peers,
      );
      // Keyed by the image's digest: the same recipe on the same image reuses its cached steps.
      return { key: r.digest, layers: img.layers, config: img.config, bindHostUsr: false, registry: { image: img.image, digest: r.digest } };
    }
    const name = 'template' in from ? from.template : from.image;
    const resolved = name === 'base' ? this.o.config().master.sandbox.default_template : name;
    if (resolved === HOST_TEMPLATE) {
      const ref = await this.o.templates.resolve(HOST_TEMPLATE); // makes the host rootfs when missing
      return { key: HOST_TEMPLATE, layers: ref.layers, config: { ...DEFAULT_CONFIG }, bindHostUsr: true };
    }
    let rec: TemplateRecord;
    try {
      rec = await this.o.templates.get(resolved).catch(async (e: unknown) => {
        if (!(e instanceof CubeError && e.kind === 'NOT_FOUND') || !this.o.fetchTemplate) throw e;
        await this.o.fetchTemplate(resolved);
        return this.o.templates.get(resolved);
      });
    } catch (e) {
      if (e instanceof CubeError && e.kind === 'NOT_FOUND' && 'image' in from)
        throw new CubeError(
          'NOT_FOUND',
          `image '${name}' is neither a template of this node nor an image reference a registry can be asked for (HOST[:PORT]/NAME:TAG, or a Docker Hub name)`,
        );
      throw e;
    }
    return {
      key: rec.digest,
      layers: rec.layers,
      config: rec.config,
      bindHostUsr: rec.bindHostUsr ?? false,
      ...('template' in from ? { parent: rec.ref } : {}),
      ...(rec.registry ? { registry: rec.registry } : {}),
    };
  }

  /** One step in a sandbox of its own; its writable layer becomes a layer of the store. */
  private async runStep(
    b: BuildRecord,
    n: number,
    s: Step,
    layers: string[],
    config: TemplateConfig,
    bindHostUsr: boolean,
    uploads: string,
  ): Promise<{ digest: string; added: boolean }> {
    const { driver } = this.o;
    const storage = driver.storage;
    if (!storage) throw new CubeError('INTERNAL', 'template builds need the ns runtime (a writable layer to capture)');
    return this.inSandbox(b, layers, config, bindHostUsr, async (h) => {
      // WORKDIR's step is this mkdir; for the others it is a no-op unless the base's workdir is missing.
      if (config.workdir) await driver.files.mkdir(h, config.workdir, config.user);
      if (s.type === 'RUN') await this.runCmd(b, n, h, s.cmd, s.user ?? config.user, config);
      else if (s.type === 'COPY') await this.copy(b, n, h, s, config, uploads);
      // Nothing runs on while the layer is copied (a background process of the step would race it).
      await driver.pause(h);
      return this.capture(h.sandboxID, storage);
    });
  }

  /** The start and ready check (ready-check.ts) in a sandbox of the built template; logs how long readiness took. */
  private async checkReady(b: BuildRecord, layers: string[], config: TemplateConfig, bindHostUsr: boolean): Promise<void> {
    const limit = config.readyTimeoutSec ?? this.o.config().master.sandbox.ready_timeout_sec;
    this.log(b, 'info', `Starting '${config.startCmd}' and waiting up to ${limit} s for '${config.readyCmd}' to exit 0`);
    const ms = await this.inSandbox(b, layers, config, bindHostUsr, (h) => checkReady(this.o.driver, h, config, limit));
    this.log(b, 'info', `Ready after ${ms} ms`);
  }

  /** Runs `f` in a build sandbox of `layers` (ns runtime, the build's spec), destroyed after. */
  private async inSandbox<T>(b: BuildRecord, layers: string[], config: TemplateConfig, bindHostUsr: boolean, f: (h: SandboxHandle) => Promise<T>): Promise<T> {
    const { driver, network } = this.o;
    const id = newSandboxID();
    const template: TemplateRef = {
      name: `build:${b.buildID}`,
      layers: layers.map((l) => (l.startsWith('sha256:') ? layerDir(this.o.dataDir, l) : l)),
      bindHostUsr,
      config,
    };
    const slot = await network.acquire(id);
    try {
      const h = await driver.create({
        sandboxID: id,
        template,
        cpus: b.cpuCount,
        memoryMiB: b.memoryMB,
        pidsMax: this.o.config().master.sandbox.pids_max,
        netnsPath: slot.netnsPath,
        env: config.env,
        diskGiB: this.o.config().master.sandbox.default_spec.disk_gib,
        runtime: 'ns',
      });
      return await f(h);
    } finally {
      const processesGone = await driver.destroy(id).then(
        () => true,
        (err: unknown) => {
          this.o.log.error({ err, sandboxID: id }, 'build step sandbox: destroy failed');
          return false;
        },
      );
      await network.release(id, { processesGone }).catch((err: unknown) => this.o.log.error({ err, sandboxID: id }, 'build step sandbox: slot release failed'));
    }
  }

  private async runCmd(b: BuildRecord, n: number, h: SandboxHandle, cmd: string, user: string, config: TemplateConfig): Promise<void> {
    const p = this.o.driver.exec(h, {
      argv: ['/bin/sh', '-c', cmd],
      user,
      env: config.env,
      ...(config.workdir ? { cwd: config.workdir } : {}),
      timeoutMs: STEP_TIMEOUT_MS,
    });
    const tail = new Tail(TAIL_BYTES);
    let dropped = 0;
    const output = (line: string): void => {
      if ((b.outputLines ?? 0) >= BUILD_OUTPUT_LINES) return void dropped++;
      b.outputLines = (b.outputLines ?? 0) + 1;
      this.log(b, 'info', line.length > OUTPUT_LINE_CHARS ? `${line.slice(0, OUTPUT_LINE_CHARS)} [line cut at ${OUTPUT_LINE_CHARS} characters]` : line, n);
    };
    const lines = (stream: Readable) => {
      let partial = '';
      stream.on('data', (chunk: Buffer) => {
        tail.push(chunk);
        const parts = (partial + chunk.toString('utf8')).split('\n');
        partial = parts.pop() ?? '';
        if (partial.length > OUTPUT_LINE_CHARS) {
          output(partial); // a line without end (a progress bar) is kept in pieces, not grown
          partial = '';
        }
        for (const line of parts) output(line);
      });
      return new Promise<void>((resolve) =>
        stream.once('close', () => {
          if (partial) output(partial);
          resolve();
        }),
      );
    };
    const done = Promise.all([lines(p.stdout), lines(p.stderr)]);
    const exit = await p.exited;
    await Promise.race([done, new Promise((r) => setTimeout(r, 200))]);
    if (dropped) this.log(b, 'warn', `${dropped} more line(s) of output not kept (a build keeps ${BUILD_OUTPUT_LINES})`, n);
    if (exit.exitCode !== 0 || exit.timedOut) {
      const why = exit.timedOut
        ? `was killed after ${STEP_TIMEOUT_MS / 60_000} min`
        : exit.oomKilled
          ? `was OOM-killed (exit ${exit.exitCode})`
          : `exited ${exit.exitCode}${exit.signal ? ` (${exit.signal})` : ''}`;
      throw new StepFailed(
        n,
        `step ${n} (RUN ${cmd.length > 80 ? `${cmd.slice(0, 77)}...` : cmd}) ${why}; output (last ${TAIL_BYTES} bytes): ${JSON.stringify(tail.toString())}`,
      );
    }
  }

  /** Writes the upload's files through the sandbox's file access (confined to its root, owned by the step's user). */
  private async copy(b: BuildRecord, n: number, h: SandboxHandle, s: Extract<Step, { type: 'COPY' }>, config: TemplateConfig, uploads: string): Promise<void> {
    const { ex, feeding } = await this.uploads.entries(this.uploads.file(uploads, s.filesHash));
    const owner = s.user ?? config.user;
    const links: [string, string][] = [];
    let files = 0;
    try {
      for await (const entry of ex) {
        const to = copyTarget(s.src, s.dest, entry.header.name, config.workdir, entry.header.type === 'directory');
        if (to === undefined) {
          entry.resume();
          continue;
        }
        const mode = s.mode ?? (entry.header.mode ?? 0o644) & 0o7777;
        if (entry.header.type === 'file') {
          await this.o.driver.files.write(h, to, entry, owner, mode);
          files++;
        } else {
          if (entry.header.type === 'directory') await this.o.driver.files.mkdir(h, to, owner);
          else if (entry.header.type === 'symlink' && entry.header.linkname) links.push([entry.header.linkname, to]);
          entry.resume();
        }
      }
      await feeding;
    } catch (e) {
      if (e instanceof CubeError && e.kind !== 'INTERNAL') throw new StepFailed(n, `step ${n} (${describeStep(s)}): ${e.message}`);
      throw new StepFailed(n, `step ${n} (${describeStep(s)}): the upload is not a readable tar: ${(e as Error).message}`);
    }
    if (links.length) {
      const script = links.map(([target, at]) => `ln -sfn '${target.replaceAll("'", "'\\''")}' '${at.replaceAll("'", "'\\''")}'`).join('\n');
      await this.runCmd(b, n, h, script, 'root', { ...config, workdir: '' });
    }
    if (files + links.length === 0) throw new StepFailed(n, `step ${n} (${describeStep(s)}): the upload holds no file under ${s.src}`);
    this.log(b, 'info', `copied ${files} file(s)${links.length ? ` and ${links.length} link(s)` : ''} to ${s.dest}`, n);
  }

  /**
   * The upper dir (whiteouts and opaque marks kept: it is already an overlay layer) into the layer
   * store: a snapshot of its subvolume, which is in the same store (storage.captureUpper), renamed
   * into place; no byte of it copied.
   */
  private async capture(sandboxID: string, storage: SandboxStorage): Promise<{ digest: string; added: boolean }> {
    const scratch = join(scratchDir(this.o.dataDir), `build-${sandboxID}`);
    await mkdir(scratchDir(this.o.dataDir), { recursive: true });
    try {
      await storage.captureUpper(sandboxID, scratch);
      // The runtime's own /etc/hosts (the sandbox's hostname) is no part of the template.
      const hosts = join(scratch, 'etc', 'hosts');
      if ((await readTextOrAbsent(hosts)) === etcHosts(sandboxID)) {
        await rm(hosts);
        await rmdir(join(scratch, 'etc')).catch(() => undefined); // kept when the step wrote other files there
      }
      const digest = await treeDigest(scratch);
      if (digest === EMPTY_TREE) return { digest, added: false }; // nothing to stack (a RUN that only printed)
      const dest = layerDir(this.o.dataDir, digest);
      if (existsSync(dest)) return { digest, added: false };
      await mkdir(join(dest, '..'), { recursive: true });
      await rename(scratch, dest);
      await writeTree(this.o.dataDir, digest, digest); // a build layer is named by its tree digest
      return { digest, added: true };
    } finally {
      await rm(scratch, { recursive: true, force: true });
    }
  }

  /** The layer is in the store (an empty step's layer is no directory: it is never stacked). */
  private haveLayer(digest: string): boolean {
    return digest === EMPTY_TREE || existsSync(layerDir(this.o.dataDir, digest));
  }

  private async readCache(): Promise<Record<string, string>> {
    try {
      return JSON.parse(await readFile(this.cacheFile, 'utf8')) as Record<string, string>;
    } catch {
      return {};
    }
  }

  private async writeCache(cache: Record<string, string>): Promise<void> {
    // Keys whose layer left the store (its templates removed) are dropped on the way.
    const live = Object.fromEntries(Object.entries(cache).filter(([, d]) => this.haveLayer(d)));
    const tmp = `${this.cacheFile}.${process.pid}.tmp`;
    await writeFile(tmp, JSON.stringify(live));
    await rename(tmp, this.cacheFile);
  }
}
