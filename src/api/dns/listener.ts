// The sockets of api.dns, UDP and TCP on the same address and port: each query goes through the
// per-source rate cap, then answerQuery. TCP carries what UDP cannot (a reply over 512 bytes,
// sent truncated over UDP: only for names near 255 bytes), each connection bounded in time and
// in how many are open, as a stub or forwarder uses it (one or a few queries, then close).
import { createSocket, type Socket } from 'node:dgram';
import { createServer, isIPv6, type AddressInfo, type Server, type Socket as TcpSocket } from 'node:net';
import type { Logger } from 'pino';
import { RateLimiter } from '../rate-limit.js';
import { answerQuery, type Outcome, type Zone } from './answer.js';

/** Open TCP connections at once; more are refused by the kernel's accept (node closes them). */
const MAX_TCP_CONNECTIONS = 64;
/** A TCP connection silent this long is closed (RFC 7766 suggests seconds, not minutes). */
const TCP_IDLE_MS = 10_000;

export interface DnsListener {
  address: AddressInfo;
  /** Queries since the start by outcome (`dropped` includes those over the rate cap). */
  counts: ReadonlyMap<Outcome, number>;
  close(): Promise<void>;
}

export interface DnsListenerOptions {
  host: string;
  port: number;
  /** Read per query, so a reload of the domain or the TTL applies at once. */
  zone: () => Zone;
  /** Queries per second per source address; 0 = unlimited. */
  rate: () => number;
  log: Logger;
}

/** Binds both sockets; rejects with one line naming the address when it cannot (a taken port above all). */
export async function listenDns(o: DnsListenerOptions): Promise<DnsListener> {
  const udp: Socket = createSocket({ type: isIPv6(o.host) ? 'udp6' : 'udp4' });
  const tcp: Server = createServer((conn) => serveTcp(conn));
  tcp.maxConnections = MAX_TCP_CONNECTIONS;
  const counts = new Map<Outcome, number>();
  const limiter = new RateLimiter(o.rate);
  const count = (outcome: Outcome) => counts.set(outcome, (counts.get(outcome) ?? 0) + 1);
  /** The reply to one message from `source` (undefined: none, and why is counted). */
  const answer = (msg: Buffer, source: string, maxReply?: number): Buffer | undefined => {
    // Over the cap: no answer at all, so a spoofed source gets nothing reflected at it.
    if (limiter.take(source) > 0) return void count('dropped');
    const { outcome, reply } = answerQuery(msg, o.zone(), maxReply);
    count(outcome);
    return reply;
  };
  // Each message is 2 bytes of length then the message (RFC 1035 4.2.2); no reply ends the connection.
  const connections = new Set<TcpSocket>();
  const serveTcp = (conn: TcpSocket) => {
    connections.add(conn);
    conn.once('close', () => connections.delete(conn));
    let pending = Buffer.alloc(0);
    conn.setTimeout(TCP_IDLE_MS, () => conn.destroy());
    conn.on('error', () => conn.destroy());
    conn.on('data', (chunk) => {
      pending = Buffer.concat([pending, chunk]);
      while (pending.length >= 2 && pending.length >= 2 + pending.readUInt16BE(0)) {
        const msg = pending.subarray(2, 2 + pending.readUInt16BE(0));
        pending = pending.subarray(2 + msg.length);
        const reply = answer(msg, conn.remoteAddress ?? '', 0xffff);
        if (!reply) return conn.destroy();
        const length = Buffer.alloc(2);
        length.writeUInt16BE(reply.length);
        conn.write(Buffer.concat([length, reply]));
      }
    });
  };
  const at = `${o.host.includes(':') ? `[${o.host}]` : o.host}:${o.port}`;
  const bound = (server: Socket | Server, bind: () => void) =>
    new Promise<void>((resolve, reject) => {
      server.once('error', (e: NodeJS.ErrnoException) => {
        const why = e.code === 'EADDRINUSE' ? 'the port is taken (another DNS server?): choose another or stop it' : e.message;
        reject(new Error(`api.dns.listen ${at}: ${why}`));
      });
      server.once('listening', () => {
        server.removeAllListeners('error');
        resolve();
      });
      bind();
    });
  try {
    await bound(udp, () => udp.bind(o.port, o.host));
    // The same port for TCP (port 0 picked one for UDP above).
    await bound(tcp, () => tcp.listen(udp.address().port, o.host));
  } catch (e) {
    udp.close();
    tcp.close();
    throw e;
  }
  // A send to a vanished client (ICMP unreachable) must not end the listener.
  udp.on('error', (err) => o.log.warn({ err }, 'DNS socket error'));
  tcp.on('error', (err) => o.log.warn({ err }, 'DNS TCP listener error'));
  udp.on('message', (msg, from) => {
    const reply = answer(msg, from.address);
    if (reply) udp.send(reply, from.port, from.address);
  });
  return {
    address: udp.address(),
    counts,
    close: async () => {
      await new Promise<void>((resolve) => udp.close(() => resolve()));
      await new Promise<void>((resolve) => {
        tcp.close(() => resolve());
        // An idle connection would hold the close for up to TCP_IDLE_MS.
        for (const c of connections) c.destroy();
      });
    },
  };
}
