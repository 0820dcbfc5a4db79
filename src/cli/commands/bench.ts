// `cubectl bench`: creation throughput and latency through the E2B REST + envd path (what RL code
// drives), and `cubectl bench compare` for A/B ratios of two result files.
import { readFileSync, writeFileSync } from 'node:fs';
import { InvalidArgumentError, Option, type Command } from 'commander';
import type { CreatedSandbox } from '../../bench/e2b-http.js';
import { BENCH_MODES, type BenchMode } from '../../bench/modes.js';
import type { Progress, RunResult } from '../../bench/runner.js';
import { compare, type BenchResult, type LatencySummary } from '../../bench/stats.js';
import { apiKey, examples, EXIT, ExitError, globals, numberArg, printJson, table, UsageError } from '../io.js';

interface BenchOpts {
  concurrency: number;
  count: number;
  warmup: number;
  mode: BenchMode;
  template: string;
  spec?: { cpus?: number; memoryMiB?: number };
  workload: 'burst' | 'steady';
  rate?: number;
  lifetime?: number;
  json?: string | true;
  seed: number;
  timeout: number;
  networkPolicy: 'none' | 'rules';
  runtime?: string;
}

/**
 * `--network-policy rules`, after the reference's cube-bench: no internet plus 24 allowOut
 * destinations per sandbox (public /24s; its 6 L7 rules have no equivalent here). Measures what
 * a sandbox's own egress rules cost a create (one nftables transaction) and a delete.
 */
export const RULES_POLICY = {
  allow_internet_access: false,
  network: { allowOut: Array.from({ length: 24 }, (_, i) => `${151 + (i % 3)}.${101 + i}.${i * 7}.0/24`) },
} as const;

/** `cpus=1,mem=512` -> {cpus: 1, memoryMiB: 512}. */
export function parseSpec(value: string): { cpus?: number; memoryMiB?: number } {
  const spec: { cpus?: number; memoryMiB?: number } = {};
  for (const part of value.split(',')) {
    const [k, v] = part.split('=').map((s) => s.trim());
    const n = Number(v);
    if (!v || !Number.isFinite(n) || n <= 0) throw new InvalidArgumentError(`expected cpus=N,mem=MiB with positive numbers, got "${part}".`);
    if (k === 'cpus') spec.cpus = n;
    else if (k === 'mem' || k === 'memory') spec.memoryMiB = Math.round(n);
    else throw new InvalidArgumentError(`unknown spec key "${k}" (cpus, mem).`);
  }
  return spec;
}

const ms = (x: number) => x.toFixed(1);

function latencyRows(phases: Record<string, LatencySummary>): string {
  return table(
    ['phase', 'min', 'avg', 'std', 'p50', 'p90', 'p95', 'p99', 'max'],
    Object.entries(phases).map(([name, l]) => [name, ms(l.min), ms(l.avg), ms(l.std), ms(l.p50), ms(l.p90), ms(l.p95), ms(l.p99), ms(l.max)]),
  );
}

export function report(r: RunResult): string {
  const s = r.summary;
  const width = 40;
  const peak = Math.max(1, ...r.histogram.map((b) => b.count));
  const hist = r.histogram
    .filter((b) => b.count > 0)
    .map(
      (b) =>
        `  ${(b.leMs === Infinity ? '> last' : `<= ${b.leMs} ms`).padStart(12)}  ${'#'.repeat(Math.ceil((b.count / peak) * width)).padEnd(width)} ${b.count}`,
    )
    .join('\n');
  const errors = Object.entries(r.errors)
    .sort((a, b) => b[1] - a[1])
    .map(([code, n]) => `  ${code}: ${n}${r.errorMessages?.[code] ? `  (first: ${r.errorMessages[code]})` : ''}`)
    .join('\n');
  return [
    `mode ${String(r.config.mode)}  workload ${String(r.config.workload)}  concurrency ${String(r.config.concurrency)}  warm-up ${String(r.config.warmup)}`,
    `count ${s.count}  success ${s.success} (${(s.successRate * 100).toFixed(2)}%)  failed ${s.failed}  duration ${s.durationSec.toFixed(2)} s  throughput ${s.throughputPerSec.toFixed(1)}/s`,
    '',
    'latency (ms; the first row is the graded one):',
    latencyRows({ [String(r.config.mode === 'pause-resume' ? 'pause+resume' : 'create')]: s.latencyMs, ...r.phases }).trimEnd(),
    '',
    'histogram (graded latency):',
    hist || '  (no successful operations)',
    '',
    `errors by code:${errors ? `\n${errors}` : ' none'}`,
    `grade ${r.grade} (p99 ${ms(s.latencyMs.p99)} ms, success ${(s.successRate * 100).toFixed(2)}%)`,
    '',
  ].join('\n');
}

function progressBar(p: Progress): string {
  const width = 30;
  const filled = Math.round((p.done / p.total) * width);
  return `\r[${'='.repeat(filled)}${' '.repeat(width - filled)}] ${p.done}/${p.total} ok ${p.ok} failed ${p.failed}`;
}

export function register(program: Command): void {
  const bench = program
    .command('bench')
    .summary('measure create/delete/exec/pause throughput and latency through the E2B API')
    .description(
      'Drive cubed through the same HTTP path the E2B SDK uses (POST /v2/sandboxes, envd process.Process/Start, DELETE /sandboxes/{id}, pause, connect) and report count, success rate, throughput, latency percentiles, a histogram, errors grouped by code, and a grade by p99 and success rate (S <= 100 ms, A <= 200, B <= 500, C <= 1000, D above). Every sandbox the run creates is deleted before it exits. Exit 1 when any operation failed.',
    )
    .option('-c, --concurrency <n>', 'operations in flight at most', numberArg({ int: true, min: 1, max: 1000 }), 10)
    .option('-n, --count <n>', 'measured iterations', numberArg({ int: true, min: 1 }), 100)
    .option('-w, --warmup <n>', 'iterations run first and not measured', numberArg({ int: true, min: 0 }), 0)
    .addOption(new Option('-m, --mode <mode>', 'what one iteration does').choices(BENCH_MODES).default('create-delete'))
    .option('--template <id>', 'template to create from', 'base')
    .option('--spec <spec>', "sandbox spec, e.g. cpus=1,mem=512 (default: the daemon's default spec)", parseSpec)
    .addOption(
      new Option('--workload <kind>', 'burst: closed loop of c workers; steady: seeded Poisson arrivals at --rate')
        .choices(['burst', 'steady'])
        .default('burst'),
    )
    .option('--rate <r>', 'arrivals per second for --workload steady', numberArg({ positive: true }))
    .option('--lifetime <s>', 'seconds each sandbox lives before it is deleted', numberArg({ min: 0 }))
    .option('--json [file]', 'write the result as JSON to FILE (or stdout without FILE) for scripts and `bench compare`')
    .option('--seed <n>', 'seed of the steady arrival sequence', numberArg({ int: true }), 42)
    .option('--timeout <ms>', 'per-request timeout', numberArg({ int: true, positive: true }), 60_000)
    .option(
      '--runtime <name>',
      "runtime of the sandboxes (ns, microvm), as the E2B metadata label cube.runtime asks for it (default: the template's, else the node's)",
    )
    .addOption(
      new Option(
        '--network-policy <p>',
        'none: the node defaults; rules: each sandbox without internet and with 24 allowOut destinations (as cube-bench -np rules, without its L7 rules)',
      )
        .choices(['none', 'rules'])
        .default('none'),
    )
    .addHelpText(
      'after',
      `\nThe API key comes from CUBE_API_KEY, else E2B_API_KEY, else <data-dir>/api-key; the address from --api or CUBE_API_URL.\nJSON: {summary: {count, success, failed, successRate, durationSec, throughputPerSec, latencyMs: {min, avg, std, p50, p90, p95, p99, max}}, phases, errors: {code: count}, errorMessages: {code: first message}, histogram, grade, config, startedAt}.\n` +
        examples(
          'cubectl bench -c 1 -n 200 -m create-delete',
          'cubectl bench -c 20 -n 1000 -w 50 --json c20.json',
          'cubectl bench -m create-exec-delete -c 10 -n 300 --spec cpus=1,mem=512',
          'cubectl bench --runtime microvm --template vmbase -c 1 -n 20   # microVMs from the memory snapshot',
          'cubectl bench --workload steady --rate 60 -c 50 -n 1800 --seed 7',
          'cubectl bench compare before.json after.json',
        ),
    )
    .action(async (opts: BenchOpts, cmd: Command) => {
      const g = globals(cmd);
      if (opts.workload === 'steady' && opts.rate === undefined) throw new UsageError('--workload steady needs --rate R (arrivals per second)');
      if (opts.workload === 'burst' && opts.rate !== undefined) throw new UsageError('--rate goes with --workload steady');
      const key = apiKey(g.dataDir);
      if (!key) throw new UsageError('no API key: set CUBE_API_KEY or E2B_API_KEY, or run where <data-dir>/api-key is readable');
      // Loaded here: the connect client and protobuf were a fifth of every cubectl run's start-up.
      const [{ E2bHttp }, { runBench }] = await Promise.all([import('../../bench/e2b-http.js'), import('../../bench/runner.js')]);
      const http = new E2bHttp({ apiUrl: g.api, apiKey: key, timeoutMs: opts.timeout });
      const created = new Map<string, CreatedSandbox>();
      const createBody = {
        templateID: opts.template,
        timeout: Math.ceil((opts.lifetime ?? 0) + 300),
        ...(opts.spec?.cpus ? { cpuCount: opts.spec.cpus } : {}),
        ...(opts.spec?.memoryMiB ? { memoryMB: opts.spec.memoryMiB } : {}),
        ...(opts.networkPolicy === 'rules'
          ? { allow_internet_access: RULES_POLICY.allow_internet_access, network: { allowOut: [...RULES_POLICY.network.allowOut] } }
          : {}),
        ...(opts.runtime ? { metadata: { 'cube.runtime': opts.runtime } } : {}),
      };
      const tty = process.stderr.isTTY === true;
      const result = await runBench(
        {
          mode: opts.mode,
          concurrency: opts.concurrency,
          count: opts.count,
          warmup: opts.warmup,
          workload: opts.workload,
          seed: opts.seed,
          ...(opts.rate !== undefined ? { rate: opts.rate } : {}),
          ...(opts.lifetime !== undefined ? { lifetimeSec: opts.lifetime } : {}),
        },
        {
          create: async () => {
            const sb = await http.create(createBody);
            created.set(sb.sandboxID, sb);
            return sb.sandboxID;
          },
          kill: async (id) => {
            await http.kill(id);
            created.delete(id);
          },
          exec: async (id) => void (await http.run(created.get(id)!, 'true')),
          pause: (id) => http.pause(id),
          resume: (id) => http.resume(id),
        },
        tty ? (p) => process.stderr.write(progressBar(p)) : undefined,
      );
      if (tty) process.stderr.write('\n');
      result.config = {
        ...result.config,
        api: g.api,
        template: opts.template,
        spec: opts.spec ?? null,
        networkPolicy: opts.networkPolicy,
        runtime: opts.runtime ?? null,
      };
      if (typeof opts.json === 'string') writeFileSync(opts.json, `${JSON.stringify(result, null, 2)}\n`);
      if (opts.json === true || g.json) printJson(result);
      else process.stdout.write(report(result));
      if (result.summary.failed > 0) throw new ExitError('', EXIT.FAILED);
    });

  bench
    .command('compare')
    .description('Compare two `cubectl bench --json FILE` results: B against A, as ratios (B/A) per metric, and which side is better.')
    .argument('<a>', 'baseline result file')
    .argument('<b>', 'candidate result file')
    .addHelpText('after', examples('cubectl bench compare before.json after.json', 'cubectl --json bench compare a.json b.json'))
    .action((a: string, b: string, _opts: unknown, cmd: Command) => {
      const rows = compare(readResult(a), readResult(b));
      if (globals(cmd).json) return printJson(rows);
      process.stdout.write(
        table(
          ['metric', 'a', 'b', 'b/a', 'better'],
          rows.map((r) => [r.metric, r.a.toFixed(2), r.b.toFixed(2), r.ratio.toFixed(2), r.better ? 'b' : r.a === r.b ? '=' : 'a']),
        ),
      );
    });
}

function readResult(file: string): BenchResult {
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(file, 'utf8'));
  } catch (e) {
    throw new UsageError(`cannot read ${file}: ${(e as Error).message}`);
  }
  const r = parsed as Partial<BenchResult> | null;
  if (!r?.summary?.latencyMs || typeof r.summary.throughputPerSec !== 'number')
    throw new UsageError(`${file} is not a cubectl bench result (no summary.latencyMs)`);
  return r as BenchResult;
}
