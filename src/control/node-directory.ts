// Where the control plane finds a node's API: remote nodes over node RPC (a cluster), or the
// cubelet in this process (role all: a cluster of one, wired in-process). The control plane
// itself does not know which.
import { fencedNode, type FenceBook } from '../cubelet/fences.js';
import { RemoteNode } from '../cubelet/remote.js';
import type { NodeApi } from '../cubelet/types.js';
import { CubeError } from '../errors.js';

export interface NodeDirectory {
  /**
   * The node at `address` (its registry record's). With `fence`, the token of the sandbox lock
   * the caller holds, its calls carry it and a node refuses them once a later holder's reached it.
   */
  node(nodeID: string, address: string | undefined, fence?: string): NodeApi;
  /** The node left the registry. */
  forget(nodeID: string): void;
}

/** Compute nodes over node RPC, one client per node and address. */
export class RemoteNodes implements NodeDirectory {
  private readonly clients = new Map<string, RemoteNode>();

  /** `secret`: the cluster's, which node RPC carries; `callTimeoutMs`: the call deadline in force (sandbox.call_deadline_sec). */
  constructor(
    private readonly secret: string,
    private readonly callTimeoutMs: () => number,
  ) {}

  node(nodeID: string, address: string | undefined, fence?: string): RemoteNode {
    if (!address) throw new CubeError('NODE_UNREACHABLE', `node ${nodeID} has no RPC address on record`);
    let r = this.clients.get(nodeID);
    const timeoutMs = this.callTimeoutMs();
    if (!r || r.address !== address || r.timeoutMs !== timeoutMs) {
      r = new RemoteNode(nodeID, address, this.secret, timeoutMs);
      this.clients.set(nodeID, r);
    }
    return fence === undefined ? r : r.withFence(fence);
  }

  forget(nodeID: string): void {
    this.clients.delete(nodeID);
  }
}

/**
 * The nodes of this process (role all: its one cubelet), each with its FenceBook: calls under a
 * sandbox lock are checked against its fence as node RPC checks them on a compute node
 * (underFence), so a holder whose lease lapsed (this process stalled past it, then an operation
 * queued behind took the lock) cannot act after the next holder did.
 */
export class LocalNodes implements NodeDirectory {
  private readonly byID: Map<string, { node: NodeApi; fences: FenceBook }>;

  constructor(nodes: readonly { node: NodeApi; fences: FenceBook }[]) {
    this.byID = new Map(nodes.map((n) => [n.node.nodeID, n]));
  }

  node(nodeID: string, _address?: string, fence?: string): NodeApi {
    const n = this.byID.get(nodeID);
    if (!n) throw new CubeError('NOT_FOUND', `node ${nodeID} not found (this daemon runs ${[...this.byID.keys()].join(', ')})`);
    return fencedNode(n.node, n.fences, fence);
  }

  forget(): void {}
}
