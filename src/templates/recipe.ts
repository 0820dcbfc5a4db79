// `cubectl template build FILE`: a recipe (JSON or YAML) with the steps of the e2b SDK's
// Template() builder, turned into the same build body the SDK sends (the daemon checks it with
// the one parser, src/templates/build/steps.ts), and the files of its COPY steps hashed and
// packed for upload the way the SDK does (build/steps.ts FilesHash; a gzipped tar of the files by
// their path in the context). Links are copied as links, and a context has a size bound.
import { createReadStream } from 'node:fs';
import { lstat, readdir, readlink, realpath } from 'node:fs/promises';
import { lstatOrAbsent } from '../fsx.js';
import { dirname, join, posix, relative, resolve } from 'node:path';
import { createGzip } from 'node:zlib';
import { pack } from 'tar-stream';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { UsageError } from '../cli/io.js';
import { FilesHash } from './build/files-hash.js';
import { DEFAULT_CONTEXT_BOUND, type ContextBound } from './context-bound.js';

const Copy = z.strictObject({
  src: z.string().min(1),
  dest: z.string().min(1),
  user: z.string().optional(),
  mode: z.union([z.string(), z.number()]).optional(),
});
const StepSchema = z.union([
  z.strictObject({ run: z.union([z.string().min(1), z.strictObject({ cmd: z.string().min(1), user: z.string().optional() })]) }),
  z.strictObject({ copy: Copy }),
  z.strictObject({ env: z.record(z.string(), z.union([z.string(), z.number(), z.boolean()])) }),
  z.strictObject({ workdir: z.string().min(1) }),
  z.strictObject({ user: z.string().min(1) }),
]);

export const RecipeSchema = z.strictObject({
  name: z.string().min(1).optional(),
  tags: z.array(z.string().min(1)).optional(),
  fromTemplate: z.string().min(1).optional(),
  fromImage: z.string().min(1).optional(),
  /** Where COPY sources are, relative to the recipe file (default: its directory). */
  context: z.string().optional(),
  steps: z.array(StepSchema).default([]),
  startCmd: z.string().optional(),
  readyCmd: z.string().optional(),
  cpuCount: z.number().int().min(1).optional(),
  memoryMB: z.number().int().min(128).optional(),
});
export type Recipe = z.infer<typeof RecipeSchema>;

/** A step of the build body (the SDK's TemplateStep). */
export interface BodyStep {
  type: string;
  args: string[];
  force: boolean;
  filesHash?: string;
}

/** A recipe's COPY, for hashing and upload. */
export interface CopySpec {
  /** Index in the body's steps. */
  step: number;
  src: string;
  dest: string;
}

/** The recipe text (JSON is YAML) as a recipe; UsageError naming what is wrong (pure). */
export function parseRecipe(text: string, file: string): Recipe {
  let raw: unknown;
  try {
    raw = parseYaml(text);
  } catch (e) {
    throw new UsageError(`${file}: not JSON or YAML: ${(e as Error).message.split('\n')[0]}`);
  }
  const r = RecipeSchema.safeParse(raw ?? {});
  if (!r.success) throw new UsageError(`${file}: ${r.error.issues.map((i) => `${i.path.join('.') || '(top)'}: ${i.message}`).join('; ')}`);
  if (!!r.data.fromTemplate === !!r.data.fromImage) throw new UsageError(`${file}: give exactly one of fromTemplate and fromImage`);
  return r.data;
}

/** The build body without the COPY hashes, and the COPY steps to hash (pure). */
export function recipeBody(
  r: Recipe,
  force: boolean,
): { body: { fromTemplate?: string; fromImage?: string; startCmd?: string; readyCmd?: string; force: boolean; steps: BodyStep[] }; copies: CopySpec[] } {
  const copies: CopySpec[] = [];
  const steps = r.steps.map((s, i): BodyStep => {
    if ('run' in s)
      return typeof s.run === 'string'
        ? { type: 'RUN', args: [s.run], force: false }
        : { type: 'RUN', args: [s.run.cmd, ...(s.run.user ? [s.run.user] : [])], force: false };
    if ('copy' in s) {
      const c = s.copy;
      if (/[*?[]/.test(c.src)) throw new UsageError(`step ${i + 1}: copy src ${JSON.stringify(c.src)}: globs are for the SDK; name a file or a directory`);
      if (c.src.startsWith('/') || posix.normalize(c.src).startsWith('..'))
        throw new UsageError(`step ${i + 1}: copy src ${JSON.stringify(c.src)} must be inside the context`);
      copies.push({ step: i, src: c.src, dest: c.dest });
      // A number is read as chmod reads it (755 is rwxr-xr-x): YAML 1.2 and JSON have no octal literal.
      const mode = c.mode === undefined ? '' : String(c.mode).padStart(4, '0');
      return { type: 'COPY', args: [c.src, c.dest, c.user ?? '', mode], force: false };
    }
    if ('env' in s) return { type: 'ENV', args: Object.entries(s.env).flatMap(([k, v]) => [k, String(v)]), force: false };
    if ('workdir' in s) return { type: 'WORKDIR', args: [s.workdir], force: false };
    return { type: 'USER', args: [s.user], force: false };
  });
  return {
    body: {
      ...(r.fromTemplate ? { fromTemplate: r.fromTemplate } : {}),
      ...(r.fromImage ? { fromImage: r.fromImage } : {}),
      ...(r.startCmd ? { startCmd: r.startCmd } : {}),
      ...(r.readyCmd ? { readyCmd: r.readyCmd } : {}),
      force,
      steps,
    },
    copies,
  };
}

/** One entry of a COPY: a file, a directory or a link (copied as the link, never followed). */
export interface CopyEntry {
  /** Posix path in the context. */
  rel: string;
  abs: string;
  type: 'file' | 'dir' | 'symlink';
  /** st_mode (type bits included: the SDK hashes it so). */
  mode: number;
  size: number;
  /** A link's target, as it is. */
  target?: string;
}

export { DEFAULT_CONTEXT_BOUND, type ContextBound } from './context-bound.js';

/**
 * The entries a COPY src names under the context, sorted by path, read with lstat: a symlink is
 * an entry of its own (its target kept as it is, as docker and the SDK's default do), never a way
 * out of the context (before, a link to a host secret was baked into the template and a link to
 * a large directory never finished). A src reached through a link of the context's is refused,
 * other file types (FIFOs, sockets, devices) too, and so is a context past `bound`. `progress`
 * hears the running totals.
 */
export async function copyFiles(
  context: string,
  src: string,
  bound: ContextBound = DEFAULT_CONTEXT_BOUND,
  progress?: (entries: number, bytes: number) => void,
): Promise<CopyEntry[]> {
  const root = resolve(context, src);
  const realContext = await realpath(context).catch(() => {
    throw new UsageError(`context ${context}: no such directory`);
  });
  const parent = await realpath(dirname(root)).catch(() => undefined); // absent: refused just below as not inside the context
  if (!parent || (parent !== realContext && !parent.startsWith(`${realContext}/`)))
    throw new UsageError(`copy src ${src}: not inside the context ${context} (a link on the way leads out)`);
  if (!(await lstatOrAbsent(root))) throw new UsageError(`copy src ${src}: no such file or directory in ${context}`);
  const out: CopyEntry[] = [];
  let bytes = 0;
  const add = async (abs: string): Promise<void> => {
    const s = await lstat(abs);
    const rel = relative(context, abs).split('\\').join('/');
    const type = s.isSymbolicLink() ? 'symlink' : s.isDirectory() ? 'dir' : s.isFile() ? 'file' : undefined;
    if (!type) throw new UsageError(`copy src ${src}: ${rel} is not a file, directory or link`);
    out.push({ rel, abs, type, mode: s.mode, size: s.size, ...(type === 'symlink' ? { target: await readlink(abs) } : {}) });
    if (type === 'file') bytes += s.size;
    if (out.length > bound.maxEntries) throw new UsageError(`copy src ${src}: more than ${bound.maxEntries} entries in the context (--max-context-entries)`);
    if (bytes > bound.maxBytes)
      throw new UsageError(`copy src ${src}: more than ${(bound.maxBytes / 2 ** 20).toFixed(0)} MiB of files in the context (--max-context-mib)`);
    progress?.(out.length, bytes);
    if (type === 'dir') for (const name of (await readdir(abs)).sort()) await add(join(abs, name));
  };
  await add(root);
  return out.sort((a, b) => (a.rel < b.rel ? -1 : a.rel > b.rel ? 1 : 0));
}

/** The SDK's files hash of a COPY's entries (steps.ts FilesHash). */
export async function filesHash(c: CopySpec, entries: readonly CopyEntry[]): Promise<string> {
  const h = new FilesHash(c.src, c.dest);
  for (const f of entries) {
    h.entry(f.rel, f.mode, f.size);
    if (f.type === 'file') for await (const chunk of createReadStream(f.abs)) h.data(chunk as Buffer);
    else if (f.type === 'symlink') h.data(f.target!);
  }
  return h.digest();
}

/** A gzipped tar of a COPY's entries by their path in the context (what the SDK uploads); `sent` hears the bytes packed. */
export async function* copyArchive(entries: readonly CopyEntry[], sent?: (bytes: number) => void): AsyncGenerator<Buffer> {
  const p = pack();
  let packed = 0;
  const writing = (async () => {
    for (const f of entries) {
      if (f.type === 'dir') {
        p.entry({ name: `${f.rel}/`, type: 'directory', mode: f.mode & 0o7777 });
        continue;
      }
      if (f.type === 'symlink') {
        p.entry({ name: f.rel, type: 'symlink', linkname: f.target!, mode: f.mode & 0o7777 });
        continue;
      }
      await new Promise<void>((res, rej) => {
        const done = (err?: Error | null) => (err ? rej(err) : res());
        if (f.size === 0) return void p.entry({ name: f.rel, size: 0, mode: f.mode & 0o7777 }, Buffer.alloc(0), done);
        const entry = p.entry({ name: f.rel, size: f.size, mode: f.mode & 0o7777 }, done);
        // Read as much as was counted: a file that grew since would break the tar entry.
        createReadStream(f.abs, { end: Math.max(0, f.size - 1) })
          .once('error', rej)
          .on('data', (c) => sent?.((packed += c.length)))
          .pipe(entry);
      });
    }
    p.finalize();
  })();
  writing.catch((e: unknown) => p.destroy(e as Error));
  for await (const chunk of p.pipe(createGzip())) yield chunk as Buffer;
  await writing;
}
