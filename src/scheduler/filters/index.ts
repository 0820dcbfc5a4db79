// The filter registry: enable_filters names pick from here (a name added to the schema
// without an implementation fails to compile).
import type { FilterName } from '../../config/schema.js';
import type { Filter } from '../plugin.js';
import { cpu } from './cpu.js';
import { disk } from './disk.js';
import { diskQuota } from './disk_quota.js';
import { mem } from './mem.js';
import { mvmNum } from './mvm_num.js';
import { realtimeCreateNum } from './realtime_create_num.js';
import { templateLocality } from './template_locality.js';

export const FILTERS: Record<FilterName, Filter> = {
  cpu,
  mem,
  disk,
  disk_quota: diskQuota,
  realtime_create_num: realtimeCreateNum,
  template_locality: templateLocality,
  mvm_num: mvmNum,
};
