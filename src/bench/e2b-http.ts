// The E2B REST calls a benchmark makes, over the same HTTP path the E2B SDK uses
// (POST /v2/sandboxes, DELETE /sandboxes/{id}, pause, connect), so the numbers are what
// RL code sees. Errors keep the server's code so a run can group them.

import { decodeEnvelopes, encodeMessage, FLAG_END_STREAM } from '../api/envd/connect.js';

const ENVD_PORT = '49983';

export class BenchOpError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

export interface CreatedSandbox {
  sandboxID: string;
  envdAccessToken?: string;
}

export interface E2bHttpOptions {
  apiUrl: string;
  apiKey: string;
  /** Per-request timeout. */
  timeoutMs?: number;
}

export class E2bHttp {
  constructor(private readonly opts: E2bHttpOptions) {}

  private async call(method: string, path: string, body?: unknown): Promise<{ status: number; json: unknown }> {
    let res: Response;
    try {
      res = await fetch(new URL(path, this.opts.apiUrl), {
        method,
        headers: { 'x-api-key': this.opts.apiKey, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(this.opts.timeoutMs ?? 60_000),
      });
    } catch (e) {
      const name = (e as Error).name === 'TimeoutError' ? 'timeout' : 'unreachable';
      throw new BenchOpError(name, `${method} ${path}: ${(e as Error).message}`);
    }
    const text = await res.text();
    let json: unknown = undefined;
    if (text) {
      try {
        json = JSON.parse(text);
      } catch {
        json = text;
      }
    }
    if (res.status >= 400) {
      const j = (json ?? {}) as { cubeCode?: number; code?: number; message?: string };
      throw new BenchOpError(String(j.cubeCode ?? j.code ?? res.status), `${method} ${path}: ${res.status} ${j.message ?? res.statusText}`);
    }
    return { status: res.status, json };
  }

  async create(body: {
    templateID: string;
    timeout?: number;
    cpuCount?: number;
    memoryMB?: number;
    metadata?: Record<string, string>;
    allow_internet_access?: boolean;
    network?: { allowOut?: string[]; denyOut?: string[] };
  }): Promise<CreatedSandbox> {
    const { json } = await this.call('POST', '/v2/sandboxes', body);
    const j = json as { sandboxID?: string; envdAccessToken?: string };
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
    let res: Response;
    try {
      res = await fetch(new URL('/process.Process/Start', this.opts.apiUrl), {
        method: 'POST',
        headers: {
          'content-type': 'application/connect+json',
          'connect-protocol-version': '1',
          'e2b-sandbox-id': sb.sandboxID,
          'e2b-sandbox-port': ENVD_PORT,
          ...(sb.envdAccessToken ? { 'x-access-token': sb.envdAccessToken } : {}),
        },
        body: encodeMessage({ process: { cmd: '/bin/bash', args: ['-l', '-c', cmd], envs: {} } }),
        signal: AbortSignal.timeout(this.opts.timeoutMs ?? 60_000),
      });
    } catch (e) {
      throw new BenchOpError((e as Error).name === 'TimeoutError' ? 'timeout' : 'unreachable', `exec: ${(e as Error).message}`);
    }
    const body = Buffer.from(await res.arrayBuffer());
    if (res.status !== 200) throw new BenchOpError(String(res.status), `exec: ${res.status} ${body.toString('utf8').slice(0, 200)}`);
    let exitCode: number | undefined;
    for (const env of decodeEnvelopes(body).envelopes) {
      const msg = JSON.parse(env.data.toString('utf8') || '{}') as { event?: { end?: { exitCode?: number } }; error?: { code?: string; message?: string } };
      if (env.flags & FLAG_END_STREAM) {
        if (msg.error) throw new BenchOpError(msg.error.code ?? 'envd_error', `exec: ${msg.error.message ?? 'stream failed'}`);
      } else if (msg.event?.end) exitCode = msg.event.end.exitCode ?? 0;
    }
    if (exitCode === undefined) throw new BenchOpError('no_end', 'exec: the stream ended without an end event');
    if (exitCode !== 0) throw new BenchOpError(`exit_${exitCode}`, `exec: \`${cmd}\` exited ${exitCode}`);
    return exitCode;
  }
}
