// Volumes (E2B's volume API), the same for both control planes: the data on the node that holds
// it (ns: a subvolume of its store with a quota-group limit, runtime/ns/volumes.ts), the record in
// the state store. A create that mounts volumes is placed on their node (the request's nodeID is
// pinned to it, as for a sandbox made from a snapshot); volumes on two nodes, or a node that is
// down, refuse the create with the reason. A volume some sandbox mounts is not deleted (409).
// The node's volumes are reached in process (role all) or over the node API (the schema's NodeVolumes;
// a file's content as the byte streams volumeRead and volumeWrite: cubelet/remote.ts).
// A new volume goes to the node with the most free store among those that offer the ns runtime.
import { randomBytes, timingSafeEqual } from 'node:crypto';
import type { Logger } from 'pino';
import type { NodeApi } from '../cubelet/types.js';
import type { NodeView } from '../model/node.js';
import { CubeError } from '../errors.js';
import { isVolumeID, newVolumeID } from '../ids.js';
import type { CreateSandboxRequest, SandboxRecord } from '../model/sandbox.js';
import { mountPathProblem, VOLUME_NAME, type VolumeMount, type VolumeRecord } from '../model/volume.js';
import type { VolumeHost } from '../runtime/types.js';
import type { StateStore } from '../store/types.js';
import { audited } from './admission.js';

const GIB = 1024 ** 3;

/** Who asks: a user key sees only its own volumes, an admin key every one (as sandboxes). */
export interface VolumeCaller {
  keyID?: string;
  role?: string;
}

export interface VolumeBookOptions {
  store: StateStore;
  /** The node API of a node by id (404/503 when unknown or unreachable). */
  node: (nodeID: string) => Promise<NodeApi>;
  /** The nodes' views (runtimes, store, lost, cordoned). */
  nodeViews: () => Promise<NodeView[]>;
  /** Sandboxes that are not gone (their mounts). */
  sandboxes: () => Promise<SandboxRecord[]>;
  /** volumes.default_gib of the config in force. */
  defaultGiB: () => number;
  log: Logger;
}

/** What the API uses. */
export type VolumeApi = Pick<VolumeBook, 'create' | 'list' | 'get' | 'remove' | 'content'>;

/** The volumes a create mounts, resolved by name among its owner's, and the node they pin it to (pure). */
export function resolveMounts(
  asked: { name: string; path: string }[],
  owned: VolumeRecord[],
  pinned?: string,
): { volumes: VolumeMount[]; nodeID: string } | undefined {
  if (!asked.length) return undefined;
  const volumes: VolumeMount[] = [];
  const paths = new Set<string>();
  let nodeID = pinned;
  for (const m of asked) {
    const problem = mountPathProblem(m.path);
    if (problem !== undefined) throw new CubeError('BAD_REQUEST', `volumeMounts: ${problem}`);
    if (paths.has(m.path)) throw new CubeError('BAD_REQUEST', `volumeMounts: two volumes are mounted at ${m.path}`);
    paths.add(m.path);
    const rec = owned.find((v) => v.name === m.name);
    if (!rec) throw new CubeError('NOT_FOUND', `volumeMounts: volume ${JSON.stringify(m.name)} not found`);
    if (nodeID !== undefined && rec.nodeID !== nodeID)
      throw new CubeError(
        'VOLUME_PLACEMENT',
        `volume ${rec.name} (${rec.volumeID}) is on node ${rec.nodeID}, but ${pinned !== undefined && nodeID === pinned ? 'the create names' : 'another of its volumes is on'} node ${nodeID}: a sandbox mounts only volumes of the node it runs on`,
      );
    nodeID = rec.nodeID;
    volumes.push({ volumeID: rec.volumeID, name: rec.name, path: m.path });
  }
  return { volumes, nodeID: nodeID! };
}

/**
 * A placement refused on the node a create's volumes pinned it to, saying so: the scheduler's reason
 * names the node's shortfall, not why no other node was tried (pure; other errors as they are).
 */
export function placedForVolumes(e: unknown, req: CreateSandboxRequest): unknown {
  if (!(e instanceof CubeError) || e.kind !== 'NO_NODE' || !req.volumes?.length) return e;
  const names = req.volumes.map((v) => v.name).join(', ');
  return new CubeError('NO_NODE', `${e.message} (it mounts volume ${names} of node ${req.nodeID}, so it can run only there)`, {
    ...(e.details ? { details: e.details } : {}),
    ...(e.retryAfter !== undefined ? { retryAfter: e.retryAfter } : {}),
    cause: e,
  });
}

/** Whether two tokens are the same, in constant time (pure). */
function sameToken(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

export class VolumeBook {
  constructor(private readonly o: VolumeBookOptions) {}

  /** A new empty volume on a node that holds volumes; 409 when the caller has one of that name. */
  async create(name: string, caller: VolumeCaller, opts: { sizeGiB?: number; nodeID?: string } = {}): Promise<VolumeRecord> {
    if (typeof name !== 'string' || !VOLUME_NAME.test(name))
      throw new CubeError('BAD_REQUEST', `volume name ${JSON.stringify(name)} must be 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit`);
    const sizeGiB = opts.sizeGiB ?? this.o.defaultGiB();
    if (!(Number.isFinite(sizeGiB) && sizeGiB > 0 && sizeGiB <= 16384))
      throw new CubeError('BAD_REQUEST', `volume size ${sizeGiB} GiB must be above 0 and at most 16384`);
    const taken = (await this.o.store.listVolumes()).find((v) => v.name === name && v.owner === caller.keyID);
    if (taken) throw new CubeError('CONFLICT', `volume name ${name} is taken by ${taken.volumeID}`);
    const made: Omit<VolumeRecord, 'nodeID'> = {
      volumeID: newVolumeID(),
      name,
      ...(caller.keyID !== undefined ? { owner: caller.keyID } : {}),
      sizeBytes: Math.floor(sizeGiB * GIB),
      createdAt: Date.now(),
      token: randomBytes(24).toString('base64url'),
    };
    return audited(this.o.store, caller.keyID, 'volume.create', made.volumeID, async () => {
      const { nodeID, host } = await this.makeOnANode(made.volumeID, made.sizeBytes, opts.nodeID);
      const rec: VolumeRecord = { ...made, nodeID };
      let added = false;
      try {
        added = await this.o.store.addVolume(rec);
      } finally {
        if (!added)
          await host
            .remove(rec.volumeID)
            .catch((err: unknown) => this.o.log.warn({ err, volumeID: rec.volumeID, nodeID }, 'a volume the store did not record stays on its node'));
      }
      if (!added) throw new CubeError('CONFLICT', `volume name ${name} was taken meanwhile`);
      return rec;
    });
  }

  /** Volumes the caller sees, oldest first. */
  async list(caller: VolumeCaller): Promise<VolumeRecord[]> {
    return (await this.o.store.listVolumes()).filter((v) => this.sees(caller, v));
  }

  /** By id (or, failing that, by the caller's name for it); 404 when the caller sees none. */
  async get(ref: string, caller: VolumeCaller): Promise<VolumeRecord> {
    const rec = isVolumeID(ref) ? await this.o.store.getVolume(ref) : (await this.list(caller)).find((v) => v.name === ref);
    if (!rec || !this.sees(caller, rec)) throw new CubeError('NOT_FOUND', `volume ${ref} not found`);
    return rec;
  }

  /** Deletes the node's subvolume, then the record; 409 while a sandbox mounts it. */
  async remove(ref: string, caller: VolumeCaller): Promise<void> {
    const rec = await this.get(ref, caller);
    const users = (await this.o.sandboxes()).filter((s) => s.volumes?.some((v) => v.volumeID === rec.volumeID));
    if (users.length)
      throw new CubeError(
        'VOLUME_IN_USE',
        `volume ${rec.name} (${rec.volumeID}) is mounted by ${users.length} sandbox${users.length > 1 ? 'es' : ''} (${users
          .slice(0, 5)
          .map((s) => s.sandboxID)
          .join(', ')}${users.length > 5 ? ', ...' : ''}): kill them first`,
        { details: { sandboxIDs: users.map((s) => s.sandboxID) } },
      );
    await audited(this.o.store, caller.keyID, 'volume.delete', rec.volumeID, async () => {
      await (await this.hostOf(rec)).remove(rec.volumeID);
      await this.o.store.deleteVolume(rec.volumeID);
    });
  }

  /** The volume whose content token this is, and its node's volumes; 401 for a wrong token, 404 for no volume. */
  async content(volumeID: string, token: string | undefined): Promise<{ rec: VolumeRecord; host: VolumeHost }> {
    const rec = isVolumeID(volumeID) ? await this.o.store.getVolume(volumeID) : undefined;
    if (token === undefined || !rec || !sameToken(token, rec.token))
      throw new CubeError(
        'UNAUTHORIZED',
        `volume ${volumeID}: missing or wrong volume token (send Authorization: Bearer <the token Volume.create or getInfo gave>)`,
      );
    return { rec, host: await this.hostOf(rec) };
  }

  /** A create with its volumeMounts resolved and its node pinned to theirs (unchanged without mounts). */
  async forCreate(req: CreateSandboxRequest): Promise<CreateSandboxRequest> {
    if (!req.volumeMounts?.length) return req;
    const owned = (await this.o.store.listVolumes()).filter((v) => v.owner === req.actor);
    const r = resolveMounts(req.volumeMounts, owned, req.nodeID)!;
    const view = (await this.o.nodeViews()).find((n) => n.nodeID === r.nodeID);
    if (!view || view.lost)
      throw new CubeError(
        'VOLUME_UNAVAILABLE',
        `volume ${r.volumes.map((v) => v.name).join(', ')} is on node ${r.nodeID}, which is ${view ? 'lost (not heard from)' : 'not in the cluster'}: a sandbox that mounts it can start only there, once the node is back`,
        { retryAfter: 5 },
      );
    return { ...req, volumes: r.volumes, nodeID: r.nodeID };
  }

  /**
   * At a node's start (role all, before the API serves: nothing is mid-create): a volume on its
   * disk that no record names (a create cut short between the node and the store) is removed;
   * a record whose data is gone is reported, not dropped (an operator may have moved the store).
   */
  async sweep(node: NodeApi): Promise<{ data: string[]; records: string[] }> {
    if (!node.volumes) return { data: [], records: [] };
    const held = await node.volumes.ids();
    const mine = (await this.o.store.listVolumes()).filter((v) => v.nodeID === node.nodeID).map((v) => v.volumeID);
    const data = held.filter((id) => !mine.includes(id));
    for (const id of data) await node.volumes.remove(id);
    return { data, records: mine.filter((id) => !held.includes(id)) };
  }

  private sees(caller: VolumeCaller, v: VolumeRecord): boolean {
    return caller.role !== 'user' || v.owner === caller.keyID;
  }

  private async hostOf(rec: VolumeRecord): Promise<VolumeHost> {
    const node = await this.o.node(rec.nodeID);
    if (!node.volumes) throw new CubeError('VOLUME_UNAVAILABLE', `volume ${rec.volumeID} is on node ${rec.nodeID}, whose runtime holds no volumes`);
    return node.volumes;
  }

  /**
   * Makes the volume on the node named, else on the node with the most free store among those
   * that offer the ns runtime and are neither lost nor cordoned (one that cannot be reached is
   * passed over for the next). A size no node has room for is refused by the last one asked.
   */
  private async makeOnANode(volumeID: string, sizeBytes: number, nodeID?: string): Promise<{ nodeID: string; host: VolumeHost }> {
    const views = await this.o.nodeViews();
    const able = (n: NodeView) => !n.lost && (n.runtimes ?? [{ name: n.runtime }]).some((r) => r.name === 'ns') && n.usage.store !== undefined;
    const candidates =
      nodeID !== undefined
        ? views.filter((n) => n.nodeID === nodeID && able(n))
        : views.filter((n) => able(n) && !n.cordoned).sort((a, b) => (b.usage.store?.freeBytes ?? 0) - (a.usage.store?.freeBytes ?? 0));
    let last: unknown;
    for (const n of candidates) {
      try {
        const node = await this.o.node(n.nodeID);
        if (!node.volumes) continue;
        await node.volumes.create(volumeID, sizeBytes);
        return { nodeID: n.nodeID, host: node.volumes };
      } catch (e) {
        if (!(e instanceof CubeError && e.kind === 'NODE_UNREACHABLE')) throw e;
        last = e; // that node is down: the next one
      }
    }
    if (last) throw last;
    throw new CubeError(
      'VOLUME_UNAVAILABLE',
      nodeID !== undefined
        ? `node ${nodeID} cannot hold volumes: it is unknown, lost, or offers no ns runtime with a store`
        : 'no node can hold volumes: none offers the ns runtime with a store (or all are cordoned or lost)',
    );
  }
}
