// The UDP socket of api.dns: each datagram goes through the per-source rate cap, then answerQuery.
// UDP only: every answer fits in 512 bytes (at most 4 addresses; a reply that would not, from a
// name near 255 bytes, goes out truncated), so there is nothing for TCP to carry.
import { createSocket, type Socket } from 'node:dgram';
import type { AddressInfo } from 'node:net';
import { isIPv6 } from 'node:net';
import type { Logger } from 'pino';
import { RateLimiter } from '../rate-limit.js';
import { answerQuery, type Outcome, type Zone } from './answer.js';

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

/** Binds the socket; rejects with one line naming the address when it cannot (a taken port above all). */
export async function listenDns(o: DnsListenerOptions): Promise<DnsListener> {
  const socket: Socket = createSocket({ type: isIPv6(o.host) ? 'udp6' : 'udp4' });
  const counts = new Map<Outcome, number>();
  const limiter = new RateLimiter(o.rate);
  const count = (outcome: Outcome) => counts.set(outcome, (counts.get(outcome) ?? 0) + 1);
  await new Promise<void>((resolve, reject) => {
    socket.once('error', (e: NodeJS.ErrnoException) => {
      socket.close();
      const at = `${o.host.includes(':') ? `[${o.host}]` : o.host}:${o.port}`;
      const why = e.code === 'EADDRINUSE' ? 'the port is taken (another DNS server?): choose another or stop it' : e.message;
      reject(new Error(`api.dns.listen ${at}: ${why}`));
    });
    socket.bind(o.port, o.host, () => {
      socket.removeAllListeners('error');
      resolve();
    });
  });
  // A send to a vanished client (ICMP unreachable) must not end the listener.
  socket.on('error', (err) => o.log.warn({ err }, 'DNS socket error'));
  socket.on('message', (msg, from) => {
    // Over the cap: no answer at all, so a spoofed source gets nothing reflected at it.
    if (limiter.take(from.address) > 0) return count('dropped');
    const { outcome, reply } = answerQuery(msg, o.zone());
    count(outcome);
    if (reply) socket.send(reply, from.port, from.address);
  });
  return {
    address: socket.address(),
    counts,
    close: () => new Promise<void>((resolve) => socket.close(() => resolve())),
  };
}
