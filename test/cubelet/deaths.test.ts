import { describe, expect, it } from 'vitest';
import { initDeath } from '../../src/cubelet/deaths.js';

describe('initDeath: why a sandbox whose init is gone died', () => {
  it('a microVM: its QEMU exited, with what the driver says', () => {
    expect(initDeath({ runtime: 'microvm', oomKillsBefore: 0, oomKillsNow: 3, driverReason: 'QEMU (pid 7) exited; guest console: panic' })).toEqual({
      reason: 'vm_exited',
      message: 'QEMU (pid 7) exited; guest console: panic',
    });
  });
  it('an ns sandbox whose memory cgroup counted a kill since the last look: oom', () => {
    expect(initDeath({ runtime: 'ns', oomKillsBefore: 1, oomKillsNow: 2, driverReason: undefined })).toMatchObject({
      reason: 'oom',
      message: expect.stringContaining('1 OOM kill'),
    });
  });
  it('otherwise (no new kill, or the counter could not be read): init_exited', () => {
    expect(initDeath({ runtime: 'ns', oomKillsBefore: 2, oomKillsNow: 2, driverReason: undefined })).toEqual({
      reason: 'init_exited',
      message: 'sandbox init process died',
    });
    expect(initDeath({ runtime: 'ns', oomKillsBefore: 0, oomKillsNow: undefined, driverReason: undefined }).reason).toBe('init_exited');
  });
});
