// Images from registries: a reference (docker://HOST[:PORT]/NAME:TAG, or Docker Hub's short
// names) resolved to its manifest digest with `skopeo inspect`, then copied by that digest with
// `skopeo copy` into an oci-archive under the store's scratch dir and imported as any archive
// (./import.ts: each layer unpacked once, by its diff_id). An image whose digest was pulled
// before, and whose layers are all still in the store, is not copied again: <layersRoot>/
// images.json maps each pulled digest to its layers and config. On a cluster node the digest is
// first asked of the cluster (ImagePeers, through the control plane): a node holding it serves its
// layers, and of nodes wanting one no node holds, one pulls it (the pull lease) while the others
// wait for it, so the registry serves an image once per cluster.
// Credentials never reach an argument list, a log or a record: they go to skopeo in an auth file
// (mode 0600, in a private scratch dir removed after the call); without them skopeo is told to
// use none (never the host's own ~/.docker or containers auth). TLS is verified except for the
// registries the node's config lists as insecure (cubelet.toml [registry] insecure).
import { createHash, randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import { CubeError, toCubeError } from '../../errors.js';
import type { TemplateConfig } from '../../runtime/types.js';
import { HOST_TEMPLATE } from '../../model/template.js';
import { layerDir, layersRoot, parseTemplateRef, type TemplateRecord, type TemplateStore } from '../store.js';
import { ensureStoreDir, importLayersLocked, scratchDir } from './import.js';
import { layerBytes } from './tree.js';
import { UnpackBudget } from './unpack.js';

export interface RegistryCreds {
  username: string;
  password: string;
}

/** A registry reference, normalized as Docker does (pure parts). */
export interface ImageRef {
  /** host[:port]; docker.io for short names. */
  registry: string;
  /** e.g. library/python */
  repository: string;
  tag?: string;
  digest?: string;
  /** registry/repository[:tag][@digest] */
  canonical: string;
}

const DIGEST_RE = /^sha256:[0-9a-f]{64}$/;
/** A copy still running after this long is killed (it holds the store's writer lock): 130428. */
const PULL_TIMEOUT_MIN = 60;
const COMPONENT_RE = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/;
const TAG_RE = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/;
const HOST_RE = /^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*|\[[0-9a-fA-F:]+\])(?::[0-9]{1,5})?$/;

/** `docker://REF` or REF -> its parts; 400 naming what is wrong (pure). */
export function parseImageRef(input: string): ImageRef {
  const raw = input.startsWith('docker://') ? input.slice('docker://'.length) : input;
  const bad = (why: string) => new CubeError('BAD_REQUEST', `image reference ${JSON.stringify(input.slice(0, 200))}: ${why}`);
  if (!raw || raw.length > 1024) throw bad('empty or too long');
  let rest = raw;
  let digest: string | undefined;
  const at = rest.indexOf('@');
  if (at >= 0) {
    digest = rest.slice(at + 1);
    rest = rest.slice(0, at);
    if (!DIGEST_RE.test(digest)) throw bad('the digest must be sha256:<64 hex>');
  }
  let tag: string | undefined;
  const colon = rest.lastIndexOf(':');
  if (colon > rest.lastIndexOf('/')) {
    tag = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
    if (!TAG_RE.test(tag)) throw bad(`tag '${tag}' is not a valid tag`);
  }
  const parts = rest.split('/');
  let registry = 'docker.io';
  const first = parts[0]!;
  if (parts.length > 1 && (first.includes('.') || first.includes(':') || first === 'localhost' || first.startsWith('['))) {
    registry = parts.shift()!;
    if (!HOST_RE.test(registry)) throw bad(`'${registry}' is not a registry host[:port]`);
  }
  if (registry === 'index.docker.io' || registry === 'registry-1.docker.io') registry = 'docker.io';
  if (registry === 'docker.io' && parts.length === 1) parts.unshift('library');
  for (const p of parts) if (!COMPONENT_RE.test(p)) throw bad(`'${p}' is not a valid repository name component (lowercase letters, digits, separators)`);
  const repository = parts.join('/');
  if (!tag && !digest) tag = 'latest';
  return {
    registry,
    repository,
    ...(tag ? { tag } : {}),
    ...(digest ? { digest } : {}),
    canonical: `${registry}/${repository}${tag ? `:${tag}` : ''}${digest ? `@${digest}` : ''}`,
  };
}

/** Whether `registry` (host[:port]) is listed as insecure: plain HTTP or unverified TLS (pure). */
export function isInsecure(registry: string, insecure: readonly string[]): boolean {
  return insecure.some((r) => r === registry || (!r.includes(':') && registry.split(':')[0] === r && registry.includes(':')));
}

/**
 * What skopeo's failure means for a client (pure): unknown image or tag 404, credentials refused
 * 401 (REGISTRY_AUTH), registry unreachable 503 with a retry hint, TLS problems 502 naming the
 * insecure-registries setting. The registry's own words are kept.
 */
export function skopeoError(stderr: string, image: string, registry: string): CubeError {
  const msgs = [...stderr.matchAll(/msg="((?:[^"\\]|\\.)*)"/g)].map((m) => m[1]!.replace(/\\"/g, '"'));
  // The last message is skopeo's verdict; the prefixes it adds say nothing to a client.
  const last = msgs.length ? msgs[msgs.length - 1]! : (stderr.trim().split('\n').filter(Boolean).pop() ?? 'no output');
  const said = last.replace(/^(Error: )?(Error parsing image name|initializing source|Error initializing source) "?[^"]*"?: /, '').slice(0, 1000);
  const s = said.toLowerCase();
  // An HTTP status in the message, not a port or part of an address (`localhost:40339`).
  const status = (codes: string) => new RegExp(`(?<![:.\\d])(${codes})(?!\\d)`).test(s);
  if (/no space left on device|disk quota exceeded/.test(s))
    return new CubeError('STORE_FULL', `no room under the layer store for ${image}: ${said}`, { retryAfter: 60 });
  if (/server gave http response to https client|x509|certificate|tls:/.test(s)) {
    return new CubeError(
      'REGISTRY_UNREACHABLE',
      `registry ${registry}: TLS failed (${said}); a registry without valid TLS must be listed in cubelet.toml [registry] insecure`,
    );
  }
  if ((/manifest unknown|name unknown|not found/.test(s) || status('404')) && !/no such host/.test(s))
    return new CubeError('IMAGE_NOT_FOUND', `image ${image} not found in registry ${registry}: ${said}`);
  if (/unauthorized|authentication required|invalid username\/password|denied|forbidden/.test(s) || status('401|403'))
    return new CubeError('REGISTRY_AUTH', `registry ${registry} refused access to ${image} (give credentials, or check them): ${said}`);
  if (
    /connection refused|no such host|i\/o timeout|timeout|network is unreachable|connection reset|dial tcp|eof|too many requests/.test(s) ||
    status('429|502|503|504')
  ) {
    return new CubeError('REGISTRY_UNREACHABLE', `registry ${registry} unreachable while pulling ${image}: ${said}; try again later`, { retryAfter: 30 });
  }
  return new CubeError('REGISTRY_UNREACHABLE', `pulling ${image} from ${registry} failed: ${said}`, { retryAfter: 30 });
}

export interface RegistryAccess {
  creds?: RegistryCreds;
  /** cubelet.toml [registry] insecure. */
  insecure: readonly string[];
}

/** A private scratch dir holding the auth file skopeo reads (when there are credentials); removed by `done`. */
async function authArgs(
  dataDir: string,
  ref: ImageRef,
  a: RegistryAccess,
  flags: { creds: string; noCreds: string; tls: string },
): Promise<{ args: string[]; dir: string; done: () => Promise<void> }> {
  await ensureStoreDir(dataDir);
  const dir = join(scratchDir(dataDir), `pull-${randomBytes(6).toString('hex')}`);
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const done = () => rm(dir, { recursive: true, force: true });
  const args = [isInsecure(ref.registry, a.insecure) ? `${flags.tls}=false` : `${flags.tls}=true`];
  if (a.creds) {
    const file = join(dir, 'auth.json');
    const auth = Buffer.from(`${a.creds.username}:${a.creds.password}`).toString('base64');
    await writeFile(file, JSON.stringify({ auths: { [ref.registry]: { auth } } }), { mode: 0o600 });
    args.push(`${flags.creds}=${file}`);
  } else args.push(flags.noCreds);
  return { args, dir, done };
}

async function skopeo(args: string[], ref: ImageRef, onLine?: (line: string) => void, signal?: AbortSignal): Promise<string> {
  let p;
  try {
    p = execa('skopeo', args, {
      reject: false,
      ...(signal ? { cancelSignal: signal } : {}),
      stripFinalNewline: false,
      env: { HOME: '/nonexistent', XDG_RUNTIME_DIR: '/nonexistent', PATH: process.env.PATH ?? '/usr/bin:/bin' },
      extendEnv: false,
    });
  } catch (e) {
    throw new CubeError('INTERNAL', `skopeo could not start: ${(e as Error).message}`);
  }
  if (onLine) {
    let partial = '';
    p.stdout.on('data', (c: Buffer) => {
      const parts = (partial + c.toString('utf8')).split('\n');
      partial = parts.pop() ?? '';
      for (const l of parts) if (l.trim()) onLine(l.trim());
    });
  }
  const r = await p;
  if (signal?.aborted) throw signal.reason as Error;
  if (r.exitCode === undefined)
    throw new CubeError(
      'INTERNAL',
      `skopeo could not run on this node (install.sh installs it: it is how images are pulled): ${String(r.message).slice(0, 300)}`,
    );
  if (r.exitCode !== 0) throw skopeoError(String(r.stderr), ref.canonical, ref.registry);
  return String(r.stdout);
}

/**
 * The manifest digest `ref` names now (`skopeo inspect`): 404 / 401 / 503 as skopeoError says.
 * Asked even when `ref` names a digest: the registry answering the caller's credentials is what
 * lets the caller have the image, so a digest this node or a peer holds already skips no check.
 */
export async function resolveDigest(dataDir: string, ref: ImageRef, a: RegistryAccess): Promise<string> {
  const auth = await authArgs(dataDir, ref, a, { creds: '--authfile', noCreds: '--no-creds', tls: '--tls-verify' });
  try {
    // The manifest as the registry serves it (no blob fetched): its sha256 is the digest a pull by digest asks for.
    const raw = await skopeo(['--command-timeout', '30s', 'inspect', '--raw', '--retry-times', '1', ...auth.args, `docker://${ref.canonical}`], ref);
    if (!raw.trimStart().startsWith('{'))
      throw new CubeError('REGISTRY_UNREACHABLE', `registry ${ref.registry} answered no manifest for ${ref.canonical} (${JSON.stringify(raw.slice(0, 100))})`, {
        retryAfter: 30,
      });
    return ref.digest ?? `sha256:${createHash('sha256').update(Buffer.from(raw, 'utf8')).digest('hex')}`;
  } finally {
    await auth.done();
  }
}

/** What a pulled image gives a template: its layers (lowest first, the base layer on top) and config. */
export interface PulledImage {
  /** registry/repository:tag as asked (never credentials). */
  image: string;
  digest: string;
  layers: string[];
  config: TemplateConfig;
  entrypoint?: string[];
  cmd?: string[];
  sizeBytes: number;
  /** False when the digest was in the store already: nothing was copied. */
  pulled: boolean;
}

/** An image as images.json keeps it, by manifest digest. */
export type ImageEntry = Omit<PulledImage, 'pulled' | 'digest'>;
type ImagesIndex = Record<string, ImageEntry>;

const indexFile = (dataDir: string) => join(layersRoot(dataDir), 'images.json');

async function readImages(dataDir: string): Promise<ImagesIndex> {
  try {
    return JSON.parse(await readFile(indexFile(dataDir), 'utf8')) as ImagesIndex;
  } catch {
    return {};
  }
}

/** The store's entry for image `digest` when every layer of it is in the store. */
export async function storedImage(dataDir: string, digest: string): Promise<ImageEntry | undefined> {
  const e = (await readImages(dataDir))[digest];
  return e?.layers.every((l) => existsSync(layerDir(dataDir, l))) ? e : undefined;
}

/** Adds `digest` to images.json (for a caller holding the writer lock); entries whose layers left the store are dropped on the way. */
async function recordImage(dataDir: string, digest: string, entry: ImageEntry): Promise<void> {
  const kept = Object.fromEntries(Object.entries(await readImages(dataDir)).filter(([, e]) => e.layers.every((l) => existsSync(layerDir(dataDir, l)))));
  kept[digest] = entry;
  const tmp = `${indexFile(dataDir)}.${process.pid}.tmp`;
  await writeFile(tmp, JSON.stringify(kept));
  await rename(tmp, indexFile(dataDir));
}

/** An image a node holds, as it serves it to the others: its entry and, per layer, the tree digest a copy is checked against and its unpacked bytes. */
export interface HeldImage {
  entry: ImageEntry;
  trees: Record<string, string>;
  sizes: Record<string, number>;
}

/** What the cluster says of an image digest (templates/relay.ts): node `node` holds it; this node is to pull it (it holds the pull lease); or another node is pulling it. */
export type PeerAnswer = { node: string; held: HeldImage } | { pull: true } | { wait: true };

/**
 * The pull lease's life: a node renews it every third of it while its copy runs; a node killed
 * mid-pull stops renewing, and the others pull once it lapsed.
 */
export const PULL_LEASE_MS = 30_000;
/** How often a node waiting for another node's pull of the same digest asks again. */
const PEER_POLL_MS = 1000;

/** The cluster as a compute node's pull sees it (templates/fetch.ts FetchingCatalog, through the control plane). */
export interface ImagePeers {
  ask(digest: string): Promise<PeerAnswer>;
  /** Keeps this node's pull lease on `digest` (an `ask` answered `pull`), or lets it go. */
  lease(digest: string, op: 'renew' | 'release'): Promise<void>;
  /** The layers of `held` the store lacks, from node `node` (else another holding them), each checked (for a caller holding the writer lock); those added go to `added`. */
  fetch(peer: { node: string; held: HeldImage }, added: string[], progress: (line: string) => void): Promise<void>;
}

interface CopyJob {
  store: TemplateStore;
  ref: ImageRef;
  digest: string;
  a: RegistryAccess;
  added: string[];
  progress: (line: string) => void;
}

/**
 * The image of `ref` at `digest` in the layer store: from images.json when every layer is there;
 * else, on a cluster node (`peers`), from a node holding it, or from the registry by one node at a
 * time (the others wait for it, then fetch from it); else copied with skopeo and imported. For a
 * caller inside store.exclusive() that resolved `digest` with the caller's credentials first
 * (resolveDigest): peers serve only what the registry let the caller have. `added` gets the
 * layers this call put in the store (the caller drops them if what it registers fails).
 */
export async function pullLocked(
  store: TemplateStore,
  ref: ImageRef,
  digest: string,
  a: RegistryAccess,
  added: string[],
  progress: (line: string) => void,
  peers?: ImagePeers,
): Promise<PulledImage> {
  const known = await storedImage(store.dataDir, digest);
  if (known) {
    progress(`${ref.canonical}@${digest}: in the layer store already (${known.layers.length} layers), not pulled again`);
    return { ...known, image: ref.canonical, digest, pulled: false };
  }
  const registry = () => copyLocked({ store, ref, digest, a, added, progress });
  if (!peers) return registry();
  for (let waiting = false; ; waiting = true) {
    let ans: PeerAnswer;
    try {
      ans = await peers.ask(digest);
    } catch (e) {
      progress(`asking the cluster for ${digest} failed (${toCubeError(e).message}): pulling it from the registry`);
      return registry();
    }
    if ('held' in ans) {
      try {
        progress(`${ref.canonical}@${digest}: node ${ans.node} holds it: fetching its layers from the cluster, not from the registry`);
        await peers.fetch(ans, added, progress);
        const entry = { ...ans.held.entry, image: ref.canonical };
        await recordImage(store.dataDir, digest, entry);
        return { ...entry, digest, pulled: false };
      } catch (e) {
        progress(`fetching ${digest} from node ${ans.node} failed (${toCubeError(e).message}): pulling it from the registry`);
        return registry();
      }
    }
    if ('pull' in ans) {
      // A renewal lost is retried a third of a lease later; should the lease lapse, another node pulls too (twice, not never).
      const renew = setInterval(() => void peers.lease(digest, 'renew').catch(() => undefined), PULL_LEASE_MS / 3);
      try {
        return await registry();
      } finally {
        clearInterval(renew);
        // A release lost: the lease lapses by itself within PULL_LEASE_MS (the waiting nodes find the image held meanwhile).
        await peers.lease(digest, 'release').catch(() => undefined);
      }
    }
    if (!waiting) progress(`another node of the cluster is pulling ${digest}: waiting for it, then fetching from it (one pull per cluster)`);
    await new Promise((r) => setTimeout(r, PEER_POLL_MS));
  }
}

/** `digest` copied from the registry with skopeo and imported (pullLocked's arguments). */
async function copyLocked({ store, ref, digest, a, added, progress }: CopyJob): Promise<PulledImage> {
  const dataDir = store.dataDir;
  const auth = await authArgs(dataDir, ref, a, { creds: '--src-authfile', noCreds: '--src-no-creds', tls: '--src-tls-verify' });
  try {
    const file = join(auth.dir, 'image.tar');
    const byDigest = `${ref.registry}/${ref.repository}@${digest}`;
    progress(`Pulling ${ref.canonical} (${digest}) with skopeo, from the registry`);
    await boundedCopy(auth.dir, store.unpackMaxBytes(), (signal) =>
      skopeo(
        [
          '--tmpdir',
          auth.dir,
          '--command-timeout',
          `${PULL_TIMEOUT_MIN}m`,
          'copy',
          '--retry-times',
          '2',
          ...auth.args,
          `docker://${byDigest}`,
          `oci-archive:${file}`,
        ],
        ref,
        (l) => progress(l),
        signal,
      ),
    );
    progress(`Pulled ${ref.canonical}; unpacking its layers`);
    const r = await importLayersLocked(store, file, (p) => {
      if (p.phase === 'layer') progress(`layer ${p.layer}/${p.of} ${p.digest?.slice(0, 19)}${p.cached ? ' (in the store already)' : ''}`);
    });
    added.push(...r.added);
    const entry = {
      image: ref.canonical,
      layers: r.layers,
      config: r.config,
      ...(r.entrypoint ? { entrypoint: r.entrypoint } : {}),
      ...(r.cmd ? { cmd: r.cmd } : {}),
      sizeBytes: r.sizeBytes,
    };
    await recordImage(dataDir, digest, entry);
    return { ...entry, digest, pulled: true };
  } finally {
    await auth.done();
  }
}

/** How often a pull's spool is measured against its bound. */
const SPOOL_CHECK_MS = 250;

/**
 * Runs `copy` (skopeo writing an image into `dir`, in the store's scratch) while what `dir` holds
 * stays within one import's bounds (UnpackBudget: a pulled archive is at most about its layers'
 * unpacked size, and the store keeps its reserve), measured every SPOOL_CHECK_MS: past them the
 * copy is stopped with the budget's 413 or 503, and the caller removes `dir`. skopeo writes the
 * archive itself, so its bytes are counted as they land, not as they stream.
 */
async function boundedCopy<T>(dir: string, limitBytes: number, copy: (signal: AbortSignal) => Promise<T>): Promise<T> {
  const budget = new UnpackBudget(limitBytes);
  const ac = new AbortController();
  let counted = 0;
  let busy = false;
  const timer = setInterval(() => {
    if (busy) return;
    busy = true;
    layerBytes(dir)
      .then(
        async (n) => {
          await budget.charge(Math.max(0, n - counted), dir, 'the pulled image');
          counted = Math.max(counted, n);
        },
        (e: NodeJS.ErrnoException) => {
          if (e.code !== 'ENOENT') throw e; // a file skopeo renamed or removed during the walk: measured at the next look
        },
      )
      .catch((e: unknown) => ac.abort(e))
      .finally(() => (busy = false));
  }, SPOOL_CHECK_MS);
  try {
    return await copy(ac.signal);
  } finally {
    clearInterval(timer);
  }
}

export interface PullTemplateOptions extends RegistryAccess {
  /** NAME[:TAG] of the template to register. */
  ref: string;
  /** Overrides of the image's config (start and ready commands, workdir, user, runtime). */
  config?: Partial<TemplateConfig>;
  progress?: (line: string) => void;
}

/** `image` resolved to its digest now (404 / 403 / 503 before anything is pulled). */
export async function resolveImage(dataDir: string, image: string, a: RegistryAccess): Promise<{ ref: ImageRef; digest: string }> {
  const ref = parseImageRef(image);
  return { ref, digest: await resolveDigest(dataDir, ref, a) };
}

/** Pulls a resolved image (resolveImage) and registers it as template `o.ref` (source 'registry', its digest recorded). */
export function pullTemplate(
  store: TemplateStore,
  image: { ref: ImageRef; digest: string },
  o: PullTemplateOptions,
): Promise<TemplateRecord & { pulled: boolean }> {
  const target = parseTemplateRef(o.ref);
  if (target.name === HOST_TEMPLATE) throw new CubeError('CONFLICT', `template name '${HOST_TEMPLATE}' is reserved`);
  return store.exclusive(async () => {
    const added: string[] = [];
    try {
      const img = await pullLocked(store, image.ref, image.digest, o, added, o.progress ?? (() => undefined));
      const rec = await store.putLocked({
        ...target,
        layers: img.layers,
        config: { ...img.config, ...o.config },
        source: 'registry',
        sizeBytes: img.sizeBytes,
        image: { ...(img.entrypoint ? { entrypoint: img.entrypoint } : {}), ...(img.cmd ? { cmd: img.cmd } : {}) },
        registry: { image: img.image, digest: image.digest },
      });
      return { ...rec, pulled: img.pulled };
    } catch (e) {
      await store.dropUnusedLayers(added);
      throw e;
    }
  });
}
