// The import direction of the whole tree (docs/architecture.md "Layers"), checked by
// test/architecture/layers.test.ts as part of `npm test` over src/, components/ and bench/:
//   entry points (src/cli, src/tui, src/bench, components/, bench/) -> api -> control -> cubelet, store
//   -> runtime, network, storage -> scheduler -> base -> model
// where "model" is src/model/ (the internal types and pure models every layer shares), "base" is
// config/, errors.ts, ids.ts, emitter.ts and http.ts, and the scheduler is pure placement: it imports
// only the model, the config and the error table (scheduler-pure). A layer may import its own and any
// lower layer, never a higher one; the console (src/tui, components/) asks the API and never imports
// the scheduler or the control plane; no module imports itself through others (no-cycles). Type-only
// imports count too (tsPreCompilationDeps). There are no exceptions: what two layers share lives in
// the lower one (the node RPC server and the API share http.ts and cubelet/port-proxy.ts).
const LAYERS = [
  { name: 'model', path: '^src/model/' },
  { name: 'base', path: '^src/(config/|errors\\.ts$|ids\\.ts$|emitter\\.ts$|http\\.ts$|fsx\\.ts$)' },
  { name: 'scheduler', path: '^src/scheduler/' },
  { name: 'runtime-network', path: '^src/(runtime|network|storage)/|^src/templates/(store\\.ts$|layers/)' },
  { name: 'cubelet-store', path: '^src/(cubelet|store)/|^src/templates/(build/|fetch\\.ts$)' },
  { name: 'control', path: '^src/control/|^src/templates/(cluster|relay)\\.ts$' },
  { name: 'api', path: '^src/api/' },
];
const ENTRY = '^src/(cli|tui|bench)/|^components/|^bench/';

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
    {
      name: 'scheduler-pure',
      comment: 'the scheduler is placement alone: it imports the model, the config and the error table only (docs/architecture.md "Layers")',
      severity: 'error',
      from: { path: '^src/scheduler/' },
      to: { path: '^src/', pathNot: '^src/(scheduler|model|config)/|^src/errors\\.ts$' },
    },
    {
      name: 'console-asks-the-api',
      comment: "the console shows what the API answers (a node's schedulable/reason/refusedBy among it): it never runs the scheduler or the control plane itself",
      severity: 'error',
      from: { path: '^src/tui/|^components/' },
      to: { path: '^src/(scheduler|control)/' },
    },
    { name: 'no-cycles', comment: 'imports form no cycle, type-only ones included', severity: 'error', from: {}, to: { circular: true } },
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
