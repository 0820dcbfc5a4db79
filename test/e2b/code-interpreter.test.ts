// The real @e2b/code-interpreter package, unchanged, against cubed with the code-interpreter-v1
// template built by its recipe (recipes/code-interpreter: Debian's python3-ipykernel,
// python3-matplotlib and nodejs plus our server on port 49999). The recipe's image is cached under /var/cache/cubed/templates, so only
// the first run on a machine pays for mmdebstrap.
import { execFile } from 'node:child_process';
import { join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { NotFoundError, Sandbox, TimeoutError } from '@e2b/code-interpreter';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDaemon, type TestDaemon } from '../helpers/daemon.js';

const ROOT = resolve(import.meta.dirname, '../..');
const run = promisify(execFile);
let d: TestDaemon;
let opts: { apiKey: string; apiUrl: string; sandboxUrl: string };
const created: Sandbox[] = [];

async function create(): Promise<Sandbox> {
  const sbx = await Sandbox.create({ ...opts, timeoutMs: 300_000 });
  created.push(sbx);
  return sbx;
}

beforeAll(async () => {
  d = await startDaemon();
  opts = { apiKey: d.apiKey, apiUrl: d.url, sandboxUrl: d.url };
  // One command builds (or takes from the cache) and imports the template, as an operator would.
  await run(process.execPath, [join(ROOT, 'recipes/code-interpreter/build.mjs'), '--import'], {
    env: { ...process.env, CUBE_API_URL: d.url, CUBE_API_KEY: d.apiKey },
    maxBuffer: 16 * 2 ** 20,
  });
}, 1_200_000);

afterAll(async () => {
  try {
    await Promise.all(created.map((s) => s.kill().catch(() => false)));
  } finally {
    await d?.stop();
  }
}, 180_000);

describe('@e2b/code-interpreter against code-interpreter-v1', () => {
  it('runs code in the default context, keeps state, reports results and errors', async () => {
    const sbx = await create();
    const first = await sbx.runCode('print(1+1)');
    expect(first.error).toBeUndefined();
    expect(first.logs.stdout).toEqual(['2\n']);

    await sbx.runCode('x = 41');
    const next = await sbx.runCode('x + 1');
    expect(next.text).toBe('42');
    expect(next.executionCount).toBeGreaterThan(first.executionCount ?? 0);

    const failed = await sbx.runCode('1/0');
    expect(failed.error?.name).toBe('ZeroDivisionError');
    expect(failed.error?.value).toBe('division by zero');

    const env = await sbx.runCode('import os; os.environ.get("ROLLOUT")', { envs: { ROLLOUT: 'r7' } });
    expect(env.text).toBe("'r7'");
    const after = await sbx.runCode('import os; os.environ.get("ROLLOUT")');
    expect(after.text).toBeUndefined(); // None has no text result: the variable was for that run only

    const html = await sbx.runCode('from IPython.display import HTML, display\ndisplay(HTML("<b>hi</b>"))');
    expect(html.results.some((r) => r.html === '<b>hi</b>' && !r.isMainResult)).toBe(true);
  });

  it("runs Debian's package tools as root under the sandbox's seccomp filter", async () => {
    const sbx = await create();
    const r = await sbx.commands
      .run(
        "apt-get -q check >/dev/null && echo apt=0; dpkg-query -W -f='${Status}\\n' coreutils; dpkg --audit && echo audit=0; apt-cache policy coreutils | grep -c Installed",
        { user: 'root' },
      )
      .catch((e: unknown) => e as { stdout: string; stderr: string });
    expect(r.stdout, r.stderr).toBe('apt=0\ninstall ok installed\naudit=0\n1\n');
  });

  it('streams output while the code runs', async () => {
    const sbx = await create();
    // The cell waits for a file the test writes only after it has seen the first line: buffered
    // output (sent at the end) would never let it finish.
    const seen: string[] = [];
    let released = false;
    const exec = await sbx.runCode(
      'import os, time\nprint("waiting", flush=True)\nwhile not os.path.exists("/tmp/go"):\n    time.sleep(0.05)\nprint("released")',
      {
        timeoutMs: 120_000,
        onStdout: async (m) => {
          seen.push(m.line);
          if (!released && m.line.includes('waiting')) {
            released = true;
            await sbx.files.write('/tmp/go', 'go');
          }
        },
      },
    );
    expect(exec.error).toBeUndefined();
    expect(seen.join('')).toBe('waiting\nreleased\n');
  });

  it('creates, lists, restarts and removes contexts; refuses a language it has no kernel for', async () => {
    const sbx = await create();
    const ctx = await sbx.createCodeContext({ cwd: '/tmp' });
    expect(ctx).toMatchObject({ language: 'python', cwd: '/tmp' });
    const cwd = await sbx.runCode('import os; os.getcwd()', { context: ctx });
    expect(cwd.text).toBe("'/tmp'");

    await sbx.runCode('y = 1', { context: ctx });
    await sbx.restartCodeContext(ctx);
    const gone = await sbx.runCode('y', { context: ctx });
    expect(gone.error?.name).toBe('NameError');

    expect((await sbx.listCodeContexts()).map((c) => c.id)).toContain(ctx.id);
    await sbx.removeCodeContext(ctx);
    expect((await sbx.listCodeContexts()).map((c) => c.id)).not.toContain(ctx.id);

    // A 404 with the reason: the SDK shows a 404's body (NotFoundError), of a 400 only its status line.
    const noKernel = /language 'r' is not offered by this template: it offers bash, javascript, js, python, python3, sh/;
    const unknown = await sbx.runCode('1', { language: 'r' }).catch((e: unknown) => e);
    expect(unknown).toBeInstanceOf(NotFoundError);
    expect(String(unknown)).toMatch(noKernel);
    await expect(sbx.createCodeContext({ language: 'R' })).rejects.toThrow(noKernel);
    expect((await sbx.runCode('1 + 1', { language: 'python' })).text).toBe('2');
  });

  it('shows matplotlib figures as PNG results with the chart they draw', async () => {
    const sbx = await create();
    const line = await sbx.runCode(
      'import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [2, 4, 8], label="growth")\nplt.title("Growth")\nplt.xlabel("day")\nplt.ylabel("size")\nplt.show()',
    );
    expect(line.error).toBeUndefined();
    expect(line.results).toHaveLength(1);
    const figure = line.results[0]!;
    expect(Buffer.from(figure.png ?? '', 'base64').toString('latin1', 1, 4)).toBe('PNG');
    expect(figure.chart).toMatchObject({
      type: 'line',
      title: 'Growth',
      x_label: 'day',
      y_label: 'size',
      elements: [
        {
          label: 'growth',
          points: [
            [1, 2],
            [2, 4],
            [3, 8],
          ],
        },
      ],
    });

    // Without plt.show(), a figure is shown when the cell ends.
    const bar = await sbx.runCode('plt.bar(["a", "b"], [3, 5])\nplt.title("Votes")');
    expect(bar.results.find((r) => r.chart)?.chart).toMatchObject({
      type: 'bar',
      title: 'Votes',
      elements: [
        { label: 'a', value: '3' },
        { label: 'b', value: '5' },
      ],
    });

    // A box plot: each box's whiskers, quartiles, median and outliers (matplotlib's own statistics).
    const box = await sbx.runCode('plt.figure()\n_ = plt.boxplot([[1, 2, 3, 4, 5, 20], [2, 3, 4]], labels=["a", "b"])\nplt.title("Spread")');
    expect(box.results.find((r) => r.chart)?.chart).toMatchObject({
      type: 'box_and_whisker',
      title: 'Spread',
      elements: [
        { label: 'a', min: 1, first_quartile: 2.25, median: 3.5, third_quartile: 4.75, max: 5, outliers: [20] },
        { label: 'b', min: 2, first_quartile: 2.5, median: 3, third_quartile: 3.5, max: 4, outliers: [] },
      ],
    });

    // A kind of plot the SDK has no chart type for: still the PNG.
    const image = await sbx.runCode('_ = plt.imshow([[0, 1], [1, 0]])');
    expect(image.results).toHaveLength(1);
    expect(image.results[0]!).toMatchObject({ chart: { type: 'unknown' }, png: expect.any(String) });
  });

  it('runs bash and javascript, each keeping its state across cells', async () => {
    const sbx = await create();
    await sbx.runCode('GREETING=hello; cd /tmp', { language: 'bash' });
    const bash = await sbx.runCode('echo "$GREETING from $PWD"', { language: 'bash' });
    expect(bash.error).toBeUndefined();
    expect(bash.logs.stdout.join('')).toBe('hello from /tmp\n');
    const failed = await sbx.runCode('echo before; false', { language: 'bash' });
    expect(failed.logs.stdout.join('')).toBe('before\n');
    expect(failed.error).toMatchObject({ name: 'ExitError', value: 'exit status 1' });

    const js = await sbx.createCodeContext({ language: 'javascript' });
    expect(js).toMatchObject({ language: 'javascript' });
    const set = await sbx.runCode('const base = 40; console.log("set")', { context: js });
    expect(set.logs.stdout).toEqual(['set\n']);
    expect(set.results).toEqual([]);
    expect((await sbx.runCode('base + 2', { context: js })).text).toBe('42');
    const thrown = await sbx.runCode('null.x', { context: js });
    expect(thrown.error?.name).toBe('TypeError');
    await sbx.removeCodeContext(js);
  });

  it('timeoutMs ends a silent cell (and interrupts it); a cell silent past the request timeout completes', async () => {
    const sbx = await create();
    // The answer's headers come at once, so timeoutMs (counted from them) ends a cell that prints
    // nothing: the SDK's execution timeout, not its request timeout. The server sees the client go
    // and interrupts the cell, which would otherwise sleep on and hold the context.
    const late = await sbx
      .runCode('import time\ntry:\n    time.sleep(30)\nexcept KeyboardInterrupt:\n    open("/tmp/interrupted", "w").write("yes")\n    raise', {
        timeoutMs: 2000,
      })
      .catch((e: unknown) => e);
    expect(late).toBeInstanceOf(TimeoutError);
    expect(String(late)).toMatch(/Execution timed out/);
    const after = await sbx.runCode('open("/tmp/interrupted").read()', { timeoutMs: 60_000 });
    expect(after.error).toBeUndefined();
    expect(after.text).toBe("'yes'");

    // requestTimeoutMs runs until the answer's headers: a cell silent three times that long
    // (it waits for a file the test writes only then) completes.
    const requestTimeoutMs = 2000;
    const silent = sbx.runCode('import os, time\nwhile not os.path.exists("/tmp/go-silent"):\n    time.sleep(0.05)\nprint("done")', {
      requestTimeoutMs,
      timeoutMs: 120_000,
    });
    const outcome = silent.then(
      (e) => ({ ok: e }),
      (err: unknown) => ({ err }),
    );
    await sleep(3 * requestTimeoutMs);
    await sbx.files.write('/tmp/go-silent', 'go');
    const r = await outcome;
    expect('err' in r ? String(r.err) : undefined).toBeUndefined();
    expect('ok' in r && r.ok.error).toBeFalsy();
    expect('ok' in r && r.ok.logs.stdout).toEqual(['done\n']);
  });
});
