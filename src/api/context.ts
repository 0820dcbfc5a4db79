// What every route family receives. server.ts assembles it; e2b/, envd/ and admin/ only read it.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import type Router from 'find-my-way';
import type { MasterConfig } from '../config/schema.js';
import type { TemplateBuilder } from '../cubelet/template-build.js';
import type { TemplateStore } from '../runtime/templates.js';
import type { ClusterTemplates } from '../scheduler/cluster/cluster-templates.js';
import type { LayerRelay } from '../scheduler/cluster/layer-relay.js';
import type { ControlPlane } from '../scheduler/control-plane.js';

export interface ApiContext {
  cp: ControlPlane;
  log: Logger;
  /** The master config in force (follows hot reload). */
  config(): MasterConfig;
  /** The node's template store where this daemon holds one (role all on the ns runtime): import and rm. */
  templates?: TemplateStore;
  /** Template builds (the E2B build API), beside the template store on the ns runtime. */
  builds?: TemplateBuilder;
  /** Cluster control replicas: imports go on to a node, whose layers the others fetch (scheduler/cluster/layer-relay.ts). */
  relay?: LayerRelay;
  /** Cluster control replicas: builds handed to a compute node, template rm across the nodes (scheduler/cluster/cluster-templates.ts). */
  clusterTemplates?: ClusterTemplates;
}

/** Identity of an authenticated caller (API key id, never the key itself), for audit records. */
export interface Caller {
  keyID: string;
}

export type Handler = (req: IncomingMessage & { caller?: Caller }, res: ServerResponse, params: Record<string, string | undefined>, query: Record<string, string>) => Promise<void> | void;

export type ApiRouter = Router.Instance<Router.HTTPVersion.V1>;
