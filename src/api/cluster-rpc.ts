// What a control replica serves to compute nodes (not to API clients): heartbeats, behind the
// cluster secret rather than an API key.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { HEARTBEAT_PATH, secretMatches, type Heartbeat, type HeartbeatAnswer, type HeartbeatBatch } from '../cubelet/rpc-wire.js';
import { CubeError } from '../errors.js';
import { readJson, sendError, sendJson, type ErrorLog } from './http.js';

export const CLUSTER_PREFIX = '/cluster/v1/';

/** A batch from a process standing for 1000 simulated nodes runs to a few MB. */
const MAX_HEARTBEAT = 256 << 20;

function checkHeartbeat(hb: Heartbeat): void {
  if (typeof hb?.nodeID !== 'string' || !hb.nodeID || typeof hb.address !== 'string' || !hb.view || !Array.isArray(hb.sandboxes) || !Array.isArray(hb.events)) throw new CubeError('BAD_REQUEST', 'heartbeat needs nodeID, address, view, sandboxes[] and events[]');
  if (hb.view.nodeID !== hb.nodeID) throw new CubeError('BAD_REQUEST', `heartbeat from ${hb.nodeID} carries the view of ${hb.view.nodeID}`);
}

export function clusterRpcHandler(cp: { heartbeats(hbs: Heartbeat[]): Promise<HeartbeatAnswer> }, secret: string, log?: ErrorLog): (req: IncomingMessage, res: ServerResponse) => void {
  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    if (!secretMatches(req.headers.authorization, secret)) throw new CubeError('UNAUTHORIZED', 'cluster traffic needs the cluster secret (CUBE_CLUSTER_SECRET)');
    const path = (req.url ?? '/').split('?', 1)[0];
    if (path !== HEARTBEAT_PATH || req.method !== 'POST') throw new CubeError('NOT_FOUND', `no cluster route ${req.method} ${path}`);
    // One node's heartbeat, or a batch from a process standing for many nodes.
    const body = await readJson<Heartbeat | HeartbeatBatch>(req, MAX_HEARTBEAT);
    const hbs = body && 'heartbeats' in body && Array.isArray(body.heartbeats) ? body.heartbeats : [body as Heartbeat];
    if (hbs.length === 0) throw new CubeError('BAD_REQUEST', 'heartbeat batch is empty');
    hbs.forEach(checkHeartbeat);
    sendJson(res, 200, await cp.heartbeats(hbs));
  };
  return (req, res) => {
    handle(req, res).catch((e: unknown) => sendError(res, e, 'admin', log));
  };
}
