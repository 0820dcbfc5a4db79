// The two ways a control plane is wired, the only place role all and a cluster differ in it:
// which NodeDirectory reaches the nodes, which NodeFeed tells their state and the changes other
// writers made, and where the config in force comes from. ControlPlaneService is the same code
// over either.
import type { FenceBook } from '../cubelet/fences.js';
import type { NodeApi } from '../cubelet/types.js';
import type { StateStore } from '../store/types.js';
import { FilesConfig, StoreConfig, type ConfigOrigin } from './config-authority.js';
import { LocalNodes, RemoteNodes, type NodeDirectory } from './node-directory.js';
import { InProcessFeed, StoreFeed, type NodeFeed } from './node-feed.js';

export interface ControlWiring {
  nodes: NodeDirectory;
  feed: NodeFeed;
  configOrigin: ConfigOrigin;
}

/** Role all: a cluster of one, its nodes in this process (each with its fence book), its files the cluster's config. */
export function inProcessControl(nodes: readonly { node: NodeApi; fences: FenceBook }[]): ControlWiring {
  return { nodes: new LocalNodes(nodes), feed: new InProcessFeed(nodes.map((n) => n.node)), configOrigin: new FilesConfig() };
}

/**
 * Role control: nodes over node RPC (`secret`: the cluster's; `callTimeoutMs`: the call deadline
 * in force), their state and the config in force from `store`.
 */
export function clusterControl(store: StateStore, secret: string, callTimeoutMs: () => number): ControlWiring {
  return { nodes: new RemoteNodes(secret, callTimeoutMs), feed: new StoreFeed(store), configOrigin: new StoreConfig() };
}
