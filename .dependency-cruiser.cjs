// The import direction of src/ (docs/architecture.md "Layers"), checked by test/architecture/layers.test.ts
// as part of `npm test`:
//   entry points (cli, tui, bench) -> api -> scheduler -> cubelet, store -> runtime, network, storage -> base -> model
// where "model" is src/model/ (the internal types and pure models every layer shares) and "base" is
// config/, errors.ts, ids.ts, emitter.ts and http.ts. A layer may import its own and any lower layer, never a
// higher one. Type-only imports count too (tsPreCompilationDeps). There are no exceptions: what two layers
// share lives in the lower one (the node RPC server and the API share http.ts and cubelet/port-proxy.ts).
const LAYERS = [
  { name: 'model', path: '^src/model/' },
  { name: 'base', path: '^src/(config/|errors\\.ts$|ids\\.ts$|emitter\\.ts$|http\\.ts$)' },
  { name: 'runtime-network', path: '^src/(runtime|network|storage)/' },
  { name: 'cubelet-store', path: '^src/(cubelet|store)/' },
  { name: 'scheduler', path: '^src/scheduler/' },
  { name: 'api', path: '^src/api/' },
];
const ENTRY = '^src/(cli|tui|bench)/';

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    ...LAYERS.map((layer, i) => ({
      name: `${layer.name}-imports-up`,
      comment: `${layer.name} may import its own layer and lower ones only (docs/architecture.md "Layers")`,
      severity: 'error',
      from: { path: layer.path },
      to: { path: [...LAYERS.slice(i + 1).map((l) => l.path), ENTRY].join('|') },
    })),
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
