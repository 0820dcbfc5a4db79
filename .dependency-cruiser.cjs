// The import direction of src/ (docs/architecture.md "Layers"), checked by test/architecture/layers.test.ts
// as part of `npm test`:
//   entry points (cli, tui, bench) -> api -> scheduler -> cubelet, store -> runtime, network, storage -> base -> model
// where "model" is src/model/ (the internal types and pure models every layer shares) and "base" is
// config/, errors.ts, ids.ts and emitter.ts. A layer may import its own and any lower layer, never a
// higher one. Type-only imports count too (tsPreCompilationDeps).
const LAYERS = [
  { name: 'model', path: '^src/model/' },
  { name: 'base', path: '^src/(config/|errors\\.ts$|ids\\.ts$|emitter\\.ts$)' },
  { name: 'runtime-network', path: '^src/(runtime|network|storage)/' },
  { name: 'cubelet-store', path: '^src/(cubelet|store)/' },
  { name: 'scheduler', path: '^src/scheduler/' },
  { name: 'api', path: '^src/api/' },
];
const ENTRY = '^src/(cli|tui|bench)/';

// Upward imports as the code stands (`to`, in layer `of`), each allowed from the files named in
// `from` only, with why.
const EXCEPTIONS = [
  {
    why: "1. the node RPC server is an HTTP server like the API's: the same JSON errors and body limits, the same port proxy",
    to: '^src/api/(http|proxy)\\.ts$',
    of: 'api',
    from: '^src/cubelet/rpc-server\\.ts$',
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
    // An exception's target, imported upward from anywhere but the files it names.
    ...EXCEPTIONS.map((e, k) => {
      const lower = LAYERS.slice(0, LAYERS.findIndex((l) => l.name === e.of)).map((l) => l.path).join('|');
      return { name: `exception-${k + 1}-elsewhere`, comment: e.why, severity: 'error', from: { path: lower, pathNot: e.from }, to: { path: e.to } };
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
