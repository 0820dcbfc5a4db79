// What a control replica serves to compute nodes (not to API clients): heartbeats, and the
// templates and layers they fetch (relayed from the nodes holding them: templates/relay.ts), behind
// the cluster secret rather than an API key.
import type { IncomingMessage, ServerResponse } from 'node:http';
import {
  CLUSTER_IMAGE_PATH,
  CLUSTER_LAYER_PATH,
  CLUSTER_TEMPLATE_PATH,
  HEARTBEAT_PATH,
  heartbeatWithEpochTimes,
  secretMatches,
  type Heartbeat,
  type HeartbeatAnswer,
  type HeartbeatBatch,
} from '../cubelet/rpc-wire.js';
import { CubeError } from '../errors.js';
import type { LayerRelay } from '../templates/relay.js';
import { readJson, sendError, sendJson, type ErrorLog } from '../http.js';

export const CLUSTER_PREFIX = '/cluster/v1/';

/** A batch from a process standing for 1000 simulated nodes runs to a few MB. */
const MAX_HEARTBEAT = 256 << 20;

function checkHeartbeat(sent: unknown): void {
  // The wire's JSON, checked before it is trusted as a Heartbeat.
  const hb = sent as Partial<Heartbeat> | null;
  if (
    typeof hb?.nodeID !== 'string' ||
    !hb.nodeID ||
    typeof hb.address !== 'string' ||
    !(hb.view || typeof hb.seen?.lastSeen === 'number' || typeof hb.seen?.lastSeen === 'string') ||
    (hb.sandboxes !== undefined && !Array.isArray(hb.sandboxes)) ||
    !Array.isArray(hb.events)
  )
    throw new CubeError('BAD_REQUEST', 'heartbeat needs nodeID, address, view or seen.lastSeen, and events[] (sandboxes[] when listed)');
  if (hb.view && hb.view.nodeID !== hb.nodeID) throw new CubeError('BAD_REQUEST', `heartbeat from ${hb.nodeID} carries the view of ${hb.view.nodeID}`);
}

export function clusterRpcHandler(
  cp: { heartbeats(hbs: Heartbeat[]): Promise<HeartbeatAnswer> },
  secret: string,
  log?: ErrorLog,
  relay?: LayerRelay,
): (req: IncomingMessage, res: ServerResponse) => void {
  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    if (!secretMatches(req.headers.authorization, secret))
      throw new CubeError('UNAUTHORIZED', 'cluster traffic needs the cluster secret (CUBE_CLUSTER_SECRET)');
    const path = (req.url ?? '/').split('?', 1)[0];
    if (relay && req.method === 'POST' && (path === CLUSTER_TEMPLATE_PATH || path === CLUSTER_LAYER_PATH || path === CLUSTER_IMAGE_PATH)) {
      const body = await readJson<{ name?: unknown; digest?: unknown; nodeID?: unknown; lease?: unknown; holder?: unknown }>(req, 64 << 10);
      const from = typeof body.nodeID === 'string' ? body.nodeID : undefined;
      if (path === CLUSTER_TEMPLATE_PATH) {
        if (typeof body.name !== 'string' || !body.name) throw new CubeError('BAD_REQUEST', 'name is required');
        return sendJson(res, 200, await relay.template(body.name, from));
      }
      if (typeof body.digest !== 'string' || !/^sha256:[0-9a-f]{64}$/.test(body.digest)) throw new CubeError('BAD_REQUEST', 'digest must be sha256:<64 hex>');
      if (path === CLUSTER_LAYER_PATH) return relay.layer(body.digest, from, res, typeof body.holder === 'string' ? body.holder : undefined);
      if (!from) throw new CubeError('BAD_REQUEST', 'nodeID is required');
      if (body.lease !== undefined && body.lease !== 'renew' && body.lease !== 'release') throw new CubeError('BAD_REQUEST', "lease is 'renew' or 'release'");
      return sendJson(res, 200, await relay.image(body.digest, from, body.lease));
    }
    if (path !== HEARTBEAT_PATH || req.method !== 'POST') throw new CubeError('NOT_FOUND', `no cluster route ${req.method} ${path}`);
    // One node's heartbeat, or a batch from a process standing for many nodes.
    const body = await readJson<Heartbeat | HeartbeatBatch | null>(req, MAX_HEARTBEAT);
    const sent = body && 'heartbeats' in body && Array.isArray(body.heartbeats) ? body.heartbeats : [body as Heartbeat];
    if (sent.length === 0) throw new CubeError('BAD_REQUEST', 'heartbeat batch is empty');
    sent.forEach(checkHeartbeat);
    const hbs = sent.map(heartbeatWithEpochTimes);
    sendJson(res, 200, await cp.heartbeats(hbs));
  };
  return (req, res) => {
    handle(req, res).catch((e: unknown) => sendError(res, e, 'admin', log));
  };
}
