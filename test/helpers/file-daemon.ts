// One real cubed for a whole test file: started before its first test, stopped (and its kernel
// objects checked) after its last. `api` calls its admin API with the key.
//
//   const f = fileDaemon(TWO_SANDBOX_NODE);
//   it('...', async () => { expect((await f.api('GET', `/admin/v1/nodes/${f.d.nodeID}`)).status).toBe(200) });
import { afterAll, beforeAll } from 'vitest';
import { call, startDaemon, type AdminAnswer, type StartDaemonOptions, type TestDaemon } from './daemon.js';

export interface FileDaemon {
  /** Set once beforeAll has run. */
  readonly d: TestDaemon;
  api(method: string, path: string, body?: unknown): Promise<AdminAnswer>;
}

export function fileDaemon(opts: StartDaemonOptions = {}): FileDaemon {
  let daemon: TestDaemon | undefined;
  beforeAll(async () => {
    daemon = await startDaemon(opts);
  });
  afterAll(async () => {
    await daemon?.stop();
  });
  const f: FileDaemon = {
    get d() {
      if (!daemon) throw new Error('fileDaemon: the daemon is not started yet (use it inside a test)');
      return daemon;
    },
    api: (method, path, body) => call(f.d, method, path, body),
  };
  return f;
}
