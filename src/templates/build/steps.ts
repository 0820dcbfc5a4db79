// The pure half of template builds: the E2B build body (`POST /v2/templates/{id}/builds/{buildID}`,
// the SDK's Template().serialize()) checked into a plan, the cache key of each step (the chain of
// parent key, step and file hashes, as E2B caches), what ENV/WORKDIR/USER do to the template's
// config, and where a COPY puts each file of its upload. The I/O half is ./build.ts.
import { createHash } from 'node:crypto';
import { posix } from 'node:path';
import { z } from 'zod';
import { CubeError } from '../../errors.js';
import { isSandboxUser } from '../store.js';
import type { TemplateConfig } from '../../runtime/types.js';
import type { ImageRef, RegistryCreds } from '../layers/pull.js';

const StepSchema = z.object({
  type: z.string().min(1),
  args: z.array(z.string()).default([]),
  force: z.boolean().optional(),
  filesHash: z.string().optional(),
  // Sent by the SDK, meaningless here (the upload is already made).
  forceUpload: z.boolean().optional(),
  resolveSymlinks: z.boolean().optional(),
  gzip: z.boolean().optional(),
});

export const BuildBodySchema = z.object({
  fromTemplate: z.string().min(1).optional(),
  fromImage: z.string().min(1).optional(),
  fromImageRegistry: z.looseObject({ type: z.string() }).optional(),
  startCmd: z.string().optional(),
  readyCmd: z.string().optional(),
  steps: z.array(StepSchema).max(500).default([]),
  force: z.boolean().default(false),
});
export type BuildBody = z.input<typeof BuildBodySchema>;

export type Step =
  | { type: 'RUN'; cmd: string; user?: string; force: boolean }
  | { type: 'COPY'; src: string; dest: string; user?: string; mode?: number; filesHash: string; force: boolean }
  | { type: 'ENV'; env: Record<string, string>; force: boolean }
  | { type: 'WORKDIR'; dir: string; force: boolean }
  | { type: 'USER'; user: string; force: boolean };

/** A registry image a build starts from, resolved to its digest when the build starts (build.ts). */
export interface RegistryBase {
  ref: ImageRef;
  digest: string;
  creds?: RegistryCreds;
}

export interface BuildPlan {
  /** `creds`: the build body's fromImageRegistry (E2B fromImage(image, {username, password})); `registry` once resolved. */
  from: { template: string } | { image: string; creds?: RegistryCreds; registry?: RegistryBase };
  steps: Step[];
  startCmd?: string;
  readyCmd?: string;
  /** Skip the cache for every step. */
  force: boolean;
}

const FILES_HASH_RE = /^[0-9a-f]{64}$/;

/** The SDK's `filesHash` (sha256 hex of the COPY's files): the name its upload is kept under (pure). */
export function checkFilesHash(hash: string): string {
  if (!FILES_HASH_RE.test(hash))
    throw new CubeError('BAD_REQUEST', `files hash must be 64 lowercase hex characters (got ${JSON.stringify(hash.slice(0, 80))})`);
  return hash;
}

function user(u: string | undefined, what: string): string | undefined {
  if (u === undefined || u === '') return undefined;
  if (!isSandboxUser(u)) throw new CubeError('BAD_REQUEST', `${what}: user must be 'root' or 'user' (got ${JSON.stringify(u)})`);
  return u;
}

function absolute(p: string, what: string): string {
  if (!p.startsWith('/') || p.includes('\0')) throw new CubeError('BAD_REQUEST', `${what}: ${JSON.stringify(p)} must be an absolute path`);
  return p;
}

/** The build body as a plan; 400 naming the step (1-based, as the SDK counts after its base) (pure). */
export function parseBuild(body: unknown): BuildPlan {
  const r = BuildBodySchema.safeParse(body);
  if (!r.success) throw new CubeError('BAD_REQUEST', `build body: ${r.error.issues.map((i) => `${i.path.join('.') || '(body)'} ${i.message}`).join('; ')}`);
  const b = r.data;
  if (!!b.fromTemplate === !!b.fromImage) throw new CubeError('BAD_REQUEST', 'build body: exactly one of fromTemplate and fromImage must be given');
  const creds = registryCreds(b.fromImageRegistry, !!b.fromImage);
  const steps = b.steps.map((s, i) => parseStep(s, `step ${i + 1} (${s.type})`));
  return {
    from: b.fromTemplate ? { template: b.fromTemplate } : { image: b.fromImage!, ...(creds ? { creds } : {}) },
    steps,
    ...(b.startCmd ? { startCmd: b.startCmd } : {}),
    ...(b.readyCmd ? { readyCmd: b.readyCmd } : {}),
    force: b.force,
  };
}

/** fromImageRegistry: username and password (type 'registry'); AWS and GCP registries are refused, naming what works (pure). */
function registryCreds(r: { type: string; [k: string]: unknown } | undefined, fromImage: boolean): RegistryCreds | undefined {
  if (r === undefined) return undefined;
  if (!fromImage) throw new CubeError('BAD_REQUEST', 'fromImageRegistry goes with fromImage');
  if (r.type !== 'registry')
    throw new CubeError(
      'BAD_REQUEST',
      `fromImageRegistry type '${String(r.type).slice(0, 40)}' is not supported here (fromAWSRegistry, fromGCPRegistry): use fromImage(image, {username, password}) with a token the registry accepts as a password`,
    );
  if (typeof r.username !== 'string' || typeof r.password !== 'string' || !r.username || !r.password)
    throw new CubeError('BAD_REQUEST', 'fromImageRegistry: username and password are required');
  if (r.username.includes(':')) throw new CubeError('BAD_REQUEST', 'fromImageRegistry: the username must not contain a colon');
  return { username: r.username, password: r.password };
}

function parseStep(s: z.infer<typeof StepSchema>, what: string): Step {
  const force = s.force ?? false;
  const a = s.args;
  switch (s.type) {
    case 'RUN': {
      if (!a[0]) throw new CubeError('BAD_REQUEST', `${what}: a command is required`);
      const u = user(a[1], what);
      return { type: 'RUN', cmd: a[0], ...(u ? { user: u } : {}), force };
    }
    case 'COPY': {
      if (!a[0] || !a[1]) throw new CubeError('BAD_REQUEST', `${what}: source and destination are required`);
      if (!s.filesHash) throw new CubeError('BAD_REQUEST', `${what}: filesHash is required (the SDK computes it)`);
      const u = user(a[2], what);
      let mode: number | undefined;
      if (a[3]) {
        if (!/^[0-7]{3,4}$/.test(a[3])) throw new CubeError('BAD_REQUEST', `${what}: mode must be octal (got ${JSON.stringify(a[3])})`);
        mode = parseInt(a[3], 8);
      }
      return {
        type: 'COPY',
        src: a[0],
        dest: a[1],
        ...(u ? { user: u } : {}),
        ...(mode !== undefined ? { mode } : {}),
        filesHash: checkFilesHash(s.filesHash),
        force,
      };
    }
    case 'ENV': {
      if (a.length === 0 || a.length % 2) throw new CubeError('BAD_REQUEST', `${what}: arguments must be KEY, VALUE pairs`);
      const env: Record<string, string> = {};
      for (let i = 0; i < a.length; i += 2) {
        if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(a[i]!)) throw new CubeError('BAD_REQUEST', `${what}: ${JSON.stringify(a[i])} is not a variable name`);
        env[a[i]!] = a[i + 1]!;
      }
      return { type: 'ENV', env, force };
    }
    case 'WORKDIR':
      return { type: 'WORKDIR', dir: absolute(a[0] ?? '', what), force };
    case 'USER':
      return {
        type: 'USER',
        user:
          user(a[0], what) ??
          (() => {
            throw new CubeError('BAD_REQUEST', `${what}: a user is required`);
          })(),
        force,
      };
    default:
      throw new CubeError('BAD_REQUEST', `${what}: unknown step type (known: RUN, COPY, ENV, WORKDIR, USER)`);
  }
}

/** Whether the step makes a layer (RUN, COPY, and WORKDIR, which makes its directory as Docker's does) or only changes the config (ENV, USER) (pure). */
export function makesLayer(s: Step): s is Extract<Step, { type: 'RUN' | 'COPY' | 'WORKDIR' }> {
  return s.type === 'RUN' || s.type === 'COPY' || s.type === 'WORKDIR';
}

/**
 * The cache key of a step: the parent's key, then the step without its force flag (a COPY
 * carries its files' hash, so new file contents make a new key). The first parent key is the
 * base's (its template digest) (pure).
 */
export function stepKey(parentKey: string, s: Step, uploads?: string): string {
  const { force: _force, ...rest } = s;
  const h = createHash('sha256').update(parentKey).update('\n').update(JSON.stringify(rest));
  // A COPY's layer holds what its uploader sent: cached for builds of the same uploads only (build.ts uploadsOf).
  if (s.type === 'COPY' && uploads !== undefined) h.update('\n').update(uploads);
  return h.digest('hex');
}

/** The key the next step chains on after a layer step: its key and the layer it made (so a forced step that makes other files makes every later key new) (pure). */
export function afterLayer(key: string, layerDigest: string): string {
  return createHash('sha256').update(key).update('\n').update(layerDigest).digest('hex');
}

/** The config after a step (ENV adds, WORKDIR and USER replace; RUN and COPY keep it) (pure). */
export function applyStep(c: TemplateConfig, s: Step): TemplateConfig {
  switch (s.type) {
    case 'ENV':
      return { ...c, env: { ...c.env, ...s.env } };
    case 'WORKDIR':
      return { ...c, workdir: s.dir };
    case 'USER':
      return { ...c, user: s.user };
    default:
      return c;
  }
}

/**
 * Where a file of a COPY's upload lands in the sandbox, or undefined when the entry is not part
 * of `src` (the upload holds the files `src` matched, by their path in the build context).
 * Like Docker's COPY: a file copied onto a `dest` ending in `/` keeps its name in it, onto another
 * dest it becomes dest; a directory's contents go below dest; a glob's matches keep their path
 * below the glob's fixed prefix. Relative dests are below the workdir (pure).
 */
export function copyTarget(src: string, dest: string, entry: string, workdir: string, isDir = false): string | undefined {
  const clean = (p: string) =>
    posix
      .normalize(p)
      .replace(/^\.\/+/, '')
      .replace(/\/+$/, '');
  const s = clean(src);
  const e = clean(entry);
  if (e === '' || e === '.' || e.startsWith('../') || e === '..') return undefined;
  const base = dest.startsWith('/') ? dest : posix.join(workdir || '/home/user', dest);
  const into = (rel: string) => posix.join(base, rel);
  if (e === s) return dest.endsWith('/') && !isDir ? into(posix.basename(e)) : posix.normalize(base).replace(/(.)\/+$/, '$1');
  if (s === '.' || s === '') return into(e);
  if (e.startsWith(`${s}/`)) return into(e.slice(s.length + 1));
  if (/[*?[]/.test(s)) {
    const fixed = s.split('/').findIndex((c) => /[*?[]/.test(c));
    const prefix = s.split('/').slice(0, fixed).join('/');
    if (prefix === '' || e.startsWith(`${prefix}/`)) return into(prefix ? e.slice(prefix.length + 1) : e);
  }
  return undefined;
}

/** A short line naming a step in logs and errors (pure). */
export function describeStep(s: Step): string {
  switch (s.type) {
    case 'RUN':
      return `RUN ${s.cmd.length > 80 ? `${s.cmd.slice(0, 77)}...` : s.cmd}${s.user ? ` (as ${s.user})` : ''}`;
    case 'COPY':
      return `COPY ${s.src} ${s.dest}`;
    case 'ENV':
      return `ENV ${Object.keys(s.env).join(' ')}`;
    case 'WORKDIR':
      return `WORKDIR ${s.dir}`;
    case 'USER':
      return `USER ${s.user}`;
  }
}
