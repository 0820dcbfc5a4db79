// The host end of the guest agent's channel against a hostile guest (issue 29 item 2): root in a
// guest can replace the agent and send anything on its port. No VM here: a unix socket stands for
// QEMU's end of the virtio-serial port, and the test plays the guest.
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentConnection, AgentProtocolError, FrameDecoder, MAX_GUEST_FRAME, T, agentActsAsUser, encodeFrame } from '../../src/runtime/microvm/protocol.js';

/** A frame header alone: `len` announced, nothing after it. */
function header(len: number, type: number = T.STDOUT, chan = 1): Buffer {
  const h = Buffer.alloc(9);
  h.writeUInt32LE(len, 0);
  h[4] = type;
  h.writeUInt32LE(chan, 5);
  return h;
}

describe('FrameDecoder against hostile frames', () => {
  it('refuses a header claiming gigabytes as soon as the header is in, holding nothing', () => {
    const dec = new FrameDecoder();
    expect(dec.push(header(0xffff_fff0).subarray(0, 5))).toEqual([]);
    expect(() => dec.push(header(0xffff_fff0).subarray(5))).toThrow(AgentProtocolError);
  });

  it('takes a frame of exactly the limit, and refuses one byte more', () => {
    const dec = new FrameDecoder();
    const big = Buffer.alloc(MAX_GUEST_FRAME, 7);
    const frames = [...dec.push(header(MAX_GUEST_FRAME)), ...dec.push(big)];
    expect(frames).toHaveLength(1);
    expect(frames[0]!.payload.length).toBe(MAX_GUEST_FRAME);
    expect(dec.buffered).toBe(0);
    expect(() => new FrameDecoder().push(header(MAX_GUEST_FRAME + 1))).toThrow(/announced/);
  });

  it('holds a trickled frame in the chunks it came in and hands it over whole, then goes on with the next', () => {
    const dec = new FrameDecoder();
    const payload = Buffer.from('x'.repeat(100_000));
    const wire = Buffer.concat([encodeFrame(T.STDOUT, 3, payload), encodeFrame(T.EXIT, 3, '0\0')]);
    const got = [];
    for (let at = 0; at < wire.length; at += 4096) got.push(...dec.push(wire.subarray(at, at + 4096)));
    expect(got.map((f) => [f.type, f.chan, f.payload.length])).toEqual([
      [T.STDOUT, 3, 100_000],
      [T.EXIT, 3, 2],
    ]);
    expect(got[0]!.payload.equals(payload)).toBe(true);
    expect(dec.buffered).toBe(0);
  });
});

describe('AgentConnection to a guest that breaks the protocol', () => {
  let dir: string;
  let server: Server;
  let guest: Promise<Socket>;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'cubed-test-agent-'));
    server = createServer();
    guest = new Promise((resolve) => server.once('connection', resolve));
    await new Promise<void>((r) => server.listen(join(dir, 'a.sock'), r));
  });

  afterAll(async () => {
    await new Promise((r) => server.close(r));
    await rm(dir, { recursive: true, force: true });
  });

  it('closes at a header claiming 4 GiB: the pending request fails at once, the owner hears why, the guest is cut off', async () => {
    const broken: AgentProtocolError[] = [];
    const conn = await AgentConnection.open(join(dir, 'a.sock'), (e) => broken.push(e));
    const g = await guest;
    g.on('error', () => undefined); // reset by the host, as expected
    const closed = new Promise((r) => g.once('close', r));
    // A request the guest never answers properly; its own timeout is far beyond the test's.
    const pending = conn.request(T.PING, Buffer.from('x'), 600_000);
    g.write(header(0xffff_fff0));
    // The guest keeps sending what it announced: none of it is held.
    g.write(Buffer.alloc(1 << 20));
    await expect(pending).rejects.toThrow(/announced/);
    await closed;
    expect(conn.closed).toBe(true);
    expect(broken).toHaveLength(1);
    expect(broken[0]!.reason).toBe('agent-protocol');
  });
});

describe('an agent from before per-user file requests', () => {
  it('is told from one that takes the user ids by its answer to the caps ping (an old agent echoes it)', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'cubed-test-agent-'));
    const server = createServer((g) => {
      const dec = new FrameDecoder();
      g.on('data', (c: Buffer) => {
        for (const f of dec.push(c)) g.write(encodeFrame(T.PONG, f.chan, answer ?? Buffer.from(f.payload)));
      });
    });
    let answer: Buffer | undefined;
    try {
      await new Promise<void>((r) => server.listen(join(dir, 'a.sock'), r));
      const old = await AgentConnection.open(join(dir, 'a.sock'));
      expect(await agentActsAsUser(old)).toBe(false);
      old.close();
      answer = Buffer.from('caps\0ids\0');
      const current = await AgentConnection.open(join(dir, 'a.sock'));
      expect(await agentActsAsUser(current)).toBe(true);
      current.close();
    } finally {
      server.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
