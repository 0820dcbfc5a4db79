// Template builds and removal through a control replica. A replica keeps no store and runs no
// step: a build (the E2B `Template.build` flow, `cubectl template build`) goes to one compute node
// offering the ns runtime with room for the build's memory, which runs it as role all does and
// registers the template in its own store; its heartbeat then lists the template and its layers,
// so the other nodes fetch them by digest through the relay (relay.ts). Which node runs a
// build is kept in Redis (BuildPlacement), so any replica answers its status by asking that node.
// A COPY upload goes to the node of its template's newest build. A node that is gone (not
// answering, and its heartbeat stale or lost) while its build runs ends the build: status `error` naming the node, kept in the
// store as the build's final answer (the node, if it was killed, marks the build failed and drops
// its layers when it starts again: build/build.ts restore). A finished status is kept too, so
// it outlives its node. Removal checks the whole cluster (templates built from it on any node)
// before it removes the template from every live node holding it (each keeps its layers for its
// sandboxes running from it until they end); tags are added on
// every live node holding the template.
import { createHmac } from 'node:crypto';
import type { Readable } from 'node:stream';
import type { NodeView } from '../model/node.js';
import type { RemoteNode } from '../cubelet/remote.js';
import type { BuildRecord } from './build/build.js';
import { CubeError } from '../errors.js';
import { parseTemplateRef, type TemplateRecord } from './store.js';
import type { BuildPlacement } from '../store/cluster/index.js';

/** Where builds are recorded (ClusterStore). */
export interface BuildBook {
  putBuild(b: BuildPlacement, newest?: boolean): Promise<void>;
  getBuild(buildID: string): Promise<BuildPlacement | undefined>;
  newestBuild(templateID: string): Promise<BuildPlacement | undefined>;
}

export interface BuildRequest {
  name: string;
  tags?: string[];
  cpuCount?: number;
  memoryMB?: number;
}

/** Live nodes that take builds: they run the ns runtime and keep a layer store (cluster compute nodes report `layers`) (pure). */
function builders(views: readonly NodeView[]): NodeView[] {
  return views.filter(
    (v) => v.healthy && !v.lost && v.address !== undefined && v.layers !== undefined && (v.runtimes?.some((r) => r.name === 'ns') ?? v.runtime === 'ns'),
  );
}

/**
 * The node a build of `memoryMiB` goes to: of the schedulable builders, the one with the most
 * memory left under its quota (a build step is a sandbox of that size) (pure).
 */
export function buildNode(views: readonly NodeView[], memoryMiB: number): NodeView {
  const all = builders(views);
  const open = all.filter((v) => v.schedulable && !v.cordoned && !v.draining);
  const room = (v: NodeView) => v.capacity.memoryMiB - v.usage.quotaMemUsedMiB;
  const fit = open.filter((v) => room(v) >= memoryMiB).sort((a, b) => room(b) - room(a));
  if (fit[0]) return fit[0];
  const why = !all.length
    ? 'no live compute node offering the ns runtime (builds run there)'
    : !open.length
      ? `none of the ${all.length} node(s) offering the ns runtime is schedulable (${all.map((v) => `${v.nodeID}: ${v.reason || 'cordoned or draining'}`).join('; ')})`
      : `no node offering the ns runtime has ${memoryMiB} MiB of memory left for the build's steps (most: ${Math.max(...open.map(room))} MiB)`;
  throw new CubeError('NO_NODE', `cannot place the template build: ${why}`, { retryAfter: 5 });
}

export class ClusterTemplates {
  /** Signs the upload links the SDK PUTs files to: the same on every replica (the PUT may reach another one). */
  readonly linkKey: Buffer;
  /** Per build, the newest record this replica had from its node (what a failure is reported with). */
  private readonly seen = new Map<string, BuildRecord>();

  constructor(
    private readonly o: {
      nodes: () => Promise<NodeView[]>;
      client: (v: NodeView) => RemoteNode;
      book: BuildBook;
      secret: string;
      /** The default build memory when the request names none (sandbox.default_spec). */
      memoryMiB: () => number;
      /** Node `v`'s templates changed by a write through this replica (LayerRelay.templatesChanged). */
      templatesChanged: (v: NodeView) => Promise<void>;
    },
  ) {
    this.linkKey = createHmac('sha256', o.secret).update('cubed template upload links').digest();
  }

  /** `POST /v3/templates`: the build's record, made on the node chosen to run it. */
  async request(req: BuildRequest): Promise<BuildRecord> {
    const v = buildNode(await this.o.nodes(), req.memoryMB ?? this.o.memoryMiB());
    const rec = await this.o.client(v).buildRequest(req);
    await this.o.book.putBuild({ buildID: rec.buildID, templateID: rec.templateID, nodeID: v.nodeID }, true);
    return rec;
  }

  private async placed(templateID: string, buildID: string): Promise<{ p: BuildPlacement; v: NodeView | undefined }> {
    const p = await this.o.book.getBuild(buildID);
    if (!p || p.templateID !== templateID) throw new CubeError('NOT_FOUND', `build ${buildID} of template ${templateID} not found`);
    return { p, v: (await this.o.nodes()).find((n) => n.nodeID === p.nodeID) };
  }

  async start(templateID: string, buildID: string, body: unknown, owner?: string): Promise<void> {
    const { p, v } = await this.placed(templateID, buildID);
    if (p.final) throw new CubeError('CONFLICT', `build ${buildID} ended already (${(p.final as BuildRecord).status})`);
    if (!v?.healthy)
      throw new CubeError(
        'NODE_UNREACHABLE',
        `node ${p.nodeID}, where build ${buildID} was placed, is not live (${v?.reason ?? 'gone from the cluster'}): start a new build`,
        { retryAfter: 5 },
      );
    await this.o.client(v).buildStart(templateID, buildID, body, owner);
  }

  /**
   * The build's status: from its node while it runs, from the store once it finished or its node
   * went. A node that answers is believed even with a stale heartbeat (a loaded node's heartbeat
   * can lag while its build goes on); one that does not answer is gone only once its heartbeat is.
   */
  async get(templateID: string, buildID: string): Promise<BuildRecord> {
    const { p, v } = await this.placed(templateID, buildID);
    if (p.final) return p.final as BuildRecord;
    let r: BuildRecord | undefined;
    if (v?.address !== undefined) {
      try {
        r = await this.o.client(v).buildGet(templateID, buildID);
      } catch (e) {
        if (!(e instanceof CubeError && e.kind === 'NODE_UNREACHABLE')) throw e;
      }
    }
    if (r) {
      this.seen.set(buildID, r);
      if (r.status === 'ready' || r.status === 'error') {
        if (r.status === 'ready') await this.o.templatesChanged(v!);
        await this.o.book.putBuild({ ...p, final: r });
        this.seen.delete(buildID);
      }
      return r;
    }
    // Not answering but its heartbeat is fresh: the build goes on as far as anyone knows (no new log line).
    if (v?.healthy) return this.seen.get(buildID) ?? this.blank(templateID, buildID, 'building');
    const at = new Date().toISOString();
    const message = `node ${p.nodeID}, which ran the build, went away (${v?.reason ?? 'gone from the cluster'}): the build ended there and registered nothing; start a new build`;
    const base = this.seen.get(buildID) ?? this.blank(templateID, buildID, 'error');
    const logs = [...base.logs, { timestamp: at, level: 'error' as const, message: `Build failed: ${message}` }];
    const final: BuildRecord = {
      ...base,
      status: 'error',
      logs,
      reason: { message, logEntries: logs.filter((l) => l.level === 'error') },
      updatedAt: at,
      finishedAt: at,
    };
    await this.o.book.putBuild({ ...p, final });
    this.seen.delete(buildID);
    return final;
  }

  private blank(templateID: string, buildID: string, status: BuildRecord['status']): BuildRecord {
    const now = new Date().toISOString();
    return { templateID, buildID, refs: [], status, logs: [], cpuCount: 0, memoryMB: 0, createdAt: now, updatedAt: now };
  }

  /** Builds of a template on every live builder, newest first (a node that does not answer is left out). */
  async list(templateID: string): Promise<BuildRecord[]> {
    const got = await Promise.allSettled(builders(await this.o.nodes()).map((v) => this.o.client(v).buildList(templateID)));
    return got.flatMap((r) => (r.status === 'fulfilled' ? r.value : [])).sort((a, b) => b.createdAt.localeCompare(a.createdAt));
  }

  /** The node of the newest build of `templateID`, which a COPY's files go to. */
  private async uploadNode(templateID: string): Promise<RemoteNode> {
    const p = await this.o.book.newestBuild(templateID);
    if (!p) throw new CubeError('NOT_FOUND', `no build of template ${templateID} waits for files: POST /v3/templates first`);
    const v = (await this.o.nodes()).find((n) => n.nodeID === p.nodeID);
    if (!v?.healthy)
      throw new CubeError('NODE_UNREACHABLE', `node ${p.nodeID}, where build ${p.buildID} of ${templateID} was placed, is not live: start a new build`, {
        retryAfter: 5,
      });
    return this.o.client(v);
  }

  async hasFiles(templateID: string, hash: string, owner?: string): Promise<boolean> {
    return (await this.uploadNode(templateID)).buildHasFiles(hash, owner);
  }

  async putFiles(templateID: string, hash: string, body: Readable, owner?: string): Promise<void> {
    await (await this.uploadNode(templateID)).buildFiles(hash, body, owner);
  }

  /** Each live builder's template records. */
  private async held(): Promise<{ v: NodeView; recs: TemplateRecord[] }[]> {
    return Promise.all(builders(await this.o.nodes()).map(async (v) => ({ v, recs: await this.o.client(v).templateRecords() })));
  }

  /** The templates' records across the live nodes (one per NAME:TAG: the newest). */
  async records(): Promise<TemplateRecord[]> {
    const byRef = new Map<string, TemplateRecord>();
    for (const { recs } of await this.held()) for (const r of recs) if (!byRef.has(r.ref) || byRef.get(r.ref)!.created < r.created) byRef.set(r.ref, r);
    return [...byRef.values()];
  }

  /** Adds `tags` to template `target` on every live node holding it (the others fetch NAME:TAG like any template). */
  async tag(target: string, tags: string[]): Promise<{ from: TemplateRecord; tags: string[] }> {
    const ref = parseTemplateRef(target).ref;
    const holders = (await this.held()).filter((h) => h.recs.some((r) => r.ref === ref));
    if (!holders.length) throw new CubeError('NOT_FOUND', `template ${ref} is on no live node of the cluster`);
    const done = await Promise.all(
      holders.map(async (h) => {
        const r = await this.o.client(h.v).tagTemplate(ref, tags);
        await this.o.templatesChanged(h.v);
        return r;
      }),
    );
    return done[0]!;
  }

  /**
   * Removes template NAME[:TAG] from every live node holding it: 409 while a template on any node
   * was built from it; each node holds its layers for its sandboxes running from it (until they
   * end) and drops those nothing else holds. A node down meanwhile keeps its copy (it lists it
   * again when back).
   */
  async remove(name: string): Promise<TemplateRecord> {
    const ref = parseTemplateRef(name).ref;
    const held = await this.held();
    const holders = held.filter((h) => h.recs.some((r) => r.ref === ref));
    if (!holders.length) throw new CubeError('NOT_FOUND', `template ${ref} is on no live node of the cluster`);
    const children = [...new Set(held.flatMap((h) => h.recs.filter((r) => r.parent === ref).map((r) => r.ref)))];
    if (children.length) throw new CubeError('CONFLICT', `template ${ref} is the parent of ${children.join(', ')}: remove those first`);
    let removed: TemplateRecord | undefined;
    for (const h of holders) {
      removed = await this.o.client(h.v).removeTemplate(ref);
      await this.o.templatesChanged(h.v);
    }
    return removed!;
  }
}
