// `cubectl template build FILE`: a recipe (JSON or YAML) with the steps of the e2b SDK's
// Template() builder, turned into the same build body the SDK sends (the daemon checks it with
// the one parser, src/cubelet/template-steps.ts), and the files of its COPY steps hashed and
// packed for upload the way the SDK does (sha256 of "COPY src dest", then per file its path,
// mode, size and contents; a gzipped tar of the files by their path in the context).
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { readdir, stat } from 'node:fs/promises';
import { join, posix, relative, resolve } from 'node:path';
import { createGzip } from 'node:zlib';
import { pack } from 'tar-stream';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { UsageError } from './io.js';

const Copy = z.strictObject({ src: z.string().min(1), dest: z.string().min(1), user: z.string().optional(), mode: z.union([z.string(), z.number()]).optional() });
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
export function recipeBody(r: Recipe, force: boolean): { body: { fromTemplate?: string; fromImage?: string; startCmd?: string; readyCmd?: string; force: boolean; steps: BodyStep[] }; copies: CopySpec[] } {
  const copies: CopySpec[] = [];
  const steps = r.steps.map((s, i): BodyStep => {
    if ('run' in s) return typeof s.run === 'string' ? { type: 'RUN', args: [s.run], force: false } : { type: 'RUN', args: [s.run.cmd, ...(s.run.user ? [s.run.user] : [])], force: false };
    if ('copy' in s) {
      const c = s.copy;
      if (/[*?[]/.test(c.src)) throw new UsageError(`step ${i + 1}: copy src ${JSON.stringify(c.src)}: globs are for the SDK; name a file or a directory`);
      if (c.src.startsWith('/') || posix.normalize(c.src).startsWith('..')) throw new UsageError(`step ${i + 1}: copy src ${JSON.stringify(c.src)} must be inside the context`);
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

/** The files (and directories) a COPY src names under the context, by their posix path there, sorted. */
export async function copyFiles(context: string, src: string): Promise<{ rel: string; abs: string; dir: boolean }[]> {
  const root = resolve(context, src);
  const st = await stat(root).catch(() => undefined);
  if (!st) throw new UsageError(`copy src ${src}: no such file or directory in ${context}`);
  const out: { rel: string; abs: string; dir: boolean }[] = [];
  const add = async (abs: string): Promise<void> => {
    const s = await stat(abs);
    out.push({ rel: relative(context, abs).split('\\').join('/'), abs, dir: s.isDirectory() });
    if (s.isDirectory()) for (const name of (await readdir(abs)).sort()) await add(join(abs, name));
  };
  await add(root);
  return out.sort((a, b) => (a.rel < b.rel ? -1 : a.rel > b.rel ? 1 : 0));
}

/** The SDK's files hash of a COPY (see the header). */
export async function filesHash(context: string, c: CopySpec): Promise<string> {
  const h = createHash('sha256').update(`COPY ${c.src} ${c.dest}`);
  for (const f of await copyFiles(context, c.src)) {
    const st = await stat(f.abs);
    h.update(f.rel).update(st.mode.toString()).update(st.size.toString());
    if (!f.dir) for await (const chunk of createReadStream(f.abs)) h.update(chunk as Buffer);
  }
  return h.digest('hex');
}

/** A gzipped tar of the COPY's files by their path in the context (what the SDK uploads). */
export async function* copyArchive(context: string, c: CopySpec): AsyncGenerator<Buffer> {
  const p = pack();
  const files = await copyFiles(context, c.src);
  const writing = (async () => {
    for (const f of files) {
      const st = await stat(f.abs);
      if (f.dir) {
        p.entry({ name: `${f.rel}/`, type: 'directory', mode: st.mode & 0o7777 });
        continue;
      }
      await new Promise<void>((res, rej) => {
        const entry = p.entry({ name: f.rel, size: st.size, mode: st.mode & 0o7777 }, (err) => (err ? rej(err) : res()));
        createReadStream(f.abs).once('error', rej).pipe(entry);
      });
    }
    p.finalize();
  })();
  writing.catch((e: unknown) => p.destroy(e as Error));
  for await (const chunk of p.pipe(createGzip())) yield chunk as Buffer;
  await writing;
}
