import { headroomScore, type Scorer } from '../plugin.js';

/** Prefers nodes with fewer creates in flight, which spreads a burst. */
export const localCreateNum: Scorer = ({ inFlightCreates, cfg }) => headroomScore(inFlightCreates, cfg.scheduler.realtime_create_num);
