import type { Filter } from '../plugin.js';

/** Bounds a create burst per node (the reference stalls at about 20 concurrent NIC allocations). */
export const realtimeCreateNum: Filter = {
  passes: ({ inFlightCreates, cfg }) => !(inFlightCreates >= cfg.scheduler.realtime_create_num),
  reason: ({ inFlightCreates, cfg }) => {
    const limit = cfg.scheduler.realtime_create_num;
    return inFlightCreates >= limit ? `creates in flight ${inFlightCreates} >= ${limit}` : undefined;
  },
};
