// Environment variables a request may set (the create's envVars, an exec's env): checked once,
// the same way, wherever they come in, so a bad one is a 400 at create rather than a failure at
// the first exec. Pure: the caller answers the problem as a 400 (BAD_REQUEST).

/** POSIX portable names: what every shell can export and read back. */
const NAME_RE = /^[A-Za-z_][A-Za-z0-9_]*$/;
export const ENV_LIMITS = {
  nameMax: 255,
  /** The kernel refuses an execve whose single `NAME=value` string reaches MAX_ARG_STRLEN (32 pages). */
  entryMax: 131071,
  count: 1024,
  /**
   * The whole set, summed over `NAME=value`: the sandbox record that carries it is one TEXT
   * column (64 KiB) in the cluster store, next to the metadata.
   */
  totalMax: 32 * 1024,
} as const;

/** What is wrong with `env` (the first bad variable and the rule it broke), or undefined. */
export function envVarsProblem(env: Record<string, unknown> | undefined, what: string): string | undefined {
  if (env === undefined) return undefined;
  const entries = Object.entries(env);
  if (entries.length > ENV_LIMITS.count) return `${what}: ${entries.length} variables, at most ${ENV_LIMITS.count}`;
  let total = 0;
  for (const [k, v] of entries) {
    const shown = JSON.stringify(k.length > 40 ? `${k.slice(0, 40)}...` : k);
    if (!NAME_RE.test(k)) return `${what}: invalid environment variable name ${shown} (letters, digits and _, not starting with a digit)`;
    if (k.length > ENV_LIMITS.nameMax) return `${what}: variable name ${shown} is ${k.length} characters, at most ${ENV_LIMITS.nameMax}`;
    if (typeof v !== 'string' || v.includes('\0')) return `${what}: variable ${shown} must be a string without NUL`;
    const size = Buffer.byteLength(k) + 1 + Buffer.byteLength(v);
    if (size > ENV_LIMITS.entryMax) return `${what}: variable ${shown} is ${size} bytes, at most ${ENV_LIMITS.entryMax}`;
    total += size;
  }
  if (total > ENV_LIMITS.totalMax) return `${what}: ${total} bytes of variables, at most ${ENV_LIMITS.totalMax}`;
  return undefined;
}
