// api.dns's answers (src/api/dns/answer.ts), table by table: the names it owns, the types, case,
// what it refuses, and packets no resolver sends.
import * as dns from 'dns-packet';
import { describe, expect, it } from 'vitest';
import { answerQuery, MAX_REPLY, zoneAddresses, type Zone } from '../../src/api/dns/answer.js';

const ZONE: Zone = { domain: 'sbx.example', v4: ['10.0.0.7'], v6: [], ttlSec: 5 };
const HOST = '8000-i0123456789abcdefghij.sbx.example';

type Record = { type: string; name: string; ttl: number; data: unknown };
/** What the tests read of a decoded reply (dns-packet's typings leave the header flags out). */
interface Reply {
  id: number;
  rcode: string;
  flag_qr: boolean;
  flag_aa: boolean;
  flag_rd: boolean;
  flag_ra: boolean;
  flag_tc: boolean;
  questions: dns.Question[];
  answers: Record[];
  authorities: Record[];
  additionals: Record[];
}
const decode = (b: Buffer) => dns.decode(b) as unknown as Reply;
const query = (name: string, type = 'A', extra: Partial<dns.Packet> = {}) =>
  dns.encode({ type: 'query', id: 4242, flags: dns.RECURSION_DESIRED, questions: [{ name, type: type as dns.RecordType, class: 'IN' }], ...extra });
const ask = (q: Buffer, zone = ZONE) => {
  const { outcome, reply } = answerQuery(q, zone);
  return { outcome, reply, packet: reply && decode(reply) };
};

describe('answerQuery: names and types', () => {
  it.each([
    // name, type, rcode, answers
    [HOST, 'A', 'NOERROR', ['10.0.0.7']],
    ['sbx.example', 'A', 'NOERROR', ['10.0.0.7']],
    ['49983-abc.sbx.example', 'A', 'NOERROR', ['10.0.0.7']],
    ['8000-I0123456789ABCDEFGHIJ.SBX.Example', 'A', 'NOERROR', ['10.0.0.7']],
    [HOST, 'AAAA', 'NOERROR', []],
    [HOST, 'TXT', 'NOERROR', []],
    [HOST, 'MX', 'NOERROR', []],
    ['www.sbx.example', 'A', 'NXDOMAIN', []],
    ['a.8000-abc.sbx.example', 'A', 'NXDOMAIN', []],
    ['0-abc.sbx.example', 'A', 'NXDOMAIN', []],
    ['65536-abc.sbx.example', 'A', 'NXDOMAIN', []],
    ['8000-abc_d.sbx.example', 'A', 'NXDOMAIN', []],
    ['example.com', 'A', 'REFUSED', []],
    ['xsbx.example', 'A', 'REFUSED', []],
    ['sbx.example.evil', 'A', 'REFUSED', []],
    ['.', 'NS', 'REFUSED', []],
    [HOST, 'ANY', 'REFUSED', []],
    ['sbx.example', 'AXFR', 'REFUSED', []],
    ['sbx.example', 'IXFR', 'REFUSED', []],
  ] as const)('%s %s -> %s %j', (name, type, rcode, answers) => {
    const { outcome, packet } = ask(query(name, type));
    expect(outcome).toBe(rcode);
    expect(packet!.rcode).toBe(rcode);
    expect(packet!.id).toBe(4242);
    expect(packet!.flag_qr).toBe(true);
    expect(packet!.flag_ra).toBe(false);
    expect(packet!.flag_rd).toBe(true);
    expect(packet!.flag_aa).toBe(rcode !== 'REFUSED');
    // The question comes back as asked, case included (resolvers randomise it).
    expect(packet!.questions).toEqual([{ name, type, class: 'IN' }]);
    expect(packet!.answers.map((a) => a.data)).toEqual(answers);
    expect(packet!.answers.every((a) => a.ttl === 5 && a.name === name)).toBe(true);
    // Negative answers carry the SOA whose minimum is the TTL (RFC 2308); refusals carry nothing.
    const negative = rcode === 'NXDOMAIN' || (rcode === 'NOERROR' && answers.length === 0);
    expect(packet!.authorities.map((a) => [a.type, a.name])).toEqual(negative ? [['SOA', 'sbx.example']] : []);
  });

  it('AAAA with IPv6 addresses, several of each family, SOA at the apex, a trailing dot in the domain', () => {
    const zone = { domain: 'SBX.example.', v4: ['10.0.0.7', '10.0.0.8'], v6: ['fd00::7'], ttlSec: 30 };
    expect(ask(query(HOST, 'AAAA'), zone).packet!.answers).toEqual([{ name: HOST, type: 'AAAA', class: 'IN', ttl: 30, flush: false, data: 'fd00::7' }]);
    expect(ask(query(HOST, 'A'), zone).packet!.answers.map((a) => a.data)).toEqual(['10.0.0.7', '10.0.0.8']);
    const soa = ask(query('sbx.example', 'SOA'), zone).packet!.answers;
    expect(soa).toMatchObject([{ type: 'SOA', name: 'sbx.example', ttl: 30, data: { minimum: 30, mname: 'ns.sbx.example' } }]);
  });

  it('an empty domain answers nothing: REFUSED', () => {
    expect(ask(query(HOST), { ...ZONE, domain: '' }).outcome).toBe('REFUSED');
  });

  it('a class other than IN is refused', () => {
    const q = dns.encode({ type: 'query', id: 1, questions: [{ name: HOST, type: 'TXT', class: 'CH' }] });
    expect(ask(q).outcome).toBe('REFUSED');
  });

  it('a reply over 512 bytes goes out truncated (TC, no records), never longer', () => {
    const long = `8000-abc.${'a'.repeat(63)}.${'b'.repeat(63)}.${'c'.repeat(63)}.sbx.example`;
    const zone = { ...ZONE, domain: long.slice('8000-abc.'.length), v4: ['10.0.0.1', '10.0.0.2', '10.0.0.3', '10.0.0.4'] };
    const { outcome, reply, packet } = ask(query(long), zone);
    expect(outcome).toBe('NOERROR');
    expect(reply!.length).toBeLessThanOrEqual(MAX_REPLY);
    expect(packet!.flag_tc).toBe(true);
    expect(packet!.answers).toEqual([]);
  });
});

describe('answerQuery: hostile packets', () => {
  const header = (flags: number, qd = 1, an = 0) => {
    const b = Buffer.alloc(12);
    b.writeUInt16BE(7, 0);
    b.writeUInt16BE(flags, 2);
    b.writeUInt16BE(qd, 4);
    b.writeUInt16BE(an, 6);
    return b;
  };
  const good = query(HOST);
  it.each([
    ['empty', 'dropped', Buffer.alloc(0)],
    ['11 bytes', 'dropped', good.subarray(0, 11)],
    ['a response (QR set)', 'dropped', dns.encode({ type: 'response', id: 1, questions: [{ name: HOST, type: 'A' }] })],
    ['header only, one question announced', 'FORMERR', header(0)],
    ['no question', 'FORMERR', header(0, 0)],
    [
      'two questions',
      'FORMERR',
      dns.encode({
        type: 'query',
        id: 1,
        questions: [
          { name: HOST, type: 'A' },
          { name: 'sbx.example', type: 'A' },
        ],
      }),
    ],
    ['question cut short', 'FORMERR', good.subarray(0, good.length - 2)],
    ['65535 answers announced, none there (only the question is read)', 'NOERROR', Buffer.concat([header(0, 1, 65535), good.subarray(12)])],
    ['label running past the end', 'FORMERR', Buffer.concat([header(0), Buffer.from([63, 0x61, 0x62])])],
    ['compression pointer to itself', 'FORMERR', Buffer.concat([header(0), Buffer.from([0xc0, 12, 0, 1, 0, 1])])],
    ['pointer loop forward', 'FORMERR', Buffer.concat([header(0), Buffer.from([0xc0, 14, 0xc0, 12, 0, 1, 0, 1])])],
    ['reserved label type 0x40', 'FORMERR', Buffer.concat([header(0), Buffer.from([0x41, 0x61, 0, 0, 1, 0, 1])])],
    ['a dot inside a label', 'FORMERR', Buffer.concat([header(0), Buffer.from([3, 0x61, 0x2e, 0x62, 0, 0, 1, 0, 1])])],
    ['bytes that are not UTF-8', 'FORMERR', Buffer.concat([header(0), Buffer.from([2, 0xff, 0xfe, 0, 0, 1, 0, 1])])],
    ['an unknown class', 'FORMERR', Buffer.concat([header(0), Buffer.from([3, 0x73, 0x62, 0x78, 0, 0, 1, 0, 9])])],
    ['opcode NOTIFY', 'NOTIMP', Buffer.concat([header(4 << 11), good.subarray(12)])],
    ['opcode UPDATE', 'NOTIMP', Buffer.concat([header(5 << 11), good.subarray(12)])],
    ['random bytes', 'FORMERR', Buffer.from('5f3a00000001000000000000ffffffffffffffff', 'hex')],
  ])('%s -> %s', (_what, outcome, packet) => {
    const r = answerQuery(packet, ZONE);
    expect(r.outcome).toBe(outcome);
    if (outcome === 'dropped') return expect(r.reply).toBeUndefined();
    if (outcome === 'NOERROR') return expect(decode(r.reply!).answers).toHaveLength(1);
    // A bare header: nothing of the packet is reflected.
    expect(r.reply!.length).toBe(12);
    expect(decode(r.reply!)).toMatchObject({ id: packet.readUInt16BE(0), rcode: outcome, flag_qr: true, questions: [] });
  });

  it('a query with EDNS (OPT) is answered without it, within 512 bytes', () => {
    const q = query(HOST, 'A', {
      additionals: [{ type: 'OPT', name: '.', udpPayloadSize: 4096, extendedRcode: 0, ednsVersion: 0, flags: 0, flag_do: false, options: [] }],
    });
    const { outcome, packet } = ask(q);
    expect(outcome).toBe('NOERROR');
    expect(packet!.additionals).toEqual([]);
  });

  it('no reply is longer than its query by more than the answer records (no amplification)', () => {
    const q = query(HOST);
    expect(answerQuery(q, ZONE).reply!.length - q.length).toBe(HOST.length + 2 + 10 + 4);
  });

  it('never throws on 20000 random packets', () => {
    let seed = 1;
    const rand = () => (seed = (seed * 1103515245 + 12345) & 0x7fffffff) & 0xff;
    for (let i = 0; i < 20_000; i++) {
      const b = Buffer.from(Array.from({ length: 12 + (i % 64) }, rand));
      // Half of them with a plausible header, so the question decoder is reached.
      if (i % 2) (b.writeUInt16BE(0x0100, 2), b.writeUInt16BE(1, 4));
      const r = answerQuery(b, ZONE);
      if (r.reply) expect(r.reply.length).toBeLessThanOrEqual(MAX_REPLY);
    }
  });
});

describe('zoneAddresses', () => {
  it.each([
    [[], '127.0.0.1', { v4: ['127.0.0.1'], v6: [] }],
    [[], '::1', { v4: [], v6: ['::1'] }],
    [[], '0.0.0.0', undefined],
    [[], '::', undefined],
    [[], 'localhost', undefined],
    [['192.0.2.1', '2001:db8::1'], '0.0.0.0', { v4: ['192.0.2.1'], v6: ['2001:db8::1'] }],
    [['192.0.2.1'], '127.0.0.1', { v4: ['192.0.2.1'], v6: [] }],
    [['0.0.0.0'], '127.0.0.1', undefined],
  ])('answer %j, API on %s -> %j', (answer, host, expected) => {
    expect(zoneAddresses(answer, host)).toEqual(expected);
  });
});
