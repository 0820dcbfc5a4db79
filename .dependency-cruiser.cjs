// The import direction of src/ (docs/architecture.md "Layers"), checked by test/architecture/layers.test.ts
// as part of `npm test`:
//   entry points (cli, tui, bench) -> api -> scheduler -> cubelet, store -> runtime, network, storage -> model
// where "model" is config/, errors.ts, ids.ts and emitter.ts. A layer may import its own and any lower
// layer, never a higher one. Type-only imports count too (tsPreCompilationDeps).
const LAYERS = [
  { name: 'model', path: '^src/(config/|errors\\.ts$|ids\\.ts$|emitter\\.ts$)' },
  { name: 'runtime-network', path: '^src/(runtime|network|storage)/' },
  { name: 'cubelet-store', path: '^src/(cubelet|store)/' },
  { name: 'scheduler', path: '^src/scheduler/' },
  { name: 'api', path: '^src/api/' },
];
const ENTRY = '^src/(cli|tui|bench)/';

// Upward imports as the code stands (`to`, in layer `of`), each allowed from the files named in
// `from` only, with why. Issue 11
// item 2 moves the shared types and pure helpers into src/model/, which removes 1, 2, 3 and 5.
const EXCEPTIONS = [
  {
    why: '1. src/api/types.ts is the internal model (sandbox, node, event views) as well as the wire shapes: every layer uses it, for its types only',
    to: '^src/api/types\\.ts$',
    of: 'api',
    from: '^src/',
    typesOnly: true,
  },
  {
    why: '2. SandboxRecord and ListFilter are defined beside the ControlPlane contract that the stores serve: types only',
    to: '^src/scheduler/control-plane\\.ts$',
    of: 'scheduler',
    from: '^src/store/',
    typesOnly: true,
  },
  {
    why: '3. the density model is pure: a node computes its own ceilings with it, so its view and the scheduler agree',
    to: '^src/scheduler/density\\.ts$',
    of: 'scheduler',
    from: '^src/cubelet/node-view\\.ts$',
  },
  {
    why: "4. the node RPC server is an HTTP server like the API's: the same JSON errors and body limits, the same port proxy",
    to: '^src/api/(http|proxy)\\.ts$',
    of: 'api',
    from: '^src/cubelet/rpc-server\\.ts$',
  },
  {
    why: '5. pure percentile helpers, shared with the benchmarks',
    to: '^src/bench/stats\\.ts$',
    of: 'entry',
    from: '^src/(network/wait-stats|scheduler/create-stats)\\.ts$',
  },
  {
    why: '6. the sim runtime stands for whole nodes: it assembles a real Cubelet around its driver (composition that belongs with cli/daemon.ts), its 1000 cubelets sharing one host reading',
    to: '^src/cubelet/(cubelet|host-metrics)\\.ts$',
    of: 'cubelet-store',
    from: '^src/runtime/sim/nodes\\.ts$',
  },
];

const exceptionTargets = EXCEPTIONS.map((e) => e.to).join('|');

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    ...LAYERS.map((layer, i) => ({
      name: `${layer.name}-imports-up`,
      comment: `${layer.name} may import its own layer and lower ones only (docs/architecture.md "Layers")`,
      severity: 'error',
      from: { path: layer.path },
      to: { path: [...LAYERS.slice(i + 1).map((l) => l.path), ENTRY].join('|'), pathNot: exceptionTargets },
    })),
    // An exception's target, imported upward from anywhere but the files it names (or, for a
    // types-only one, for more than types).
    ...EXCEPTIONS.flatMap((e, k) => {
      const of = e.of === 'entry' ? LAYERS.length : LAYERS.findIndex((l) => l.name === e.of);
      const lower = LAYERS.slice(0, of).map((l) => l.path).join('|');
      const rules = [{ name: `exception-${k + 1}-elsewhere`, comment: e.why, severity: 'error', from: { path: lower, pathNot: e.from }, to: { path: e.to } }];
      if (e.typesOnly) rules.push({ name: `exception-${k + 1}-types-only`, comment: e.why, severity: 'error', from: { path: lower }, to: { path: e.to, dependencyTypesNot: ['type-only'] } });
      return rules;
    }),
    // The network agent split by job (issue 11 item 2): agent.ts wires pool.ts, which drives slot.ts
    // (kernel objects) and firewall.ts (nftables); these two know nothing of each other or of the pool.
    ...[
      ['^src/network/pool\\.ts$', '^src/network/agent\\.ts$'],
      ['^src/network/(slot|firewall)\\.ts$', '^src/network/(agent|pool)\\.ts$'],
      ['^src/network/slot\\.ts$', '^src/network/firewall\\.ts$'],
      ['^src/network/firewall\\.ts$', '^src/network/slot\\.ts$'],
    ].map(([from, to], k) => ({ name: `network-agent-one-way-${k + 1}`, comment: 'src/network/agent.ts split by job: imports go agent -> pool -> slot, firewall', severity: 'error', from: { path: from }, to: { path: to } })),
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    exclude: { path: '\\.test\\.tsx?$' },
  },
};
