// The scorer registry: enable_scorers names pick from here, resource_weights weigh them.
import type { ScorerName } from '../../config/schema.js';
import type { Scorer } from '../plugin.js';
import { localCreateNum } from './local_create_num.js';
import { mvmNum } from './mvm_num.js';
import { quotaCpuUsage } from './quota_cpu_usage.js';
import { quotaMemUsage } from './quota_mem_usage.js';
import { templateLocality } from './template_locality.js';
import { warm } from './warm.js';

export const SCORERS: Record<ScorerName, Scorer> = {
  mvm_num: mvmNum,
  local_create_num: localCreateNum,
  quota_cpu_usage: quotaCpuUsage,
  quota_mem_usage: quotaMemUsage,
  template_locality: templateLocality,
  warm,
};
