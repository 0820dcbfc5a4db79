// The real `e2b` SDK pointed at a test daemon: its connection options, the cubectl environment,
// and sandboxes created through it, remembered so the file's afterAll kills what a failed test left.
import { Sandbox } from 'e2b';
import type { TestDaemon } from './daemon.js';

export interface SdkClient {
  opts: { apiKey: string; apiUrl: string; sandboxUrl: string };
  /** CUBE_API_URL / CUBE_API_KEY for cubectl. */
  env: Record<string, string>;
  create(template: string, extra?: Parameters<typeof Sandbox.create>[1]): Promise<Sandbox>;
  /** Kills every sandbox create() made (already gone ones are fine). */
  killAll(): Promise<void>;
}

export function sdkClient(d: TestDaemon): SdkClient {
  const created: string[] = [];
  const opts = { apiKey: d.apiKey, apiUrl: d.url, sandboxUrl: d.url };
  return {
    opts,
    env: { CUBE_API_URL: d.url, CUBE_API_KEY: d.apiKey },
    async create(template, extra) {
      const sbx = await Sandbox.create(template, { ...opts, timeoutMs: 120_000, ...extra });
      created.push(sbx.sandboxId);
      return sbx;
    },
    async killAll() {
      await Promise.all(created.map((id) => Sandbox.kill(id, opts).catch(() => false)));
    },
  };
}
