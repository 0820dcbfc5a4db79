// /admin/v1/volumes (cubectl volume ls|create|get|rm): every key's volumes, as an admin key sees
// them on the E2B routes, with what an operator asks more (size used, which sandboxes mount it).
// A volume made here belongs to the key named by `owner` (a user key's volumeMounts find it by
// name), else to the admin key that asks; `nodeID` puts it on that node.
import { z } from 'zod';
import { sendJson, sendNoContent } from '../../http.js';
import { isoTime } from '../../model/time.js';
import type { VolumeRecord } from '../../model/volume.js';
import type { ApiContext, Caller, Handler } from '../context.js';
import type { VolumeView } from '../types.js';
import { body } from './body.js';

type On = (method: 'GET' | 'POST' | 'PATCH' | 'DELETE', path: string, h: Handler) => void;

const CreateBody = z
  .object({ name: z.string(), sizeGiB: z.number().positive().optional(), owner: z.string().min(1).optional(), nodeID: z.string().min(1).optional() })
  .strict();

export function volumeWire(v: VolumeRecord, extra: Partial<Pick<VolumeView, 'usedBytes' | 'mountedBy' | 'token'>> = {}): VolumeView {
  const { token: _t, ...view } = v;
  return { ...view, createdAt: isoTime(v.createdAt), ...extra };
}

export function registerVolumeAdminRoutes(on: On, ctx: ApiContext): void {
  const { volumes } = ctx.cp;
  const admin = (req: { caller?: Caller }) => ({ ...(req.caller?.keyID !== undefined ? { keyID: req.caller.keyID } : {}), role: 'admin' });

  on('GET', '/volumes', async (req, res) =>
    sendJson(
      res,
      200,
      (await volumes.list(admin(req))).map((v) => volumeWire(v)),
    ),
  );

  on('POST', '/volumes', async (req, res) => {
    const b = await body(req, CreateBody);
    const caller = b.owner !== undefined ? { keyID: b.owner, role: 'admin' } : admin(req);
    const where = { ...(b.sizeGiB !== undefined ? { sizeGiB: b.sizeGiB } : {}), ...(b.nodeID !== undefined ? { nodeID: b.nodeID } : {}) };
    sendJson(res, 201, volumeWire(await volumes.create(b.name, caller, where)));
  });

  on('GET', '/volumes/:ref', async (req, res, p) => {
    const v = await volumes.get(p.ref!, admin(req));
    const used = await volumes
      .content(v.volumeID, v.token)
      .then(({ host }) => host.usedBytes(v.volumeID))
      .catch(() => undefined); // its node down or remote: the record alone
    const mountedBy = (await ctx.cp.listSandboxes())
      .filter((s) => s.state !== 'gone' && s.volumes?.some((m) => m.volumeID === v.volumeID))
      .map((s) => s.sandboxID);
    sendJson(res, 200, volumeWire(v, { ...(used !== undefined ? { usedBytes: used } : {}), mountedBy, token: v.token }));
  });

  on('DELETE', '/volumes/:ref', async (req, res, p) => {
    await volumes.remove(p.ref!, admin(req));
    sendNoContent(res);
  });
}
