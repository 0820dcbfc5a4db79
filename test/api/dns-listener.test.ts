// api.dns's sockets (src/api/dns/listener.ts) on a loopback port: answers, what it leaves
// unanswered, the per-source cap, counts by outcome, and TCP for what UDP truncates.
import { createSocket, type Socket } from 'node:dgram';
import { connect } from 'node:net';
import * as dns from 'dns-packet';
import pino from 'pino';
import { afterEach, expect, it } from 'vitest';
import { listenDns, type DnsListener } from '../../src/api/dns/listener.js';

const ZONE = { domain: 'sbx.test', v4: ['127.0.0.9'], v6: [], ttlSec: 5 };
const query = (id: number, name = '8000-abc.sbx.test') => dns.encode({ type: 'query', id, questions: [{ name, type: 'A' }] });

let listener: DnsListener | undefined;
let client: Socket | undefined;
afterEach(async () => {
  client?.close();
  await listener?.close();
  client = listener = undefined;
});

/** Sends each packet, then collects what comes back until `quietMs` pass with nothing new. */
async function exchange(port: number, packets: Buffer[], quietMs = 500): Promise<Buffer[]> {
  const c = (client = createSocket('udp4'));
  const replies: Buffer[] = [];
  await new Promise<void>((r) => c.bind(0, '127.0.0.1', r));
  return new Promise((resolve) => {
    let timer = setTimeout(() => resolve(replies), quietMs);
    c.on('message', (m) => {
      replies.push(m);
      clearTimeout(timer);
      timer = setTimeout(() => resolve(replies), quietMs);
    });
    for (const p of packets) c.send(p, port, '127.0.0.1');
  });
}

const start = (rate: number, zone = ZONE) => listenDns({ host: '127.0.0.1', port: 0, zone: () => zone, rate: () => rate, log: pino({ level: 'silent' }) });

it('answers queries, a bare FORMERR to garbage, nothing to a response; counts each outcome', async () => {
  listener = await start(0);
  const response = dns.encode({ type: 'response', id: 3, questions: [{ name: 'sbx.test', type: 'A' }] });
  const replies = await exchange(listener.address.port, [query(1), Buffer.from('\x00\x02\x01\x00\x00\x01garbage'), response, query(4, 'example.com')]);
  const byId = new Map(replies.map((r) => [r.readUInt16BE(0), dns.decode(r) as unknown as { rcode: string; answers: { data: string }[] }]));
  expect([...byId.keys()].sort()).toEqual([1, 2, 4]);
  expect(byId.get(1)).toMatchObject({ rcode: 'NOERROR', answers: [{ data: '127.0.0.9' }] });
  expect(byId.get(2)!.rcode).toBe('FORMERR');
  expect(byId.get(4)!.rcode).toBe('REFUSED');
  expect(Object.fromEntries(listener.counts)).toEqual({ NOERROR: 1, FORMERR: 1, dropped: 1, REFUSED: 1 });
});

it('over queries_per_sec_per_source: the rest are dropped unanswered and counted', async () => {
  listener = await start(1);
  const replies = await exchange(
    listener.address.port,
    Array.from({ length: 20 }, (_, i) => query(i)),
  );
  // A burst of one a second: the first is answered; 20 sent at once cannot all refill.
  expect(replies.length).toBeGreaterThanOrEqual(1);
  expect(replies.length).toBeLessThan(20);
  expect(listener.counts.get('NOERROR')).toBe(replies.length);
  expect(listener.counts.get('dropped')).toBe(20 - replies.length);
});

it('a taken port rejects with one line naming the address; close frees the port', async () => {
  listener = await start(0);
  const { port } = listener.address;
  await expect(listenDns({ host: '127.0.0.1', port, zone: () => ZONE, rate: () => 0, log: pino({ level: 'silent' }) })).rejects.toThrow(
    `api.dns.listen 127.0.0.1:${port}: the port is taken (another DNS server?): choose another or stop it`,
  );
  await listener.close();
  listener = await listenDns({ host: '127.0.0.1', port, zone: () => ZONE, rate: () => 0, log: pino({ level: 'silent' }) });
  expect(listener.address.port).toBe(port);
});

it('a reply UDP truncates comes whole over TCP (two queries on one connection, length-prefixed)', async () => {
  const domain = `${'a'.repeat(63)}.${'b'.repeat(63)}.${'c'.repeat(63)}.sbx.test`;
  listener = await start(0, { ...ZONE, domain, v4: ['10.0.0.1', '10.0.0.2', '10.0.0.3', '10.0.0.4'] });
  const { port } = listener.address;
  const name = `8000-abc.${domain}`;
  const [udp] = await exchange(port, [query(1, name)]);
  expect(dns.decode(udp!)).toMatchObject({ flag_tc: true, answers: [] });
  const framed = Buffer.concat([dns.streamEncode(dns.decode(query(2, name))), dns.streamEncode(dns.decode(query(3, 'sbx.test')))]);
  const got = await new Promise<Buffer>((resolve, reject) => {
    const chunks: Buffer[] = [];
    const c = connect(port, '127.0.0.1', () => c.end(framed));
    c.on('data', (d) => chunks.push(d))
      .on('end', () => resolve(Buffer.concat(chunks)))
      .on('error', reject);
  });
  const first = dns.decode(got.subarray(2, 2 + got.readUInt16BE(0))) as unknown as { id: number; flag_tc: boolean; answers: { data: string }[] };
  expect(first.id).toBe(2);
  expect(first.flag_tc).toBe(false);
  expect(first.answers.map((a) => a.data)).toEqual(['10.0.0.1', '10.0.0.2', '10.0.0.3', '10.0.0.4']);
  const rest = got.subarray(2 + got.readUInt16BE(0));
  expect(dns.decode(rest.subarray(2))).toMatchObject({ id: 3, rcode: 'REFUSED' });
});
