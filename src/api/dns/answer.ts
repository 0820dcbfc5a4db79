// cubed's DNS answers for api.sandbox_domain (api.dns): `<domain>` and `<port>-<sandboxID>.<domain>`
// resolve to this process's port proxy, so sandbox.getHost(port) works without an operator's
// wildcard record. Authoritative for that one zone and nothing else: not a resolver (no recursion,
// other names REFUSED), ANY and zone transfers refused, UDP replies never longer than 512 bytes (no
// EDNS), malformed queries answered with a bare FORMERR header. Pure: bytes in, bytes out.
import { isIPv4, isIPv6 } from 'node:net';
import * as dns from 'dns-packet';
import { parseSandboxHost } from '../envd/target.js';

export interface Zone {
  /** api.sandbox_domain; empty answers nothing (every query REFUSED). */
  domain: string;
  /** What A and AAAA queries get. */
  v4: readonly string[];
  v6: readonly string[];
  ttlSec: number;
}

/** What became of a query: its reply's rcode, or `dropped` (no reply: not a query, or under 12 bytes). */
export type Outcome = 'NOERROR' | 'NXDOMAIN' | 'REFUSED' | 'FORMERR' | 'NOTIMP' | 'dropped';
export const OUTCOMES: readonly Outcome[] = ['NOERROR', 'NXDOMAIN', 'REFUSED', 'FORMERR', 'NOTIMP', 'dropped'];
const RCODE: Record<Exclude<Outcome, 'dropped'>, number> = { NOERROR: 0, FORMERR: 1, NXDOMAIN: 3, NOTIMP: 4, REFUSED: 5 };

/** RFC 1035's UDP limit: without EDNS a UDP reply never exceeds it (longer ones go out truncated, TC set: the client asks again over TCP). */
export const MAX_REPLY = 512;
/** Types no authoritative-only server should answer: ANY (amplification), zone transfers, the obsolete mail meta types. */
const REFUSED_TYPES = new Set(['ANY', 'AXFR', 'IXFR', 'MAILA', 'MAILB', 'UNKNOWN_253', 'UNKNOWN_254']);
/** Letters, digits, `-` and `_` labels: anything else (a dot or a colon inside a label, bytes that are not ASCII) is no name of ours. */
const HOSTNAME = /^[a-z0-9_-]{1,63}(\.[a-z0-9_-]{1,63})*$/;

/** The addresses of a zone: api.dns.answer, else the API's own listen address when it is a concrete IP (undefined: none). */
export function zoneAddresses(answer: readonly string[], apiHost: string): { v4: string[]; v6: string[] } | undefined {
  const all = answer.length > 0 ? answer : isIPv4(apiHost) || isIPv6(apiHost) ? [apiHost] : [];
  const concrete = all.filter((a) => a !== '0.0.0.0' && a !== '::');
  if (concrete.length === 0) return undefined;
  return { v4: concrete.filter((a) => isIPv4(a)), v6: concrete.filter((a) => isIPv6(a)) };
}

/** The reply to one DNS message (undefined: none is sent) and its outcome; `maxReply`: 512 for UDP, 65535 over TCP. Never throws. */
export function answerQuery(query: Buffer, zone: Zone, maxReply = MAX_REPLY): { outcome: Outcome; reply?: Buffer } {
  if (query.length < 12) return { outcome: 'dropped' };
  const id = query.readUInt16BE(0);
  const flags = query.readUInt16BE(2);
  // A response is never answered: two servers must not be able to loop on each other.
  if (flags & 0x8000) return { outcome: 'dropped' };
  // The query's opcode and RD bit go back as they came (RFC 1035 4.1.1); RA stays clear: no recursion here.
  const base = (flags & 0x7800) | (flags & dns.RECURSION_DESIRED);
  const bare = (outcome: 'FORMERR' | 'NOTIMP') => ({ outcome, reply: dns.encode({ type: 'response', id, flags: base | RCODE[outcome] }) });
  if ((flags >> 11) & 0xf) return bare('NOTIMP');
  if (query.readUInt16BE(4) !== 1) return bare('FORMERR');
  let question: dns.Question;
  try {
    // Only the question is read: the other sections (EDNS's OPT, say) change nothing here, and a
    // header announcing 65535 of each made the decoder allocate for them (20 000 random packets took
    // 3.8 s, 0.19 ms each, against 0.63 s with the counts zeroed first, in test/api/dns-answer.test.ts).
    const header = Buffer.from(query.subarray(0, 12));
    header.fill(0, 6);
    question = dns.decode(Buffer.concat([header, query.subarray(12)])).questions![0]!;
    // The question must encode back to the bytes that came (no compression pointer, no dot inside a
    // label, valid UTF-8, a known class): the reply repeats it, and a resolver drops a reply whose question differs.
    const again = dns.encode({ type: 'query', id, flags, questions: [question] });
    if (!again.subarray(12).equals(query.subarray(12, again.length))) return bare('FORMERR');
  } catch {
    return bare('FORMERR');
  }
  const reply = (outcome: Exclude<Outcome, 'dropped' | 'FORMERR' | 'NOTIMP'>, answers: dns.Answer[] = [], authorities: dns.Answer[] = []) => {
    const head = { type: 'response' as const, id, questions: [question] };
    const aa = outcome === 'REFUSED' ? 0 : dns.AUTHORITATIVE_ANSWER;
    const full = dns.encode({ ...head, flags: base | aa | RCODE[outcome], answers, authorities });
    if (full.length <= maxReply) return { outcome, reply: full };
    return { outcome, reply: dns.encode({ ...head, flags: base | aa | dns.TRUNCATED_RESPONSE | RCODE[outcome] }) };
  };
  const domain = zone.domain.toLowerCase().replace(/\.$/, '');
  const name = question.name.toLowerCase();
  if (question.class !== 'IN' || !domain || (name !== domain && !name.endsWith(`.${domain}`)) || REFUSED_TYPES.has(question.type)) return reply('REFUSED');
  const soa: dns.Answer = {
    type: 'SOA',
    name: domain,
    ttl: zone.ttlSec,
    data: { mname: `ns.${domain}`, rname: `hostmaster.${domain}`, serial: 1, refresh: 3600, retry: 600, expire: 86400, minimum: zone.ttlSec },
  };
  // Existence is not looked up: a store read per query would make DNS a sandbox-id oracle for
  // anyone who can reach it, and the proxy answers an unknown id with 502 anyway.
  if (name !== domain && !(HOSTNAME.test(name) && parseSandboxHost(name, domain))) return reply('NXDOMAIN', [], [soa]);
  const at = (type: 'A' | 'AAAA', list: readonly string[]): dns.Answer[] => list.map((data) => ({ type, name: question.name, ttl: zone.ttlSec, data }));
  if (question.type === 'A' && zone.v4.length) return reply('NOERROR', at('A', zone.v4));
  if (question.type === 'AAAA' && zone.v6.length) return reply('NOERROR', at('AAAA', zone.v6));
  if (question.type === 'SOA' && name === domain) return reply('NOERROR', [soa]);
  // The name exists, this type does not (NODATA): the SOA lets resolvers cache that for the TTL.
  return reply('NOERROR', [], [soa]);
}
