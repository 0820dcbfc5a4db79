// The control plane's side of layer distribution: a compute node asks a replica for a template's
// record or a layer by digest (cluster routes, the cluster secret), and the replica relays it from
// a live node that holds it (node RPC `templateRecord` / `layer`), as the nodes' heartbeats report
// (NodeView.templates, NodeView.layers). Replicas keep no layer of their own: whatever node an
// import or a build ran on, every node can fetch its layers for as long as one holder is up.
// Registry images too: before a node pulls one it asks here (image), and takes it from a node
// holding it; one node at a time pulls a digest (a lease in the cluster store), the others wait
// for it and then fetch from it, so an image's blobs cross from the registry once per cluster.
import type { ServerResponse } from 'node:http';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import { RemoteNode } from '../cubelet/remote.js';
import { CubeError } from '../errors.js';
import { LAYER_STALL_MS, stallGuard, type HeldTemplate } from './fetch.js';
import { HOLDER_HEADER, type ImportRequest } from '../cubelet/rpc-wire.js';
import { PULL_LEASE_MS, type PeerAnswer } from './layers/pull.js';
import type { NodeView } from '../model/node.js';
import type { TemplateRecord } from './store.js';
import { listedName } from '../model/template.js';

/** Live nodes other than `from` that `has` accepts, in random order (a fetch burst spreads over the holders) (pure but for the shuffle). */
export function holders(views: readonly NodeView[], from: string | undefined, has: (v: NodeView) => boolean, rand: () => number = Math.random): NodeView[] {
  const out = views.filter((v) => v.healthy && !v.lost && v.address !== undefined && v.nodeID !== from && has(v));
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

export class LayerRelay {
  private readonly clients = new Map<string, RemoteNode>();

  constructor(
    private readonly o: {
      nodes: () => Promise<NodeView[]>;
      secret: string;
      /** Records node `nodeID`'s template list in the registry (ControlPlaneService.noteNodeTemplates). */
      noteTemplates: (nodeID: string, templates: string[]) => Promise<void>;
      /** The nodes holding template `listed` as the registry has it (ControlPlaneService.templates). */
      registryHolders: (listed: string) => Promise<string[]>;
      /** Takes or renews for `ttlMs` (true while `nodeID` holds it), or with no `ttlMs` releases, lease `name` (ClusterStore holdLease / releaseLease). */
      lease: (name: string, nodeID: string, ttlMs?: number) => Promise<boolean>;
    },
  ) {}

  /**
   * A write through this replica changed node `v`'s templates: its list goes in the registry now,
   * so the client's next `template ls` shows it (the node's heartbeat would write it up to a second
   * later). The write itself succeeded: a failed refresh leaves that next heartbeat to do it.
   */
  async templatesChanged(v: NodeView): Promise<void> {
    try {
      await this.o.noteTemplates(v.nodeID, (await this.node(v).nodeView()).templates);
    } catch {
      // The registry is written with the node's next heartbeat.
    }
  }

  /** The RPC client of node `v` (one per node, remade when its address changes). */
  node(v: NodeView): RemoteNode {
    let c = this.clients.get(v.nodeID);
    if (!c || c.address !== v.address) {
      c = new RemoteNode(v.nodeID, v.address!, this.o.secret);
      this.clients.set(v.nodeID, c);
    }
    return c;
  }

  /**
   * Before node `from` pulls registry image `digest`: a live node holding it (asked at once:
   * heartbeats carry layers, not images), else the pull lease, which one node at a time gets (the
   * one that pulls; it renews it while its copy runs, and a node killed meanwhile loses it within
   * PULL_LEASE_MS), else `wait`: another node is pulling it. `lease` renews or releases instead.
   */
  async image(digest: string, from: string, lease?: 'renew' | 'release'): Promise<PeerAnswer | Record<string, never>> {
    const name = `pull:${digest}`;
    if (lease) {
      await this.o.lease(name, from, lease === 'renew' ? PULL_LEASE_MS : undefined);
      return {};
    }
    const asked = await Promise.allSettled(
      holders(await this.o.nodes(), from, (v) => v.layers !== undefined).map(async (v) => ({ node: v.nodeID, held: await this.node(v).heldImage(digest) })),
    );
    const held = asked.find((r) => r.status === 'fulfilled');
    if (held) return held.value;
    // A node that holds it but failed otherwise than "not here" (unreachable, a broken store) is skipped: the registry has it too.
    return (await this.o.lease(name, from, PULL_LEASE_MS)) ? { pull: true } : { wait: true };
  }

  /** Tries the holders one after another while they are unreachable; other errors are the answer. */
  private async fromHolders<T>(list: NodeView[], none: () => CubeError, f: (n: RemoteNode) => Promise<T>): Promise<T> {
    let last: CubeError | undefined;
    for (const v of list) {
      try {
        return await f(this.node(v));
      } catch (e) {
        if (!(e instanceof CubeError && e.kind === 'NODE_UNREACHABLE')) throw e;
        last = e;
      }
    }
    throw last ?? none();
  }

  /** Forwards an image archive to node `nodeID` (else a live node that fetches templates, at random) to import there. */
  async importOn(nodeID: string | undefined, body: Readable, opts: ImportRequest): Promise<TemplateRecord> {
    const list = holders(await this.o.nodes(), undefined, (v) => (nodeID !== undefined ? v.nodeID === nodeID : v.layers !== undefined));
    const v = list[0];
    if (!v)
      throw new CubeError(
        nodeID !== undefined ? 'NOT_FOUND' : 'NO_NODE',
        nodeID !== undefined ? `node ${nodeID} is not a live node of the cluster` : 'no live node to import the template on',
        { retryAfter: 5 },
      );
    const rec = await this.node(v).importImage(body, opts);
    await this.templatesChanged(v);
    return rec;
  }

  /**
   * Template `name`'s record and layer trees from a node holding it (not `from`, the asking node).
   * The node views list a node's templates as of its last heartbeat: when none holds it, the
   * registry decides, which an import, build or tag through this replica has written already
   * (templatesChanged), so an inspect right after them is not a 404 for up to a heartbeat.
   */
  async template(name: string, from?: string): Promise<HeldTemplate> {
    const want = listedName(name);
    const views = await this.o.nodes();
    let list = holders(views, from, (v) => v.templates.includes(want));
    if (list.length === 0) {
      const held = new Set(await this.o.registryHolders(want));
      list = holders(views, from, (v) => held.has(v.nodeID));
    }
    return this.fromHolders(
      list,
      () => new CubeError('NOT_FOUND', `template ${name} is on no live node of the cluster`),
      (n) => n.templateRecord(name),
    );
  }

  /**
   * Streams layer `digest` from a node holding it into `res`: node `prefer` first when it is live
   * (the node an image came from: its heartbeat may not list the layers it has just pulled yet).
   */
  async layer(digest: string, from: string | undefined, res: ServerResponse, prefer?: string): Promise<void> {
    const list = holders(await this.o.nodes(), from, (v) => v.nodeID === prefer || v.layers?.includes(digest) === true).sort(
      (a, b) => Number(b.nodeID === prefer) - Number(a.nodeID === prefer),
    );
    const up = await this.fromHolders(
      list,
      () => new CubeError('LAYER_UNAVAILABLE', `layer ${digest} is on no live node of the cluster`, { retryAfter: 5 }),
      async (n) => ({ node: n.nodeID, res: await n.layer(digest) }),
    );
    res.writeHead(200, { 'content-type': 'application/x-tar', [HOLDER_HEADER]: up.node });
    // A holder failing mid-stream ends the answer short: the fetching node's unpack or check fails (130424).
    await pipeline(
      stallGuard(Readable.fromWeb(up.res.body as WebReadableStream<Uint8Array>), LAYER_STALL_MS, `layer ${digest} relayed from its holder`),
      res,
    ).catch(() => res.destroy());
  }
}
