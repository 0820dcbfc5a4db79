// A stand-in for "the internet" in egress tests: a network namespace cube-wan-<hex> joined to
// the host by a veth pair (host end cubew<hex>), with an address of TEST-NET-2 (198.51.100.0/24,
// documentation-only, routed nowhere) and a TCP server that answers with the address it saw
// the client come from. Sandbox traffic reaches it through the host's forwarding and NAT, as
// it would reach a real server behind the default route. stop() removes every object; the
// netns name carries the creating pid so that a killed worker's host is swept (sweepStaleWanHosts).
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readdirSync } from 'node:fs';
import { execa, type ResultPromise } from 'execa';
import { alive } from './kernel.js';

export interface WanHost {
  /** The server's address and port. */
  ip: string;
  port: number;
  /** The host's address on the link: a sandbox's NATed connection arrives from it. */
  hostIp: string;
  stop(): Promise<void>;
}

const PORT = 8080;

async function ip(args: string[]): Promise<void> {
  await execa('ip', args);
}

/** Removes wan hosts whose creating process is gone (their veth goes with the netns). */
export function sweepStaleWanHosts(): void {
  let names: string[] = [];
  try {
    names = readdirSync('/run/netns');
  } catch {
    return;
  }
  for (const name of names) {
    const pid = Number(/^cube-wan-(\d+)-[0-9a-f]+$/.exec(name)?.[1] ?? 0);
    if (pid > 0 && !alive(pid)) execFileSync('ip', ['netns', 'del', name], { stdio: 'ignore' });
  }
}

export async function startWanHost(): Promise<WanHost> {
  sweepStaleWanHosts();
  const hex = randomBytes(2).toString('hex');
  const netns = `cube-wan-${process.pid}-${hex}`;
  const link = `cubew${hex}`;
  // A /30 of the range no other test holds right now (a route for it would exist).
  const routes = (await execa('ip', ['-4', 'route', 'show', '198.51.100.0/24', 'root', '198.51.100.0/24'])).stdout;
  const free = Array.from({ length: 64 }, (_, i) => i).filter((i) => !routes.includes(`198.51.100.${i * 4}/30`));
  if (free.length === 0) throw new Error('startWanHost: every /30 of 198.51.100.0/24 is in use');
  const base = free[Math.floor(Math.random() * free.length)]! * 4;
  const hostIp = `198.51.100.${base + 1}`;
  const serverIp = `198.51.100.${base + 2}`;
  let server: ResultPromise | undefined;
  const stop = async () => {
    server?.kill('SIGKILL');
    await server?.catch(() => undefined);
    await execa('ip', ['netns', 'del', netns], { reject: false });
    await execa('ip', ['link', 'del', link], { reject: false });
  };
  try {
    await ip(['netns', 'add', netns]);
    await ip(['link', 'add', link, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', netns]);
    await ip(['addr', 'add', `${hostIp}/30`, 'dev', link]);
    await ip(['link', 'set', link, 'up']);
    await ip(['-n', netns, 'addr', 'add', `${serverIp}/30`, 'dev', 'eth0']);
    await ip(['-n', netns, 'link', 'set', 'eth0', 'up']);
    await ip(['-n', netns, 'link', 'set', 'lo', 'up']);
    const code = `require('net').createServer((s) => { s.on('error', () => {}); s.end('from ' + s.remoteAddress + '\\n'); }).listen(${PORT}, '${serverIp}', () => console.log('listening'))`;
    server = execa('ip', ['netns', 'exec', netns, process.execPath, '-e', code], { reject: false, buffer: false });
    await new Promise<void>((resolve, reject) => {
      server!.stdout!.once('data', () => resolve());
      void server!.then((r) => reject(new Error(`wan server exited: ${r.stderr ?? ''}`)));
    });
    return { ip: serverIp, port: PORT, hostIp, stop };
  } catch (e) {
    await stop();
    throw e;
  }
}
