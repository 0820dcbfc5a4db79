// Templates on a compute node of a cluster: the node's own store, and what it lacks fetched from
// the control plane over the node channel (the cluster secret). A create for a template the node
// does not hold asks a control replica for the template's record (which the replica gets from a
// node holding it), then every layer it lacks, by digest; the replica relays each from a live node
// that holds it (templates/relay.ts). A fetched layer is unpacked aside, checked
// against the tree digest the record gives (layers/tree.ts), and renamed into the store only then;
// a mismatch fails the create with 130424 naming the layer, and the layers that fetch brought in
// leave again. Creates of a template being fetched wait for the same fetch; fetches run under the
// store's writer lock (one at a time, and a template rm never drops a layer being taken). The node
// reports the layers it holds and its fetches in progress in its view (template_locality filter
// and scorer, the console). Before a fetch the node checks its store can hold the missing layers
// (their unpacked sizes, as the holder reports them): 130598 naming the sizes, nothing written.
// A layer streams for as long as bytes keep coming: a fetch fails (130425) only once none came for
// LAYER_STALL_MS, however large the layer.
import { randomBytes } from 'node:crypto';
import { existsSync, statSync } from 'node:fs';
import { mkdir, readdir, rename, rm, statfs } from 'node:fs/promises';
import { join } from 'node:path';
import { Readable, Transform } from 'node:stream';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import type { EventKind, EventView } from '../model/event.js';
import { answerError } from '../http.js';
import { CLUSTER_IMAGE_PATH, CLUSTER_LAYER_PATH, CLUSTER_TEMPLATE_PATH, HOLDER_HEADER, type ImportRequest } from '../cubelet/rpc-wire.js';
import { CubeError, toCubeError } from '../errors.js';
import { layerDir, layersRoot, type TemplateRecord, type TemplateStore } from './store.js';
import type { TemplateRef } from '../runtime/types.js';
import { ensureStoreDir, importUpload, scratchDir } from './layers/import.js';
import { packLayer } from './layers/pack.js';
import { storedImage, type HeldImage, type ImagePeers, type PeerAnswer } from './layers/pull.js';
import { layerBytes, layerTree, treeDigest, writeTree } from './layers/tree.js';
import { UnpackBudget, unpackLayer } from './layers/unpack.js';
import { HOST_TEMPLATE, listedName } from '../model/template.js';

/** A template as a holder serves it: its record and, per layer digest, the tree digest to check a copy against. */
export interface HeldTemplate {
  record: TemplateRecord;
  trees: Record<string, string>;
  /** Per layer digest, its unpacked bytes (layers/tree.ts layerBytes); absent from older holders. */
  sizes?: Record<string, number>;
}

/**
 * A layer stream (holder -> replica -> node) fails once no byte came for this long. A total
 * timeout would fail any layer larger than the link carries in it; a stalled holder still ends.
 */
export const LAYER_STALL_MS = 30_000;

/** Room a fetch leaves free in the node's store: a full filesystem fails the node's other writes (sandbox state, build records). */
export const FETCH_RESERVE_BYTES = 64 * 1024 ** 2;

/**
 * `body` passed through, destroyed with 130425 once no chunk came for `ms` (the timer restarts on
 * each chunk, so a slow but moving layer takes as long as it needs).
 */
export function stallGuard(body: Readable, ms: number, what: string, onChunk?: (bytes: number) => void): Readable {
  let timer: NodeJS.Timeout | undefined;
  const out = new Transform({
    transform(chunk: Buffer, _enc, cb) {
      arm();
      onChunk?.(chunk.length);
      cb(null, chunk);
    },
    flush(cb) {
      clearTimeout(timer);
      cb();
    },
  });
  const arm = () => {
    clearTimeout(timer);
    timer = setTimeout(() => {
      const e = new CubeError('LAYER_UNAVAILABLE', `${what}: no byte came for ${ms / 1000} s`, { retryAfter: 5 });
      body.destroy(e);
      out.destroy(e);
    }, ms);
  };
  out.on('close', () => clearTimeout(timer));
  body.on('error', (e) => out.destroy(e));
  arm();
  body.pipe(out);
  return out;
}

/** What a node serves other nodes (through the control plane): its templates' records and layers. */
export interface LayerServer {
  heldTemplate(name: string): Promise<HeldTemplate>;
  /** A registry image this node pulled or fetched, by manifest digest; 130404 when the node does not hold all its layers. */
  heldImage(digest: string): Promise<HeldImage>;
  /** The layer as a tar; 130404 when the node does not hold it. */
  packedLayer(digest: string): Readable;
  /** An image archive a control replica forwards, imported into this node's store. */
  importUpload(body: Readable, req: ImportRequest): Promise<TemplateRecord>;
  /** Layer bytes fetched since the node started, and the fetches in progress: what a replica waiting on a create checks for progress (remote.ts). */
  fetchProgress(): { bytes: number; active: number };
  listRecords(): Promise<TemplateRecord[]>;
  /** TemplateStore.remove: 409 while a template of this node has it as parent; its layers are held for the sandboxes `inUse` names, the rest nothing holds leave the store. */
  removeTemplate(name: string, inUse: (rec: TemplateRecord) => Promise<string[]>): Promise<TemplateRecord>;
  /** TemplateStore.tag. */
  tagTemplate(target: string, tags: string[]): Promise<{ from: TemplateRecord; tags: string[] }>;
}

/** Where a node gets what it lacks: the control plane's cluster routes. */
export interface LayerSource {
  template(name: string): Promise<HeldTemplate>;
  /** The layer's tar (from node `holder` when it can), and the node it comes from. */
  layer(digest: string, holder?: string): Promise<{ body: Readable; node?: string }>;
  /** Who holds image `digest`, or whether this node is to pull it (templates/relay.ts image). */
  image(digest: string): Promise<PeerAnswer>;
  imageLease(digest: string, op: 'renew' | 'release'): Promise<void>;
}

/** A fetch in progress, as the node view shows it: "NAME:TAG i/n". */
interface Progress {
  ref: string;
  done: number;
  of: number;
}

const DIGEST_RE = /^sha256:[0-9a-f]{64}$/;
const HEX_RE = /^[0-9a-f]{64}$/;

/** A template's record from a holder, checked before the node acts on it (pure). */
export function checkHeld(served: HeldTemplate, name: string): HeldTemplate {
  // What came over the wire, trusted only once checked.
  const h = served as Partial<HeldTemplate> | null;
  const r = h?.record as Partial<TemplateRecord> | undefined;
  if (!r || typeof r.ref !== 'string' || !Array.isArray(r.layers) || !r.config)
    throw new CubeError('INTERNAL', `the record served for template ${name} is malformed`);
  const dirs = r.layers.filter((l) => !DIGEST_RE.test(l));
  if (dirs.length)
    throw new CubeError(
      'CONFLICT',
      `template ${r.ref} is a directory template (${dirs[0]}) on the nodes holding it: only layer templates (imported or built) are fetched by other nodes`,
    );
  for (const l of r.layers)
    if (!DIGEST_RE.test(h?.trees?.[l] ?? '')) throw new CubeError('INTERNAL', `the record served for template ${r.ref} gives no tree digest for layer ${l}`);
  if (Object.values(h?.sizes ?? {}).some((n) => !Number.isSafeInteger(n) || n < 0))
    throw new CubeError('INTERNAL', `the record served for template ${r.ref} gives a layer size that is no byte count`);
  return served;
}

export class FetchingCatalog implements LayerServer, ImagePeers {
  private readonly pulls = new Map<string, Promise<void>>();
  private readonly progress = new Set<Progress>();
  private held?: { mtime: number; layers: string[] };
  private fetchedBytes = 0;
  /** Node events (the cubelet's report): set once the cubelet exists. */
  onEvent?: (kind: EventKind, message: string, extra?: Partial<Pick<EventView, 'code' | 'durationMs'>>) => void;

  constructor(private readonly o: { store: TemplateStore; source: LayerSource; nodeID?: string; stallMs?: number }) {}

  get dataDir(): string {
    return this.o.store.dataDir;
  }

  /** The node's template, fetched first when the node lacks it (creates of it meanwhile wait for the same fetch). */
  async resolve(name: string): Promise<TemplateRef> {
    try {
      return await this.o.store.resolve(name);
    } catch (e) {
      if (!(e instanceof CubeError && e.kind === 'NOT_FOUND') || name === HOST_TEMPLATE) throw e;
    }
    const key = listedName(name);
    let pull = this.pulls.get(key);
    if (!pull) {
      pull = this.pull(name).finally(() => this.pulls.delete(key));
      this.pulls.set(key, pull);
    }
    await pull;
    return this.o.store.resolve(name);
  }

  listTemplates(): Promise<TemplateRef[]> {
    return this.o.store.listTemplates();
  }

  fetchProgress(): { bytes: number; active: number } {
    return { bytes: this.fetchedBytes, active: this.pulls.size };
  }

  listRecords(): Promise<TemplateRecord[]> {
    return this.o.store.listRecords();
  }

  removeTemplate(name: string, inUse: (rec: TemplateRecord) => Promise<string[]>): Promise<TemplateRecord> {
    return this.o.store.remove(name, inUse);
  }

  tagTemplate(target: string, tags: string[]): Promise<{ from: TemplateRecord; tags: string[] }> {
    return this.o.store.tag(target, tags);
  }

  /** Layer digests in the store (re-read when its directory changes), and the fetches in progress. */
  async layerFacts(): Promise<{ layers: string[]; fetching: string[] }> {
    const dir = join(layersRoot(this.dataDir), 'sha256');
    const mtime = statSync(dir, { throwIfNoEntry: false })?.mtimeMs ?? 0;
    if (this.held?.mtime !== mtime) {
      const names = await readdir(dir).catch(() => [] as string[]);
      this.held = { mtime, layers: names.filter((n) => HEX_RE.test(n)).map((n) => `sha256:${n}`) };
    }
    return { layers: this.held.layers, fetching: [...this.progress].map((p) => `${p.ref} ${p.done}/${p.of}`) };
  }

  async heldTemplate(name: string): Promise<HeldTemplate> {
    const record = await this.o.store.get(name);
    return { record, ...(await this.describeLayers(record.layers)) };
  }

  async heldImage(digest: string): Promise<HeldImage> {
    if (!DIGEST_RE.test(digest)) throw new CubeError('BAD_REQUEST', `not an image digest: ${digest}`);
    const entry = await storedImage(this.dataDir, digest);
    if (!entry) throw new CubeError('NOT_FOUND', `image ${digest} is not in this node's store`);
    return { entry, ...(await this.describeLayers(entry.layers)) };
  }

  /** Per layer digest of `layers`, its tree digest and unpacked bytes (what a fetching node checks and makes room for). */
  private async describeLayers(layers: string[]): Promise<{ trees: Record<string, string>; sizes: Record<string, number> }> {
    const trees: Record<string, string> = {};
    const sizes: Record<string, number> = {};
    for (const l of layers) {
      if (!DIGEST_RE.test(l)) continue;
      trees[l] = await layerTree(this.dataDir, l);
      sizes[l] = await layerBytes(layerDir(this.dataDir, l));
    }
    return { trees, sizes };
  }

  ask(digest: string): Promise<PeerAnswer> {
    return this.o.source.image(digest);
  }

  lease(digest: string, op: 'renew' | 'release'): Promise<void> {
    return this.o.source.imageLease(digest, op);
  }

  /**
   * The layers of a peer's image this store lacks, fetched and checked as a template's are (for a
   * caller holding the writer lock: a build pulling its base). 130598 when they do not fit.
   */
  async fetch({ node: holder, held }: { node: string; held: HeldImage }, added: string[], progress: (line: string) => void): Promise<void> {
    // What came over the wire, trusted only once checked.
    const sent = held as Partial<HeldImage> | null;
    const layers: unknown = (sent?.entry as Partial<HeldImage['entry']> | undefined)?.layers;
    if (!Array.isArray(layers) || !sent?.entry?.config) throw new CubeError('INTERNAL', 'the image served by its holder is malformed');
    for (const l of layers as string[])
      if (!DIGEST_RE.test(l) || !DIGEST_RE.test(sent.trees?.[l] ?? ''))
        throw new CubeError('INTERNAL', `the image served gives no tree digest for layer ${String(l)}`);
    await ensureStoreDir(this.dataDir);
    const missing = (layers as string[]).filter((l) => !existsSync(layerDir(this.dataDir, l)));
    await this.checkRoom(held.entry.image, held.sizes, missing);
    const budget = new UnpackBudget(this.o.store.unpackMaxBytes());
    for (const [i, l] of (layers as string[]).entries()) {
      if (!missing.includes(l)) {
        progress(`layer ${i + 1}/${layers.length} ${l.slice(0, 19)} (in the store already)`);
        continue;
      }
      const node = await this.fetchLayer(l, held.trees[l]!, `layer ${i + 1}/${layers.length} (${l}) of image ${held.entry.image}`, budget, holder);
      added.push(l);
      progress(`layer ${i + 1}/${layers.length} ${l.slice(0, 19)} from node ${node ?? '?'}`);
    }
  }

  importUpload(body: Readable, req: ImportRequest): Promise<TemplateRecord> {
    return importUpload(this.o.store, body, { ref: req.ref, ...(req.config ? { config: req.config } : {}) });
  }

  packedLayer(digest: string): Readable {
    if (!DIGEST_RE.test(digest)) throw new CubeError('BAD_REQUEST', `not a layer digest: ${digest}`);
    const dir = layerDir(this.dataDir, digest);
    if (!existsSync(dir)) throw new CubeError('NOT_FOUND', `layer ${digest} is not in this node's store`);
    return packLayer(dir);
  }

  /**
   * Fetches template `name`: its record, then each layer the store lacks, then registers it. Holds
   * the store's writer lock, so a template rm never removes a layer this fetch is about to take.
   */
  private async pull(name: string): Promise<void> {
    const t0 = performance.now();
    let ref = name;
    try {
      const held = checkHeld(await this.o.source.template(name), name);
      const rec = held.record;
      ref = rec.ref;
      await this.o.store.exclusive(async () => {
        await ensureStoreDir(this.dataDir);
        const missing = rec.layers.filter((l) => !existsSync(layerDir(this.dataDir, l)));
        await this.checkRoom(`template ${rec.ref}`, held.sizes, missing);
        try {
          await this.fetchMissing(rec, held, missing);
        } catch (e) {
          // The layers this fetch brought in, that no template holds: a failed fetch leaves nothing.
          await this.o.store.dropUnusedLayers(missing);
          throw e;
        }
        const { digest: _d, created: _c, ...rest } = rec;
        await this.o.store.putLocked(rest);
      });
      this.onEvent?.('template.fetch', `template ${ref} ready on this node`, { durationMs: Math.round(performance.now() - t0) });
    } catch (e) {
      const err = toCubeError(e);
      this.onEvent?.('template.fetch', `fetching template ${ref} failed: ${err.message}`, { code: err.code, durationMs: Math.round(performance.now() - t0) });
      throw err;
    }
  }

  /** 130598 when the store cannot hold the `missing` layers (before anything is written, so nothing is left behind). */
  private async checkRoom(what: string, sizes: Record<string, number> | undefined, missing: string[]): Promise<void> {
    const need = missing.reduce((n, l) => n + (sizes?.[l] ?? 0), 0);
    if (need === 0) return;
    const dir = layersRoot(this.dataDir);
    const st = await statfs(dir);
    const free = st.bavail * st.bsize;
    if (need + FETCH_RESERVE_BYTES <= free) return;
    const mib = (b: number) => (b / 1024 ** 2).toFixed(1);
    throw new CubeError(
      'STORE_FULL',
      `${this.o.nodeID ? `node ${this.o.nodeID}: ` : ''}the layer store ${dir} has ${mib(free)} MiB free; ${what} needs ${mib(need)} MiB for its ${missing.length} missing layer(s) (and ${mib(FETCH_RESERVE_BYTES)} MiB kept free): nothing was fetched`,
      { retryAfter: 60, details: { needBytes: need, freeBytes: free } },
    );
  }

  /** The layers `missing` of `rec`, one after another (for a caller holding the store's writer lock, which also makes one fetch per layer). */
  private async fetchMissing(rec: TemplateRecord, held: HeldTemplate, missing: string[]): Promise<void> {
    this.onEvent?.('template.fetch', `fetching template ${rec.ref} for a create: ${missing.length} of ${rec.layers.length} layer(s) to fetch`);
    const p: Progress = { ref: rec.ref, done: 0, of: missing.length };
    this.progress.add(p);
    const budget = new UnpackBudget(this.o.store.unpackMaxBytes());
    try {
      for (const l of missing) {
        const what = `layer ${rec.layers.indexOf(l) + 1}/${rec.layers.length} (${l}) of template ${rec.ref}`;
        const l0 = performance.now();
        await this.fetchLayer(l, held.trees[l]!, what, budget);
        p.done++;
        this.onEvent?.('template.fetch', `${what} fetched and verified (${p.done}/${p.of})`, { durationMs: Math.round(performance.now() - l0) });
      }
    } finally {
      this.progress.delete(p);
    }
  }

  /** One layer from the control plane into the store, checked against `tree` before it is renamed in; the node it came from. */
  private async fetchLayer(digest: string, tree: string, what: string, budget: UnpackBudget, holder?: string): Promise<string | undefined> {
    const scratch = join(scratchDir(this.dataDir), `fetch-${digest.slice(7, 19)}.${randomBytes(4).toString('hex')}`);
    await mkdir(scratch, { recursive: true });
    try {
      const { body: tar, node } = await this.o.source.layer(digest, holder);
      const body = stallGuard(tar, this.o.stallMs ?? LAYER_STALL_MS, what, (n) => (this.fetchedBytes += n));
      await unpackLayer(body, scratch, budget, { what }).catch((e: unknown) => {
        const err = toCubeError(e);
        if (err.kind === 'IMAGE_INVALID')
          throw new CubeError('LAYER_CORRUPT', `${what}: the tar that came is unreadable (${err.message})`, { details: { layer: digest }, cause: e });
        throw err;
      });
      const got = await treeDigest(scratch);
      if (got !== tree)
        throw new CubeError('LAYER_CORRUPT', `${what} failed verification: the copy that came has tree digest ${got}, the template's record says ${tree}`, {
          details: { layer: digest },
        });
      const dest = layerDir(this.dataDir, digest);
      await mkdir(join(dest, '..'), { recursive: true });
      await rename(scratch, dest);
      await writeTree(this.dataDir, digest, tree);
      return node;
    } finally {
      await rm(scratch, { recursive: true, force: true });
    }
  }
}

/** The control plane's cluster routes, as a compute node calls them (first answering replica wins). */
export class ControlLayerSource implements LayerSource {
  constructor(private readonly o: { controls: string[]; secret: string; nodeID: string }) {}

  private async post(path: string, body: unknown): Promise<Response> {
    let last: unknown;
    for (const c of this.o.controls) {
      let res: Response;
      // The answer's headers come within LAYER_STALL_MS; its body is bounded per chunk (stallGuard), not in total.
      const ac = new AbortController();
      const headers = setTimeout(() => ac.abort(new Error(`no answer within ${LAYER_STALL_MS / 1000} s`)), LAYER_STALL_MS);
      try {
        res = await fetch(new URL(path, c), {
          method: 'POST',
          headers: { authorization: `Bearer ${this.o.secret}`, 'content-type': 'application/json' },
          body: JSON.stringify({ ...(body as object), nodeID: this.o.nodeID }),
          signal: ac.signal,
        });
      } catch (e) {
        last = e;
        continue;
      } finally {
        clearTimeout(headers);
      }
      if (res.ok) return res;
      throw await answerError(res, `control ${c}`);
    }
    throw new CubeError(
      'NODE_UNREACHABLE',
      `no control replica answered (${this.o.controls.join(', ')}): ${last instanceof Error ? last.message : String(last)}`,
      { retryAfter: 1 },
    );
  }

  async template(name: string): Promise<HeldTemplate> {
    return (await (await this.post(CLUSTER_TEMPLATE_PATH, { name })).json()) as HeldTemplate;
  }

  async layer(digest: string, holder?: string): Promise<{ body: Readable; node?: string }> {
    const res = await this.post(CLUSTER_LAYER_PATH, { digest, ...(holder ? { holder } : {}) });
    const node = res.headers.get(HOLDER_HEADER);
    return { body: Readable.fromWeb(res.body as WebReadableStream<Uint8Array>), ...(node ? { node } : {}) };
  }

  async image(digest: string): Promise<PeerAnswer> {
    return (await (await this.post(CLUSTER_IMAGE_PATH, { digest })).json()) as PeerAnswer;
  }

  async imageLease(digest: string, op: 'renew' | 'release'): Promise<void> {
    await (await this.post(CLUSTER_IMAGE_PATH, { digest, lease: op })).arrayBuffer();
  }
}
