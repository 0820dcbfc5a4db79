// The host ends of the guest agents' channels (virtio-serial sockets a.sock), one per running VM:
// opened on first use and again after a close, waited for at boot, and dropped when QEMU ends.
// A guest whose agent breaks the protocol is killed, and why is kept for its death reason.
import { join } from 'node:path';
import type { Logger } from 'pino';
import { CubeError } from '../../errors.js';
import { etcHosts } from '../../templates/store.js';
import type { SandboxHandle } from '../types.js';
import { AgentConnection, type AgentProtocolError, T, fields } from './protocol.js';
import { killPid } from './qemu.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** What the agents need of their VMs (the driver). */
export interface AgentVms {
  /** Its QEMU runs. */
  running(h: SandboxHandle): boolean;
  /** QEMU's pid now. */
  pidOf(h: SandboxHandle): number;
  /** The last lines the guest printed on its console (for errors). */
  consoleTail(h: SandboxHandle): string;
  log?: Logger;
}

export class GuestAgents {
  private readonly agents = new Map<string, Promise<AgentConnection>>();
  /** Sandboxes killed for breaking the agent protocol: why (their death reason). */
  readonly broken = new Map<string, string>();

  constructor(private readonly vm: AgentVms) {}

  /** Connects and pings the agent until it answers (the guest booted) or the deadline passes. */
  async wait(h: SandboxHandle, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    const conn = await AgentConnection.open(join(h.dir, 'a.sock'), (e) => this.broke(h, e));
    this.agents.set(h.sandboxID, Promise.resolve(conn));
    // The ping's own limit comes after the deadline, so a guest that stays silent reads as a boot timeout.
    const ping = conn.request(T.PING, Buffer.from('boot'), timeoutMs + 5000);
    ping.catch(() => undefined); // awaited below, with the boot deadline
    for (;;) {
      const done = await Promise.race([ping.then(() => true), sleep(100).then(() => false)]).catch((e: unknown) => {
        throw new CubeError('CREATE_FAILED', `guest of ${h.sandboxID}: ${(e as Error).message}; console: ${this.vm.consoleTail(h)}`);
      });
      if (done) return;
      if (!this.vm.running(h)) throw new CubeError('CREATE_FAILED', `QEMU of ${h.sandboxID} exited while the guest booted; console: ${this.vm.consoleTail(h)}`);
      if (Date.now() > deadline)
        throw new CubeError('GUEST_BOOT_TIMEOUT', `guest of ${h.sandboxID} did not come up within ${timeoutMs} ms; console: ${this.vm.consoleTail(h)}`);
    }
  }

  /**
   * Whether the agent answers a ping within `deadlineMs`, the connection included (one is opened
   * when none is: after a restart of the daemon). Never throws: an agent that cannot be reached
   * does not answer.
   */
  async answers(h: SandboxHandle, deadlineMs: number): Promise<boolean> {
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), deadlineMs)));
    const ping = this.get(h).then(
      (conn) => conn.request(T.PING, Buffer.from('live'), deadlineMs).then(() => true),
      () => false,
    );
    try {
      return await Promise.race([ping.catch(() => false), deadline]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** The guest takes the sandbox's identity (hostname, /etc/hosts naming it, the host's clock) in one round trip. */
  async identify(h: SandboxHandle): Promise<void> {
    const conn = await this.get(h);
    await conn.request(T.SETUP, fields(`hostname=${h.sandboxID}`, `hosts=${etcHosts(h.sandboxID)}`, `time=${Date.now()}`));
  }

  /**
   * The guest mounts virtio-fs device `tag` at `path` (loading the modules on the first). A mount
   * point the guest cannot make (a file there, a read-only place) is the caller's error (400).
   */
  async mount(h: SandboxHandle, tag: string, path: string): Promise<void> {
    const conn = await this.get(h);
    await conn.request(T.MOUNT, fields(tag, path)).catch((e: unknown) => {
      const message = (e as Error).message;
      if (message.startsWith(`${path}: `))
        throw new CubeError('BAD_REQUEST', `volumeMounts: the mount point ${path} cannot be made in this sandbox: ${message.slice(path.length + 2)}`);
      throw new CubeError('CREATE_FAILED', `volume at ${path}: the guest could not mount it: ${message}; console: ${this.vm.consoleTail(h)}`);
    });
  }

  get(h: SandboxHandle): Promise<AgentConnection> {
    const cur = this.agents.get(h.sandboxID);
    if (cur) {
      return cur.then((c) => {
        if (!c.closed) return c;
        this.agents.delete(h.sandboxID);
        return this.get(h);
      });
    }
    if (!this.vm.running(h)) return Promise.reject(new CubeError('NOT_FOUND', `sandbox ${h.sandboxID} is not running`));
    const p = AgentConnection.open(join(h.dir, 'a.sock'), (e) => this.broke(h, e));
    this.agents.set(h.sandboxID, p);
    p.catch(() => this.agents.delete(h.sandboxID));
    return p;
  }

  /**
   * A guest whose agent broke the protocol (its root replaced or subverted pid 1) is killed: what
   * it sends can no longer be matched to requests. The watch loop then marks the sandbox `error`
   * with this reason, which starts with 'agent-protocol' (the death's type).
   */
  private broke(h: SandboxHandle, e: AgentProtocolError): void {
    const reason = `${e.reason}: the guest agent broke the protocol (${e.message}); the microVM was killed`;
    this.broken.set(h.sandboxID, reason);
    this.vm.log?.warn({ sandboxID: h.sandboxID, reason }, 'guest agent broke the protocol: microVM killed');
    this.drop(h.sandboxID);
    killPid(this.vm.pidOf(h));
  }

  /** Closes the host side of the agent channel (its QEMU is ending or gone). */
  drop(id: string): void {
    const conn = this.agents.get(id);
    this.agents.delete(id);
    conn?.then(
      (c) => c.close(),
      () => undefined,
    );
  }
}
