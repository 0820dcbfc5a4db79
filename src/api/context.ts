// What every route family receives. server.ts assembles it; e2b/, envd/ and admin/ only read it.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import type Router from 'find-my-way';
import type { MasterConfig } from '../config/schema.js';
import type { TemplateBuilder } from '../templates/build/build.js';
import type { TemplateStore } from '../templates/store.js';
import type { ClusterTemplates } from '../templates/cluster.js';
import type { LayerRelay } from '../templates/relay.js';
import type { ControlPlane } from '../control/control-plane.js';
import type { KeyRole } from '../model/api-key.js';

export interface ApiContext {
  cp: ControlPlane;
  log: Logger;
  /** The master config in force (follows hot reload). */
  config(): MasterConfig;
  /** The node's template store where this daemon holds one (role all on the ns runtime): import and rm. */
  templates?: TemplateStore;
  /** The registries this node pulls from without TLS checks (cubelet.toml [registry] insecure), where it keeps a template store. */
  registryInsecure?: () => readonly string[];
  /** Template builds (the E2B build API), beside the template store on the ns runtime. */
  builds?: TemplateBuilder;
  /** Cluster control replicas: imports go on to a node, whose layers the others fetch (templates/relay.ts). */
  relay?: LayerRelay;
  /** Cluster control replicas: builds handed to a compute node, template rm across the nodes (templates/cluster.ts). */
  clusterTemplates?: ClusterTemplates;
}

/** Identity of an authenticated caller (API key id, never the key itself), for audit records and role checks. */
export interface Caller {
  keyID: string;
  name: string;
  role: KeyRole;
}

export type Handler = (
  req: IncomingMessage & { caller?: Caller },
  res: ServerResponse,
  params: Record<string, string | undefined>,
  query: Record<string, string>,
) => Promise<void> | void;

export type ApiRouter = Router.Instance<Router.HTTPVersion.V1>;
