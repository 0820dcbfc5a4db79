// The modules each role loads on demand: a compute node never loads the control plane's, a
// control replica never the node agent's.

/**
 * The control plane's modules (API server, stores, scheduler), loaded only by the roles that run
 * one: a compute node never uses them, and loading them was most of its start-up (importing them
 * took 3.1 s against 1.3 s for the node's own modules at load 10 on this machine; a compute node
 * became healthy in 2.0-2.7 s instead of 3.1-4.6 s at load 7-10, three runs each, back to back;
 * three nodes and a replica starting at once under the test suite's load missed a 90 s health
 * wait in test/cluster/layers.test.ts).
 */
export async function controlModules() {
  const [auth, server, cp, directory, embedded] = await Promise.all([
    import('../../api/auth.js'),
    import('../../api/server.js'),
    import('../../control/service.js'),
    import('../../control/wiring.js'),
    import('../../store/embedded.js'),
  ]);
  return { ...auth, ...server, ...cp, ...directory, ...embedded };
}

/** What a control replica adds (the cluster store's Redis and MySQL clients, node RPC, the layer relay): role all never loads them. */
export async function clusterModules() {
  const [base, clusterRpc, relay, templates, cluster] = await Promise.all([
    controlModules(),
    import('../../api/cluster-rpc.js'),
    import('../../templates/relay.js'),
    import('../../templates/cluster.js'),
    import('../../store/cluster/index.js'),
  ]);
  return { ...base, ...clusterRpc, ...relay, ...templates, ...cluster };
}

/**
 * The node agent's modules (cubelet, runtimes, network agent, template builds), loaded only by
 * the roles that run a node, as controlModules() are by the roles that run a control plane: a
 * control replica never uses them. Without them it loads 351 module files instead of 534 and
 * uses 0.88-0.90x the CPU until healthy (median of 8 and 12 alternating runs against the
 * previous build, at load 10-12; its wall time moved with the load more than that).
 */
export async function nodeModules() {
  const [
    cubelet,
    hostMetrics,
    heartbeat,
    fences,
    rpcServer,
    portProxy,
    agent,
    firewall,
    ipam,
    ns,
    microvm,
    microvmHost,
    multi,
    sim,
    layersImport,
    build,
    templates,
    layerFetch,
  ] = await Promise.all([
    import('../../cubelet/cubelet.js'),
    import('../../cubelet/host-metrics.js'),
    import('../../cubelet/heartbeat.js'),
    import('../../cubelet/fences.js'),
    import('../../cubelet/rpc-server.js'),
    import('../../cubelet/port-proxy.js'),
    import('../../network/agent.js'),
    import('../../network/firewall.js'),
    import('../../network/ipam.js'),
    import('../../runtime/ns/driver.js'),
    import('../../runtime/microvm/driver.js'),
    import('../../runtime/microvm/host.js'),
    import('../../runtime/multi.js'),
    import('../../cubelet/sim-nodes.js'),
    import('../../templates/layers/import.js'),
    import('../../templates/build/build.js'),
    import('../../templates/store.js'),
    import('../../templates/fetch.js'),
  ]);
  return {
    ...cubelet,
    ...hostMetrics,
    ...heartbeat,
    ...fences,
    ...rpcServer,
    ...portProxy,
    ...agent,
    ...firewall,
    ...ipam,
    ...ns,
    ...microvm,
    ...microvmHost,
    ...multi,
    ...sim,
    ...layersImport,
    ...build,
    ...templates,
    ...layerFetch,
  };
}
export type NodeModules = Awaited<ReturnType<typeof nodeModules>>;
