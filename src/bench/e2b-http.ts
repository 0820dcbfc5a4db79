// The E2B REST calls a benchmark makes, over the same HTTP path the E2B SDK uses
// (POST /v2/sandboxes, DELETE /sandboxes/{id}, pause, connect), so the numbers are what
// RL code sees. Errors keep the server's code so a run can group them.

import { Agent as HttpAgent, request as httpRequest } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import { Code, ConnectError, createClient, type Client } from '@connectrpc/connect';
import { codeToString } from '@connectrpc/connect/protocol-connect';
import { createConnectTransport } from '@connectrpc/connect-node';
import { Process } from '../api/envd/gen/process/process_pb.js';

const ENVD_PORT = '49983';

export class BenchOpError extends Error {
  constructor(
    readonly code: string,
    message: string,
    /** The connection was refused: the request never reached a server. */
    readonly neverSent = false,
  ) {
    super(message);
  }
}

export interface CreatedSandbox {
  sandboxID: string;
  envdAccessToken?: string;
}

export interface E2bHttpOptions {
  /** One API URL, or several control replicas comma-separated: calls go round them in turn, as behind a load balancer. */
  apiUrl: string;
  apiKey: string;
  /** Per-request timeout. */
  timeoutMs?: number;
}

export class E2bHttp {
  /** The API URLs; `new URL(path, 'http://a,http://b')` threw a TypeError for every call of `bench --api A,B`. */
  private readonly urls: string[];
  /** envd's process service through each replica's sandbox routing, in the SDK's JSON codec. */
  private readonly process: Client<typeof Process>[];
  private turn = 0;

  /** Connections kept open between calls (idle ones do not hold the process open). */
  private readonly agents = { http: new HttpAgent({ keepAlive: true }), https: new HttpsAgent({ keepAlive: true }) };

  constructor(private readonly opts: E2bHttpOptions) {
    this.urls = opts.apiUrl
      .split(',')
      .map((u) => u.trim())
      .filter(Boolean);
    if (this.urls.length === 0) throw new BenchOpError('bad_config', `no API URL in ${JSON.stringify(opts.apiUrl)}`);
    this.process = this.urls.map((baseUrl) => createClient(Process, createConnectTransport({ baseUrl, httpVersion: '1.1', useBinaryFormat: false })));
  }

  /** The next replica's index (round robin). */
  private next(): number {
    return this.turn++ % this.urls.length;
  }

  /**
   * One REST call to the next replica; a replica that refuses the connection (the request was
   * never sent) passes it on to the others in turn.
   */
  private async call(method: string, path: string, body?: unknown): Promise<{ status: number; json: unknown }> {
    for (let tried = 1; ; tried++) {
      try {
        return await this.callAt(this.urls[this.next()]!, method, path, body);
      } catch (e) {
        if (!(e instanceof BenchOpError && e.neverSent) || tried >= this.urls.length) throw e;
      }
    }
  }

  /**
   * One REST call over node:http with a keep-alive agent. fetch (undici) cost the bench client
   * 2.6 ms CPU per create in bench/cluster-sim.ts, more than the simulated nodes' process; this
   * keeps the client's share of a shared machine small (ratios in the commit that made it).
   */
  private callAt(base: string, method: string, path: string, body?: unknown): Promise<{ status: number; json: unknown }> {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const url = new URL(path, base);
    const send = url.protocol === 'https:' ? httpsRequest : httpRequest;
    return new Promise<{ status: number; text: string; statusText: string }>((resolve, reject) => {
      const headers: Record<string, string | number> = {
        'x-api-key': this.opts.apiKey,
        ...(payload === undefined ? {} : { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) }),
      };
      const req = send(url, { method, headers, agent: url.protocol === 'https:' ? this.agents.https : this.agents.http }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', fail);
        res.on('end', () => {
          clearTimeout(timer);
          resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8'), statusText: res.statusMessage ?? '' });
        });
      });
      const timeoutMs = this.opts.timeoutMs ?? 60_000;
      const timer = setTimeout(() => req.destroy(new BenchOpError('timeout', `${method} ${path}: no answer in ${timeoutMs} ms`)), timeoutMs);
      function fail(e: Error): void {
        clearTimeout(timer);
        reject(
          e instanceof BenchOpError
            ? e
            : new BenchOpError('unreachable', `${method} ${path}: ${e.message}`, (e as NodeJS.ErrnoException).code === 'ECONNREFUSED'),
        );
      }
      req.on('error', fail);
      req.end(payload);
    }).then(({ status, text, statusText }) => {
      let json: unknown = undefined;
      if (text) {
        try {
          json = JSON.parse(text);
        } catch {
          json = text;
        }
      }
      if (status >= 400) {
        const j = (json ?? {}) as { cubeCode?: number; code?: number; message?: string };
        throw new BenchOpError(String(j.cubeCode ?? j.code ?? status), `${method} ${path}: ${status} ${j.message ?? statusText}`);
      }
      return { status, json };
    });
  }

  async create(body: {
    templateID: string;
    timeout?: number;
    cpuCount?: number;
    memoryMB?: number;
    metadata?: Record<string, string>;
    allow_internet_access?: boolean;
    network?: { allowOut?: string[]; denyOut?: string[] };
    volumeMounts?: { name: string; path: string }[];
  }): Promise<CreatedSandbox> {
    const { json } = await this.call('POST', '/v2/sandboxes', body);
    const j = json as { sandboxID?: string; envdAccessToken?: string } | null;
    if (!j?.sandboxID) throw new BenchOpError('bad_response', 'create answered without a sandboxID');
    return { sandboxID: j.sandboxID, ...(j.envdAccessToken ? { envdAccessToken: j.envdAccessToken } : {}) };
  }

  async kill(sandboxID: string): Promise<void> {
    await this.call('DELETE', `/sandboxes/${sandboxID}`);
  }

  async pause(sandboxID: string): Promise<void> {
    await this.call('POST', `/sandboxes/${sandboxID}/pause`);
  }

  async resume(sandboxID: string, timeoutSec = 300): Promise<void> {
    await this.call('POST', `/v2/sandboxes/${sandboxID}/connect`, { timeout: timeoutSec });
  }

  /**
   * Runs a command the way the SDK's `commands.run(cmd)` does: envd process.Process/Start as a
   * Connect server stream with `bash -l -c`, routed by the E2b-Sandbox-Id header.
   */
  async run(sb: CreatedSandbox, cmd: string): Promise<number> {
    const headers = { 'e2b-sandbox-id': sb.sandboxID, 'e2b-sandbox-port': ENVD_PORT, ...(sb.envdAccessToken ? { 'x-access-token': sb.envdAccessToken } : {}) };
    let exitCode: number | undefined;
    try {
      const events = this.process[this.next()]!.start(
        { process: { cmd: '/bin/bash', args: ['-l', '-c', cmd], envs: {} } },
        { headers, timeoutMs: this.opts.timeoutMs ?? 60_000 },
      );
      for await (const { event } of events) if (event?.event.case === 'end') exitCode = event.event.value.exitCode;
    } catch (e) {
      const err = ConnectError.from(e);
      throw new BenchOpError(err.code === Code.DeadlineExceeded ? 'timeout' : codeToString(err.code), `exec: ${err.rawMessage}`);
    }
    if (exitCode === undefined) throw new BenchOpError('no_end', 'exec: the stream ended without an end event');
    if (exitCode !== 0) throw new BenchOpError(`exit_${exitCode}`, `exec: \`${cmd}\` exited ${exitCode}`);
    return exitCode;
  }
}
