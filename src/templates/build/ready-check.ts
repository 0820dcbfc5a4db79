// The start and ready check at the end of a build (as E2B's builds do): the start command runs in
// a sandbox of the built template, the ready command is tried up to its limit, and a template
// whose ready command never passes is not registered: the build fails with both commands' output
// rather than every create from it waiting for the limit and failing the same way.
import { ProcessTable } from '../../cubelet/process-table.js';
import { runStartCommand } from '../../cubelet/start-cmd.js';
import type { RuntimeDriver, SandboxHandle, TemplateConfig } from '../../runtime/types.js';

/** Runs `config`'s start command in `h` and waits for its ready command; throws TEMPLATE_START_FAILED with the output. Returns how long readiness took. */
export async function checkReady(driver: RuntimeDriver, h: SandboxHandle, config: TemplateConfig, defaultReadyTimeoutSec: number): Promise<number> {
  const table = new ProcessTable(h.sandboxID);
  const { readyAfterMs } = await runStartCommand(config, {
    start: (r) => table.start(r, (req) => driver.exec(h, req)),
    exec: (r) => driver.exec(h, r),
    defaultReadyTimeoutSec,
  });
  return readyAfterMs;
}
