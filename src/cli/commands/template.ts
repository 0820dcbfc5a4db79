// `cubectl template ls|inspect|import|build|rm`.
import { createReadStream } from 'node:fs';
import { mkdtemp, readFile, readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { Option, type Command } from 'commander';
import type { TemplateListing } from '../../api/admin/templates.js';
import { TEMPLATE_RUNTIMES, type TemplateRuntime } from '../../runtime/types.js';
import type { CubeClient, ImportTemplateOptions } from '../client.js';
import { clientFor, examples, ExitError, globals, numberArg, printJson, table, UsageError } from '../io.js';
import { DEFAULT_CONTEXT_BOUND } from '../../templates/context-bound.js';
import { statOrAbsent } from '../../fsx.js';

export function templatesTable(list: TemplateListing[]): string {
  if (list.length === 0) return 'no templates\n';
  return table(
    ['template', 'digest', 'layers', 'source', 'start', 'created', 'nodes'],
    list.map((t) => {
      const r = t.record;
      return [
        t.templateID,
        r ? r.digest.slice(7, 19) : '-',
        r ? r.layers.length : t.templateID === 'host' ? 'host /usr' : '-',
        r?.source ?? '-',
        r?.config.startCmd ? 'yes' : '-',
        r?.created ?? '-',
        t.nodes.join(','),
      ];
    }),
  );
}

export function register(program: Command): void {
  const template = program
    .command('template')
    .summary('ls, inspect, import, build, rm templates')
    .description("List, inspect, import (docker save tarballs, OCI archives and layouts), build (the steps of the e2b SDK's Template()) and remove templates.")
    .addHelpText(
      'after',
      examples(
        'docker save python:3.12-slim -o py.tar && cubectl template import py.tar --name python',
        'cubectl template build recipe.yaml --name app:v1',
        'cubectl template ls',
        'cubectl template rm python',
      ),
    );

  template
    .command('ls')
    .summary('list templates')
    .description('List the templates the nodes hold: digest, number of layers, where they came from, whether they have a start command, when they were made.')
    .addHelpText(
      'after',
      '\nJSON (--json): an array of {templateID, nodes, record?} (record: src/templates/store.ts TemplateRecord).\n' +
        examples('cubectl template ls', 'cubectl template ls --json | jq ".[].record.layers"'),
    )
    .action(async (_o: unknown, cmd: Command) => {
      const list = await clientFor(cmd).templates();
      if (globals(cmd).json) printJson(list);
      else process.stdout.write(templatesTable(list));
    });

  template
    .command('inspect <name>')
    .summary('show a template: layers, config, digest')
    .description(
      'Show a template record as JSON: its layers (diff_ids, lowest first), config (env, workdir, user, start and ready commands), digest, source and the image entrypoint and command.',
    )
    .addHelpText('after', examples('cubectl template inspect python', 'cubectl template inspect app:v2'))
    .action(async (name: string, _o: unknown, cmd: Command) => printJson(await clientFor(cmd).template(name)));

  template
    .command('rm <name>')
    .summary('remove a template (refused while a sandbox or a template built from it uses it)')
    .description(
      'Remove a template; refused with 409 while another template was built from it. Sandboxes running from it go on: its layers are kept for them until they end. Layers nothing holds leave the layer store.',
    )
    .addHelpText('after', examples('cubectl template rm python', 'cubectl template rm app:v2'))
    .action(async (name: string, _o: unknown, cmd: Command) => {
      const r = await clientFor(cmd).deleteTemplate(name);
      if (globals(cmd).json) printJson(r);
      else process.stdout.write(`removed ${r.ref}\n`);
    });

  template
    .command('build <file>')
    .summary('build a template from a recipe (JSON or YAML) of e2b Template() steps')
    .description(
      "Builds a template from a recipe file, with the steps of the e2b SDK's Template() builder and the same build API: fromTemplate or fromImage (an imported image, by name), then steps run in order, each in a sandbox of its own, each RUN, COPY or WORKDIR making a layer: {run: CMD} or {run: {cmd, user}}, {copy: {src, dest, user?, mode?}} (src a file, directory or link under the context: the recipe's directory, or context:; links are copied as links, never followed, and a src reached through a link out of the context is refused), {env: {K: V}}, {workdir: DIR}, {user: root|user}; startCmd and readyCmd. Steps are cached by the chain (parent, step, files); --force runs every step again. Build logs go to stderr on a TTY.",
    )
    .option('--name <name[:tag]>', "template name (default: the recipe's name:)")
    .option('--tag <tag...>', "tags to register the build under (default: the name's tag, else latest)")
    .option('--force', 'skip the build cache: run every step again')
    .option(
      '--max-context-mib <n>',
      'stop when the files a COPY takes from the context pass this many MiB',
      numberArg({ int: true, min: 1 }),
      DEFAULT_CONTEXT_BOUND.maxBytes / 2 ** 20,
    )
    .option(
      '--max-context-entries <n>',
      'stop when a COPY takes more files, directories and links than this',
      numberArg({ int: true, min: 1 }),
      DEFAULT_CONTEXT_BOUND.maxEntries,
    )
    .addHelpText(
      'after',
      '\nRecipe (YAML):\n  name: app:v1\n  fromImage: python\n  steps:\n    - run: {cmd: "pip install flask", user: root}\n    - copy: {src: app, dest: /srv/app/}\n    - env: {PORT: 8000}\n    - workdir: /srv/app\n  startCmd: python -m flask run -p 8000\n  readyCmd: nc -z 127.0.0.1 8000\n' +
        '\nJSON (--json): the template records registered (src/templates/store.ts TemplateRecord).\n' +
        examples('cubectl template build recipe.yaml', 'cubectl template build recipe.json --name app:v2 --force'),
    )
    .action(async (file: string, o: BuildOptions, cmd: Command) => {
      const client = clientFor(cmd);
      const json = globals(cmd).json;
      const tty = process.stderr.isTTY === true && !json;
      const r = await buildFromRecipe(client, file, o, (line, transient) => {
        if (tty) process.stderr.write(transient ? `\r${line}` : `\r${line}\n`);
      });
      const recs = await Promise.all(r.refs.map((ref) => client.template(ref)));
      if (json) printJson(recs);
      else for (const rec of recs) process.stdout.write(`built ${rec.ref} ${rec.digest} (${rec.layers.length} layers)\n`);
    });

  template
    .command('import <path>')
    .summary('import an image: docker save tarball, oci-archive or OCI layout directory')
    .description(
      'Imports an image as a template: a `docker save` tarball (docker-archive), an OCI archive, an OCI image layout directory, or an image reference skopeo understands (oci:DIR, docker-archive:FILE, ...), copied by skopeo here to a temporary OCI archive first. The archive streams to cubed, which unpacks each layer once into its layer store (whiteouts honoured, nothing written outside the layer) and keeps Env, WorkingDir and User. docker://HOST[:PORT]/NAME:TAG is pulled by cubed itself (skopeo on the node, by digest: the tag is resolved first and the digest recorded; a digest already in the layer store is not pulled again), with --username and --password-stdin or $CUBE_REGISTRY_USERNAME/$CUBE_REGISTRY_PASSWORD for registries that want them; plain-HTTP registries must be listed in cubelet.toml [registry] insecure. Start and ready commands are given here.',
    )
    .option('--name <name[:tag]>', "template name (tag default latest); for docker://REF the default is the image's last name component and tag")
    .option('--username <user>', 'registry user for docker://REF (else $CUBE_REGISTRY_USERNAME)')
    .option('--password-stdin', 'read the registry password from stdin (else $CUBE_REGISTRY_PASSWORD); never a flag, so it is not in the process list')
    .option('--start-cmd <cmd>', 'run in the background (sh -c) when a sandbox starts')
    .option('--ready-cmd <cmd>', 'the sandbox is running once this exits 0 (polled; default: as soon as the start command runs)')
    .option(
      '--ready-timeout <sec>',
      'give up on the ready command after this long (default: sandbox.ready_timeout_sec, 30)',
      numberArg({ int: true, min: 1, max: 3600 }),
    )
    .option('--workdir <dir>', "default working directory (default: the image's WorkingDir)")
    .option('--user <user>', "default user, root or user (default: the image's User: root when it is root or unset)")
    .addOption(
      new Option('--runtime <runtime>', "the runtime its sandboxes run on when the create names none (default: the node's)").choices([...TEMPLATE_RUNTIMES]),
    )
    .addHelpText(
      'after',
      examples(
        'cubectl template import app.tar --name app:v1 --start-cmd "python -m http.server 8000" --ready-cmd "nc -z 127.0.0.1 8000"',
        'cubectl template import docker://registry.example:5000/team/app:v3   # pulled by the daemon (skopeo), by digest, as app:v3',
        'printf %s "$TOKEN" | cubectl template import docker://registry.example/app:v3 --username ci --password-stdin',
        'cubectl template import agent.tar --name agent --runtime microvm   # its sandboxes get their own kernel unless a create says otherwise',
      ),
    )
    .action(async (source: string, o: ImportCliOptions, cmd: Command) => {
      if (o.user !== undefined && o.user !== 'root' && o.user !== 'user') throw new UsageError(`--user must be root or user (got ${o.user})`);
      if (source.startsWith('docker://') && !(await statOrAbsent(source))) return pullFromRegistry(cmd, source, o);
      if (!o.name) throw new UsageError('--name NAME[:TAG] is required to import an archive');
      let path = source;
      let st = await statOrAbsent(path);
      let pulled: { file: string; cleanup: () => Promise<void> } | undefined;
      if (!st && SKOPEO_SOURCE.test(path)) {
        pulled = await skopeoCopy(path, process.stderr.isTTY === true && !globals(cmd).json);
        path = pulled.file;
        st = await stat(path);
      }
      if (!st) throw new UsageError(`${path}: no such file or directory (or give an image as docker://REF, oci:DIR, ... to pull it through skopeo)`);
      const opts = importOptions(o);
      const total = st.isDirectory() ? undefined : st.size;
      const name = o.name;
      const body = withProgress(
        st.isDirectory() ? tarDirectory(path) : createReadStream(path),
        total,
        name,
        process.stderr.isTTY === true && !globals(cmd).json,
      );
      const rec = await clientFor(cmd)
        .importTemplate(name, body, opts)
        .finally(() => pulled?.cleanup());
      if (process.stderr.isTTY && !globals(cmd).json) process.stderr.write('\n');
      if (globals(cmd).json) printJson(rec);
      else process.stdout.write(`imported ${rec.ref} ${rec.digest} (${rec.layers.length} layers, ${rec.source})\n`);
    });
}

interface ImportCliOptions {
  name?: string;
  startCmd?: string;
  readyCmd?: string;
  readyTimeout?: number;
  workdir?: string;
  user?: string;
  runtime?: TemplateRuntime;
  username?: string;
  passwordStdin?: boolean;
}

/** The template config given on the command line, as the import and pull requests take it (pure). */
function importOptions(o: ImportCliOptions): ImportTemplateOptions {
  return {
    ...(o.startCmd ? { startCmd: o.startCmd } : {}),
    ...(o.readyCmd ? { readyCmd: o.readyCmd } : {}),
    ...(o.readyTimeout ? { readyTimeoutSec: o.readyTimeout } : {}),
    ...(o.workdir !== undefined ? { workdir: o.workdir } : {}),
    ...(o.user ? { user: o.user as 'root' | 'user' } : {}),
    ...(o.runtime ? { runtime: o.runtime } : {}),
  };
}

/** The template name a registry image gets by default: its last name component and its tag (pure). */
export function defaultTemplateName(image: string): string {
  const ref = image.replace(/^docker:\/\//, '').split('@')[0]!;
  const last = ref.slice(ref.lastIndexOf('/') + 1);
  return last.includes(':') ? last : `${last}:latest`;
}

/** `template import docker://REF`: the daemon pulls (skopeo, by digest, into its layer store); its progress lines go to stderr. */
async function pullFromRegistry(cmd: Command, source: string, o: ImportCliOptions): Promise<void> {
  const json = globals(cmd).json;
  const username = o.username ?? process.env.CUBE_REGISTRY_USERNAME;
  let password = process.env.CUBE_REGISTRY_PASSWORD;
  if (o.passwordStdin) {
    const chunks: Buffer[] = [];
    for await (const c of process.stdin) chunks.push(c as Buffer);
    password = Buffer.concat(chunks)
      .toString('utf8')
      .replace(/\r?\n$/, '');
  }
  if (password !== undefined && password !== '' && !username) throw new UsageError('a registry password needs a user: --username or $CUBE_REGISTRY_USERNAME');
  if (username && !password) throw new UsageError('--username needs a password: --password-stdin or $CUBE_REGISTRY_PASSWORD');
  const name = o.name ?? defaultTemplateName(source);
  const rec = await clientFor(cmd).pullTemplate(name, source, { ...importOptions(o), ...(username && password ? { username, password } : {}) }, (line) => {
    if (!json) process.stderr.write(`${line}\n`);
  });
  if (json) printJson(rec);
  else
    process.stdout.write(
      `imported ${rec.ref} ${rec.digest} from ${rec.registry?.image ?? source}@${rec.registry?.digest ?? '?'} (${rec.layers.length} layers${rec.pulled === false ? ', nothing pulled: in the layer store already' : ''})\n`,
    );
}

interface BuildOptions {
  name?: string;
  tag?: string[];
  force?: boolean;
  maxContextMib: number;
  maxContextEntries: number;
}

/** At most one transient progress line a PROGRESS_MS: a big context must not flood the terminal. */
const PROGRESS_MS = 250;

/** The build flow of the e2b SDK's Template.build, from a recipe file: request, uploads, start, poll the status. */
async function buildFromRecipe(
  client: CubeClient,
  file: string,
  o: BuildOptions,
  progress: (line: string, transient?: boolean) => void,
): Promise<{ refs: string[] }> {
  const text = await readFile(file, 'utf8').catch((e: NodeJS.ErrnoException) => {
    throw new UsageError(`${file}: ${e.code === 'ENOENT' ? 'no such file' : e.message}`);
  });
  // Loaded here, not at start: zod, yaml and tar were a third of every cubectl run's start-up (0.39 of 0.63 s CPU with execa).
  const { copyArchive, copyFiles, filesHash, parseRecipe, recipeBody } = await import('../../templates/recipe.js');
  const recipe = parseRecipe(text, file);
  const name = o.name ?? recipe.name;
  if (!name) throw new UsageError(`${file}: no name: give --name NAME[:TAG] or name: in the recipe`);
  const context = resolve(dirname(file), recipe.context ?? '.');
  const { body, copies } = recipeBody(recipe, o.force === true);
  const tags = [...(recipe.tags ?? []), ...(o.tag ?? [])];
  const req = await client.requestBuild({
    name,
    ...(tags.length ? { tags } : {}),
    ...(recipe.cpuCount ? { cpuCount: recipe.cpuCount } : {}),
    ...(recipe.memoryMB ? { memoryMB: recipe.memoryMB } : {}),
  });
  const bound = { maxBytes: o.maxContextMib * 2 ** 20, maxEntries: o.maxContextEntries };
  const mib = (n: number) => (n / 2 ** 20).toFixed(1);
  let shown = 0;
  const every = (line: () => string) => {
    if (Date.now() - shown < PROGRESS_MS) return;
    shown = Date.now();
    progress(line(), true);
  };
  for (const c of copies) {
    const entries = await copyFiles(context, c.src, bound, (n, bytes) => every(() => `files of ${c.src}: ${n} read, ${mib(bytes)} MiB`));
    const total = entries.reduce((sum, e) => sum + (e.type === 'file' ? e.size : 0), 0);
    const hash = await filesHash(c, entries);
    body.steps[c.step]!.filesHash = hash;
    const link = await client.templateFilesLink(req.templateID, hash);
    if (link.present || !link.url) progress(`files of ${c.src}: ${entries.length} entries, ${mib(total)} MiB, already on the daemon`);
    else {
      await client.uploadTemplateFiles(
        link.url,
        copyArchive(entries, (sent) => every(() => `files of ${c.src}: uploading ${mib(sent)}/${mib(total)} MiB`)),
      );
      progress(`files of ${c.src}: ${entries.length} entries, ${mib(total)} MiB, uploaded`);
    }
  }
  await client.startBuild(req.templateID, req.buildID, body);
  let offset = 0;
  for (;;) {
    const st = await client.buildStatus(req.templateID, req.buildID, offset);
    offset += st.logEntries.length;
    for (const l of st.logEntries) progress(l.message);
    if (st.status === 'ready') {
      const refs = req.tags.map((t) => `${req.templateID}:${t}`);
      return { refs };
    }
    if (st.status === 'error') throw new ExitError(`build failed: ${st.reason?.message ?? 'unknown error'}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Upload progress on a TTY: bytes sent (of the file's size), then "unpacking" while cubed works. */
async function* withProgress(src: AsyncIterable<Buffer | Uint8Array>, total: number | undefined, name: string, tty: boolean): AsyncGenerator<Uint8Array> {
  let sent = 0;
  let shown = 0;
  const mib = (n: number) => (n / 2 ** 20).toFixed(1);
  for await (const chunk of src) {
    sent += chunk.length;
    if (tty && (sent - shown > 4 << 20 || sent === total)) {
      shown = sent;
      process.stderr.write(`\rimporting ${name}: sent ${mib(sent)}${total ? `/${mib(total)}` : ''} MiB`);
    }
    yield chunk;
  }
  if (tty) process.stderr.write(`\rimporting ${name}: sent ${mib(sent)} MiB, unpacking layers...`);
}

/** An OCI layout directory as a tar stream (regular files and directories; the daemon reads it as an oci-archive). */
async function* tarDirectory(dir: string): AsyncGenerator<Buffer> {
  const p = (await import('tar-stream')).pack();
  const writing = (async () => {
    const walk = async (d: string): Promise<void> => {
      for (const e of (await readdir(d, { withFileTypes: true })).sort((a, b) => a.name.localeCompare(b.name))) {
        const abs = join(d, e.name);
        const name = relative(dir, abs);
        if (e.isDirectory()) {
          p.entry({ name: `${name}/`, type: 'directory', mode: 0o755 });
          await walk(abs);
        } else if (e.isFile()) {
          const size = (await stat(abs)).size;
          await new Promise<void>((resolve, reject) => {
            const entry = p.entry({ name, size, mode: 0o644 }, (err) => (err ? reject(err) : resolve()));
            const rs = createReadStream(abs);
            rs.once('error', reject);
            rs.pipe(entry);
          });
        }
      }
    };
    await walk(dir);
    p.finalize();
  })();
  writing.catch((e: unknown) => p.destroy(e as Error));
  for await (const chunk of p) yield chunk as Buffer;
  await writing;
}

/** Image references skopeo copies (containers-transports(5)); a path that exists is never one. */
const SKOPEO_SOURCE = /^(docker|oci|oci-archive|docker-archive|docker-daemon|dir|containers-storage):/;

/** `skopeo copy SOURCE oci-archive:TMP`: the one way cubectl pulls (no registry client of its own). */
async function skopeoCopy(source: string, tty: boolean): Promise<{ file: string; cleanup: () => Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), 'cube-pull-'));
  const file = join(dir, 'image.tar');
  const cleanup = () => rm(dir, { recursive: true, force: true });
  if (tty) process.stderr.write(`pulling ${source} with skopeo...\n`);
  try {
    const { execa } = await import('execa');
    await execa('skopeo', ['copy', '--quiet', source, `oci-archive:${file}`]);
  } catch (e) {
    await cleanup();
    const err = e as { code?: string; stderr?: string; message: string };
    if (err.code === 'ENOENT') throw new UsageError('skopeo is not installed (install.sh installs it): it is how cubectl pulls images');
    throw new UsageError(`skopeo copy ${source}: ${(err.stderr ?? err.message).trim().split('\n').pop()}`);
  }
  return { file, cleanup };
}
