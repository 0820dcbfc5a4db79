// `cubectl key create|ls|set|rm`: API keys, their roles and quotas (admin API /admin/v1/keys).
import { InvalidArgumentError, type Command } from 'commander';
import type { KeyQuotas, KeyRole, KeyView, QuotaName } from '../../api/types.js';
import { clientFor, examples, globals, printJson, table } from '../io.js';

const ROLES: KeyRole[] = ['admin', 'user'];

/** The quota options, each with its flag, its name on the wire and what it limits. */
const QUOTA_FLAGS: { flag: string; quota: QuotaName; what: string; whole: boolean }[] = [
  { flag: 'sandboxes', quota: 'sandboxes', what: 'sandboxes running or starting at once (paused ones do not count)', whole: true },
  { flag: 'vcpus', quota: 'vcpus', what: 'vCPUs of those sandboxes together (fractions allowed, e.g. 2.5)', whole: false },
  { flag: 'memory-mib', quota: 'memory_mib', what: 'memory of those sandboxes together, MiB', whole: true },
  { flag: 'creates-per-sec', quota: 'creates_per_sec', what: "creates and resumes per second (a burst of one second's worth)", whole: true },
];

const QUOTA_HELP = `
Quotas: each a number, 0 = unlimited; \`default\` (set only) goes back to the default: for
--sandboxes api.max_sandboxes_per_key of the config (1000 as shipped), unlimited for the others.
Every control replica enforces the same numbers (they are counted in the state store). A create or
resume over a quota is answered at once with 429, Retry-After and a message naming the quota; the
E2B SDK retries a 429 a few times, then raises RateLimitError.

Roles: admin (everything: the admin API, node-wide policy such as \`cubectl config set\`, keys, and
the E2B API) and user (the E2B API only: /admin/v1/* answers 403). cubectl and the console need an
admin key: the key cubed generated in <data-dir>/api-key is the first one.
`;

const EXIT_HELP = '\nExit status: 0 ok, 1 refused (e.g. 404 no such key, 409 the last admin key), 2 invalid input, 3 cubed unreachable.\n';

/** A quota option's value: a number, or (set) 'default' (commander cannot keep a null an option parser returns). */
function quotaArg(whole: boolean, allowDefault: boolean) {
  return (value: string): number | 'default' => {
    if (allowDefault && value === 'default') return 'default';
    const n = Number(value);
    if (value.trim() === '' || !Number.isFinite(n) || n < 0)
      throw new InvalidArgumentError(`expected a number >= 0 (0 = unlimited)${allowDefault ? ' or "default"' : ''}.`);
    if (whole && !Number.isInteger(n)) throw new InvalidArgumentError('must be a whole number.');
    return n;
  };
}

function roleArg(value: string): KeyRole {
  if (!(ROLES as string[]).includes(value)) throw new InvalidArgumentError(`expected one of ${ROLES.join(', ')}.`);
  return value as KeyRole;
}

/** The options' quotas by wire name (commander names them in camel case). */
function quotasOf(o: Record<string, unknown>): { [K in QuotaName]?: number | null } {
  const out: { [K in QuotaName]?: number | null } = {};
  for (const q of QUOTA_FLAGS) {
    const v = o[q.flag.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase())] as number | 'default' | undefined;
    if (v !== undefined) out[q.quota] = v === 'default' ? null : v;
  }
  return out;
}

/** "used/limit" per quota; "-" is no limit, "*" marks a limit that is the default. */
function usageCell(k: KeyView, q: QuotaName): string {
  const limit = k.limits[q] === 0 ? '-' : `${k.limits[q]}${k.quotas[q] === undefined ? '*' : ''}`;
  if (q === 'creates_per_sec') return limit;
  const used = q === 'sandboxes' ? k.usage.sandboxes : q === 'vcpus' ? k.usage.vcpus : k.usage.memoryMiB;
  return `${used}/${limit}`;
}

function describeKey(k: KeyView): string {
  return `${k.name} (${k.id}), role ${k.role}; ${QUOTA_FLAGS.map((q) => `${q.flag} ${usageCell(k, q.quota)}`).join(', ')}`;
}

export function register(program: Command): void {
  const key = program
    .command('key')
    .summary('API keys: create, list, change roles and quotas, remove')
    .description(
      'API keys of this cubed (or cluster): each has a name, a role (admin or user) and quotas. cubed stores only their SHA-256; a key is shown once, when it is created.',
    )
    .addHelpText(
      'after',
      QUOTA_HELP +
        EXIT_HELP +
        examples(
          'cubectl key create rl-team --role user --sandboxes 40 --vcpus 40',
          'cubectl key ls',
          'cubectl key set rl-team --creates-per-sec 10',
          'cubectl key rm rl-team',
        ),
    );

  const create = key
    .command('create')
    .description(
      'Make a new key NAME and print it: this is the only time the key is shown (store it now). With --json: {key, id, name, role, quotas, limits, usage, createdAt, createdBy}.',
    )
    .argument('<name>', '1 to 64 of A-Z a-z 0-9 . _ - (unique)')
    .option('--role <role>', 'admin or user (default user)', roleArg);
  for (const q of QUOTA_FLAGS) create.option(`--${q.flag} <n>`, `${q.what}; 0 = unlimited`, quotaArg(q.whole, false));
  create
    .addHelpText(
      'after',
      QUOTA_HELP +
        EXIT_HELP +
        examples(
          'cubectl key create ci --role user --sandboxes 20',
          'KEY=$(cubectl key create trainer --json | jq -r .key)',
          'cubectl key create ops2 --role admin',
        ),
    )
    .action(async (name: string, o: { role?: KeyRole; [flag: string]: unknown }, cmd: Command) => {
      const quotas = quotasOf(o) as KeyQuotas;
      const k = await clientFor(cmd).createKey({ name, role: o.role ?? 'user', ...(Object.keys(quotas).length ? { quotas } : {}) });
      if (globals(cmd).json) return printJson(k);
      process.stdout.write(
        `created API key ${describeKey(k)}\n${k.key}\nThis is the only time the key is shown: cubed keeps its SHA-256 only. Clients send it as X-API-Key (E2B_API_KEY for the E2B SDK).\n`,
      );
    });

  key
    .command('ls')
    .description(
      'List the keys: id, name, role, and for each quota what the key\'s sandboxes hold now and its limit ("used/limit"; "-" no limit, "*" the default). Never the keys themselves.',
    )
    .addHelpText(
      'after',
      '\nJSON (--json): KeyView[] {id, name, role, quotas, limits, usage {sandboxes, vcpus, memoryMiB}, createdAt, createdBy}.\n' +
        EXIT_HELP +
        examples('cubectl key ls', 'cubectl key ls --json | jq \'.[] | select(.role == "admin") | .name\''),
    )
    .action(async (_o: unknown, cmd: Command) => {
      const keys = await clientFor(cmd).keys();
      if (globals(cmd).json) return printJson(keys);
      process.stdout.write(
        table(
          ['id', 'name', 'role', 'sandboxes', 'vcpus', 'memory_mib', 'creates/s', 'created'],
          keys.map((k) => [
            k.id,
            k.name,
            k.role,
            usageCell(k, 'sandboxes'),
            usageCell(k, 'vcpus'),
            usageCell(k, 'memory_mib'),
            usageCell(k, 'creates_per_sec'),
            k.createdAt.slice(0, 19).replace('T', ' '),
          ]),
        ),
      );
    });

  const set = key
    .command('set')
    .description(
      'Change the key KEY (its id or name): rename it, change its role, set quotas. Takes effect on every control replica within a second; sandboxes already running stay.',
    )
    .argument('<key>', 'key id (key-xxxxxxxx) or name')
    .option('--name <name>', 'a new name')
    .option('--role <role>', 'admin or user (the last admin key stays admin: 409)', roleArg);
  for (const q of QUOTA_FLAGS) set.option(`--${q.flag} <n>`, `${q.what}; 0 = unlimited, "default" = the default`, quotaArg(q.whole, true));
  set
    .addHelpText(
      'after',
      QUOTA_HELP +
        EXIT_HELP +
        examples(
          'cubectl key set rl-team --sandboxes 100 --vcpus 0',
          'cubectl key set rl-team --memory-mib default',
          'cubectl key set key-1a2b3c4d --role admin',
        ),
    )
    .action(async (ref: string, o: { name?: string; role?: KeyRole; [flag: string]: unknown }, cmd: Command) => {
      const quotas = quotasOf(o);
      const k = await clientFor(cmd).setKey(ref, {
        ...(o.name !== undefined ? { name: o.name } : {}),
        ...(o.role !== undefined ? { role: o.role } : {}),
        ...(Object.keys(quotas).length ? { quotas } : {}),
      });
      if (globals(cmd).json) printJson(k);
      else process.stdout.write(`API key ${describeKey(k)}\n`);
    });

  key
    .command('rm')
    .description(
      'Remove the key KEY (its id or name): requests with it get 401 from then on (on every control replica within a second). Its sandboxes stay until they end. The last admin key cannot be removed (409).',
    )
    .argument('<key>', 'key id or name')
    .addHelpText('after', EXIT_HELP + examples('cubectl key rm rl-team', 'cubectl key rm key-1a2b3c4d --json'))
    .action(async (ref: string, _o: unknown, cmd: Command) => {
      await clientFor(cmd).deleteKey(ref);
      if (globals(cmd).json) printJson({ key: ref, removed: true });
      else process.stdout.write(`API key ${ref} removed\n`);
    });
}
