// What a control replica serves to compute nodes (not to API clients): heartbeats, behind the
// cluster secret rather than an API key.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { HEARTBEAT_PATH, secretMatches, type Heartbeat } from '../cubelet/rpc-wire.js';
import { CubeError } from '../errors.js';
import { readJson, sendError, sendJson } from './http.js';

export const CLUSTER_PREFIX = '/cluster/v1/';

const MAX_HEARTBEAT = 64 << 20;

export function clusterRpcHandler(cp: { heartbeat(hb: Heartbeat): Promise<void> }, secret: string): (req: IncomingMessage, res: ServerResponse) => void {
  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    if (!secretMatches(req.headers.authorization, secret)) throw new CubeError('UNAUTHORIZED', 'cluster traffic needs the cluster secret (CUBE_CLUSTER_SECRET)');
    const path = (req.url ?? '/').split('?', 1)[0];
    if (path !== HEARTBEAT_PATH || req.method !== 'POST') throw new CubeError('NOT_FOUND', `no cluster route ${req.method} ${path}`);
    const hb = await readJson<Heartbeat>(req, MAX_HEARTBEAT);
    if (typeof hb?.nodeID !== 'string' || !hb.nodeID || typeof hb.address !== 'string' || !hb.view || !Array.isArray(hb.sandboxes) || !Array.isArray(hb.events)) throw new CubeError('BAD_REQUEST', 'heartbeat needs nodeID, address, view, sandboxes[] and events[]');
    if (hb.view.nodeID !== hb.nodeID) throw new CubeError('BAD_REQUEST', `heartbeat from ${hb.nodeID} carries the view of ${hb.view.nodeID}`);
    await cp.heartbeat(hb);
    sendJson(res, 200, { ok: true });
  };
  return (req, res) => {
    handle(req, res).catch((e: unknown) => sendError(res, e, 'admin'));
  };
}
