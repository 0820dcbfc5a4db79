// The one way this module runs `ip` and `nft`: batched on stdin, so N operations cost one
// fork+exec (7-12 ms here) instead of N. Every spawn is counted: spawns per slot is the
// number that decides how fast bursts are served. The forks happen in the launch helper, not
// in the daemon (a fork of the daemon stalls its event loop for tens of ms).
import { sharedHelper } from '../runtime/ns/helper.js';

export interface BatchResult {
  /** 1-based line numbers of the batch that failed (ip -force keeps going after a failure). */
  failedLines: Set<number>;
  stdout: string;
  stderr: string;
}

export class Spawner {
  spawns = 0;

  /** `ip [-n netns] [-j] -force -b -`: runs every line, reports which failed. */
  async ipBatch(lines: readonly string[], opts: { netns?: string; json?: boolean; ipv4?: boolean } = {}): Promise<BatchResult> {
    const args = [...(opts.netns ? ['-n', opts.netns] : []), ...(opts.json ? ['-j'] : []), ...(opts.ipv4 ? ['-4'] : []), '-force', '-b', '-'];
    this.spawns++;
    const r = await sharedHelper().run(['ip', ...args], lines.join('\n') + '\n');
    const failedLines = new Set<number>();
    for (const m of r.stderr.matchAll(/Command failed -:(\d+)/g)) failedLines.add(Number(m[1]));
    if (r.exitCode !== 0 && failedLines.size === 0) {
      // ip itself failed (bad netns, killed): every line counts as failed.
      lines.forEach((_, i) => failedLines.add(i + 1));
    }
    return { failedLines, stdout: r.stdout, stderr: r.stderr };
  }

  /** `nft -f -` with a whole ruleset script: applied atomically or not at all. */
  async nft(script: string): Promise<void> {
    this.spawns++;
    const r = await sharedHelper().run(['nft', '-f', '-'], script);
    if (r.exitCode !== 0) throw new Error(`nft -f failed: ${r.stderr.trim() || `exit ${r.exitCode}`}`);
  }

  async run(cmd: string, args: readonly string[]): Promise<{ exitCode: number; stdout: string; stderr: string }> {
    this.spawns++;
    const r = await sharedHelper().run([cmd, ...args]);
    return { exitCode: r.exitCode, stdout: r.stdout.replace(/\n$/, ''), stderr: r.stderr.replace(/\n$/, '') };
  }
}

/** Pairs a batch's failed lines with the items that produced them (each item owns a run of lines). */
export function failedItems<T>(items: readonly T[], linesPerItem: readonly number[], failed: Set<number>): Set<T> {
  const out = new Set<T>();
  let line = 1;
  items.forEach((item, i) => {
    const n = linesPerItem[i]!;
    for (let l = line; l < line + n; l++) if (failed.has(l)) out.add(item);
    line += n;
  });
  return out;
}
