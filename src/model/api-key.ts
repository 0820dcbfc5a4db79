// API keys as the control plane keeps them: a record per key (never the key itself: its SHA-256),
// with a role and per-key quotas, and what a key's sandboxes hold of those quotas. Both state
// stores keep the records and count the usage (test/store/contract.ts), so every control replica
// admits the same creates.
import type { SandboxState } from './sandbox.js';

/** admin: everything (the admin API, node-wide policy, keys); user: the E2B API only. */
export const KEY_ROLES = ['admin', 'user'] as const;
export type KeyRole = (typeof KEY_ROLES)[number];

/** The quotas a key may carry, by the name a refusal gives them. */
export const QUOTA_NAMES = ['sandboxes', 'vcpus', 'memory_mib', 'creates_per_sec'] as const;
export type QuotaName = (typeof QUOTA_NAMES)[number];

/**
 * A key's own quotas: a number (0 = unlimited), or absent to follow the default
 * (api.max_sandboxes_per_key for sandboxes; unlimited for the others).
 */
export type KeyQuotas = Partial<Record<QuotaName, number>>;

export interface ApiKeyRecord {
  /** `key-` and the first 8 hex digits of the key's SHA-256: what sandboxes' `owner` and the audit trail name. */
  id: string;
  /** Unique, chosen by the operator (e.g. "rl-team"). */
  name: string;
  role: KeyRole;
  /** SHA-256 of the key, hex. */
  hash: string;
  quotas: KeyQuotas;
  /** Epoch ms. */
  createdAt: number;
  /** The key id that created it, or 'system' (the key migrated from <data-dir>/api-key, --api-key or $CUBE_API_KEY). */
  createdBy: string;
}

/** What a key's sandboxes hold now: those in HOLDING_STATES plus creates and resumes admitted and not recorded yet. */
export interface KeyUsage {
  sandboxes: number;
  vcpus: number;
  memoryMiB: number;
}

/** Limits in force for one key (0 = unlimited), after defaults. */
export type QuotaLimits = Record<QuotaName, number>;

/** A key as the admin API shows it: never its hash; its usage and the limits in force (defaults applied). */
export interface KeyView extends Omit<ApiKeyRecord, 'hash'> {
  usage: KeyUsage;
  limits: QuotaLimits;
}

/** A sandbox in one of these states holds its key's quota (paused, gone, error and lost ones do not). */
export const HOLDING_STATES: readonly SandboxState[] = ['creating', 'running', 'resuming', 'pausing'];

/** One create's (or resume's) claim on its key's quota, admitted or refused as one step in the store. */
export interface QuotaClaim {
  /** The key id (the sandbox's owner). */
  owner: string;
  /** The sandbox id: its record, once written in a holding state, takes over the claim. */
  sandboxID: string;
  cpus: number;
  memoryMiB: number;
  limits: QuotaLimits;
  /** A claim whose sandbox was never recorded lapses after this long (its replica died mid-create). */
  ttlMs: number;
}

/** Why a claim was refused: the quota, what is held (or the rate), and the limit. */
export interface QuotaRefusal {
  quota: QuotaName;
  used: number;
  limit: number;
  /** Whole seconds until a retry may pass (for Retry-After). */
  retryAfter: number;
}

/** What `asked` more would do to `used` under `limits`: the first quota it passes, or undefined. Pure; the rate is the store's. */
export function overQuota(used: KeyUsage, asked: { cpus: number; memoryMiB: number }, limits: QuotaLimits): Omit<QuotaRefusal, 'retryAfter'> | undefined {
  const checks: [QuotaName, number, number][] = [
    ['sandboxes', used.sandboxes, 1],
    ['vcpus', used.vcpus, asked.cpus],
    ['memory_mib', used.memoryMiB, asked.memoryMiB],
  ];
  for (const [quota, u, more] of checks) {
    const limit = limits[quota];
    if (limit > 0 && u + more > limit + 1e-9) return { quota, used: u, limit };
  }
  return undefined;
}

/** vCPUs counted in thousandths, so sums of fractional vCPUs stay exact (in Redis as in SQLite). */
export const milliCpus = (cpus: number): number => Math.round(cpus * 1000);
