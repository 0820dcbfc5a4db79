// Each role loads only the modules it runs (src/cli/daemon.ts controlModules, nodeModules): a
// control replica none of the node agent's (cubelet, runtimes, network agent, store), a compute
// node none of the control plane's (without the node agent's, a control replica used 0.88-0.90x
// the CPU until healthy). Checked on the built daemon (bin/cubed -> dist/) through a module
// loader hook that lists every module file it loads.
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { packageRoot } from '../../src/config/loader.js';
import { assertBuilt } from './run-cli.js';

const root = packageRoot();
let dir: string;

beforeAll(() => {
  assertBuilt();
  dir = mkdtempSync(join(tmpdir(), 'cube-test-daemon-modules-'));
  writeFileSync(
    join(dir, 'hooks.mjs'),
    `import { appendFileSync } from 'node:fs';\nexport async function load(url, context, next) {\n  if (url.startsWith('file:')) appendFileSync(process.env.CUBE_TEST_MODULES, url + '\\n');\n  return next(url, context);\n}\n`,
  );
  writeFileSync(
    join(dir, 'register.mjs'),
    `import { register } from 'node:module';\nregister(${JSON.stringify(pathToFileURL(join(dir, 'hooks.mjs')).href)});\n`,
  );
});

afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Runs bin/cubed with `args` until it exits, or until its log says `until` (then SIGTERM); the daemon's modules it loaded, relative to dist/src/. */
async function modulesOf(name: string, args: string[], until?: string): Promise<{ modules: string[]; log: string }> {
  const list = join(dir, `${name}.modules`);
  const child = spawn(process.execPath, ['--import', pathToFileURL(join(dir, 'register.mjs')).href, join(root, 'bin/cubed'), ...args], {
    env: { ...process.env, CUBE_TEST_MODULES: list, CUBE_API_KEY: 'e2b_daemon_modules', CUBE_CLUSTER_SECRET: 'daemon-modules' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let log = '';
  const onOutput = (b: Buffer) => {
    log += b.toString();
    if (until && log.includes(until)) child.kill('SIGTERM');
  };
  child.stdout.on('data', onOutput);
  child.stderr.on('data', onOutput);
  await new Promise((r) => child.once('exit', r));
  const prefix = pathToFileURL(join(root, 'dist/src')).href + '/';
  const modules = readFileSync(list, 'utf8')
    .split('\n')
    .filter((u) => u.startsWith(prefix))
    .map((u) => u.slice(prefix.length));
  return { modules, log };
}

const NODE_AGENT = [
  'cubelet/cubelet.js',
  'cubelet/heartbeat.js',
  'cubelet/rpc-server.js',
  'cubelet/sim-nodes.js',
  'templates/build/build.js',
  'network/agent.js',
  'runtime/ns/driver.js',
  'runtime/microvm/driver.js',
  'storage/btrfs-store.js',
];
const CONTROL_PLANE = ['control/service.js', 'api/server.js', 'store/cluster/index.js', 'store/embedded.js'];

it("a control replica loads none of the node agent's modules", async () => {
  // Its stores are unreachable: it exits once it has loaded its modules and tried them.
  const { modules, log } = await modulesOf('control', [
    '--role',
    'control',
    '--redis',
    'redis://127.0.0.1:1/0',
    '--mysql',
    'mysql://root@127.0.0.1:1/cube_none',
    '--listen',
    '127.0.0.1:0',
    '--config-dir',
    join(root, 'config'),
  ]);
  expect(log).toMatch(/unavailable/);
  expect(modules).toEqual(expect.arrayContaining(CONTROL_PLANE));
  expect(modules.filter((m) => NODE_AGENT.includes(m))).toEqual([]);
}, 60_000);

it("a compute node loads none of the control plane's modules", async () => {
  const dataDir = join(dir, 'compute');
  mkdirSync(dataDir);
  const { modules, log } = await modulesOf(
    'compute',
    [
      '--role',
      'compute',
      '--runtime',
      'sim',
      '--control',
      'http://127.0.0.1:1',
      '--listen',
      '127.0.0.1:0',
      '--data-dir',
      dataDir,
      '--node-id',
      'daemon-modules',
      '--config-dir',
      join(root, 'config'),
    ],
    'cubed compute ready',
  );
  expect(log).toContain('cubed compute ready');
  expect(modules).toEqual(expect.arrayContaining(['cubelet/heartbeat.js', 'cubelet/rpc-server.js', 'cubelet/sim-nodes.js']));
  expect(modules.filter((m) => CONTROL_PLANE.includes(m))).toEqual([]);
}, 60_000);
