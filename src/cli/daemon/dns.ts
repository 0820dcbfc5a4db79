// The DNS listener of the roles that serve the API (all, control): off unless api.dns.listen is
// set, bound before anything else starts so a taken port fails the start at once, with one line.
import type { Logger } from 'pino';
import type { MasterConfig } from '../../config/schema.js';
import type { DnsListener } from '../../api/dns/listener.js';
import { parseListen, UsageError } from './setup.js';

/**
 * Starts api.dns (undefined when it is off). `apiHost` is the address the API listens on: the
 * default answer, the proxy of this very process (in a cluster, this control replica's).
 */
export async function startDns(master: () => MasterConfig, apiHost: string, log: Logger): Promise<DnsListener | undefined> {
  const { dns, sandbox_domain: domain } = master().api;
  if (!dns.listen) return undefined;
  let at: { host: string; port: number };
  try {
    at = parseListen(dns.listen);
  } catch {
    throw new UsageError(`api.dns.listen ${dns.listen}: expected ADDR:PORT such as 127.0.0.1:5354`);
  }
  if (!domain) throw new UsageError('api.dns.listen is set but api.sandbox_domain (--sandbox-domain) is empty: there is no name to answer');
  const [{ zoneAddresses }, { listenDns }] = await Promise.all([import('../../api/dns/answer.js'), import('../../api/dns/listener.js')]);
  const addresses = zoneAddresses(dns.answer, apiHost);
  if (!addresses)
    throw new UsageError(`api.dns.answer is empty and the API listens on ${apiHost}, which is no address a client can be sent to: set api.dns.answer`);
  const listener = await listenDns({
    ...at,
    zone: () => {
      const m = master().api;
      return { domain: m.sandbox_domain, ...addresses, ttlSec: m.dns.ttl_sec };
    },
    rate: () => master().api.dns.queries_per_sec_per_source,
    log: log.child({ component: 'dns' }),
  });
  log.info({ listen: listener.address, domain, ...addresses }, `answering DNS for ${domain} and *.${domain}`);
  return listener;
}
