// Which sandbox and which port a request is for: the E2b-Sandbox-Id/E2b-Sandbox-Port headers
// (E2B_SANDBOX_URL set), X-Access-Token alone (SDKs 2.7-2.14 on /files), or a Host of
// `<port>-<sandboxID>.<domain>` (sandbox.getHost(port) with wildcard DNS). Pure.
import type { IncomingHttpHeaders } from 'node:http';

export const ENVD_PORT = 49983;

export type Target = { by: 'id'; sandboxID: string; port: number; token?: string } | { by: 'token'; token: string; port: number };

const first = (v: string | string[] | undefined): string | undefined => (Array.isArray(v) ? v[0] : v);

/** `<port>-<sandboxID>.<domain>[:listenport]` → port and id, when the Host is under `domain`. */
export function parseSandboxHost(host: string | undefined, domain: string): { port: number; sandboxID: string } | undefined {
  if (!host || !domain) return undefined;
  const name = host.replace(/:\d+$/, '').toLowerCase();
  const suffix = `.${domain.toLowerCase()}`;
  if (!name.endsWith(suffix)) return undefined;
  const m = /^(\d{1,5})-([a-z0-9]+)$/.exec(name.slice(0, -suffix.length));
  if (!m) return undefined;
  const port = Number(m[1]);
  if (port < 1 || port > 65535) return undefined;
  return { port, sandboxID: m[2]! };
}

function parsePort(v: string | undefined): number | undefined {
  if (v === undefined || v === '') return undefined;
  const n = Number(v);
  return Number.isInteger(n) && n >= 1 && n <= 65535 ? n : Number.NaN;
}

/**
 * The target of a request, or undefined when it is not sandbox traffic. A port of NaN means
 * the E2b-Sandbox-Port header was present but invalid (answered with 400 by the caller).
 * Legacy ids of the form `<id>-<clientID>` are accepted.
 */
export function targetOf(headers: IncomingHttpHeaders, domain: string): Target | undefined {
  const token = first(headers['x-access-token']);
  const id = first(headers['e2b-sandbox-id']);
  if (id) {
    const port = parsePort(first(headers['e2b-sandbox-port'])) ?? ENVD_PORT;
    return { by: 'id', sandboxID: id.split('-')[0]!.toLowerCase(), port, ...(token ? { token } : {}) };
  }
  const host = parseSandboxHost(first(headers.host), domain);
  if (host) return { by: 'id', sandboxID: host.sandboxID, port: host.port, ...(token ? { token } : {}) };
  if (token) return { by: 'token', token, port: parsePort(first(headers['e2b-sandbox-port'])) ?? ENVD_PORT };
  return undefined;
}
