// A template build's record (its status and logs, what the E2B build status API shows) and its
// file, so a build's status outlives a restart.
import { mkdir, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from 'pino';

export type BuildStatus = 'waiting' | 'building' | 'ready' | 'error';

export interface BuildLogEntry {
  timestamp: string;
  level: 'debug' | 'info' | 'warn' | 'error';
  message: string;
  /** 1-based step (the SDK's numbering: 0 is the base), absent for the build's own lines. */
  step?: string;
}

export interface BuildRecord {
  /** The template's name (what the SDK calls its id). */
  templateID: string;
  buildID: string;
  /** NAME:TAG references the build registers when it succeeds. */
  refs: string[];
  status: BuildStatus;
  logs: BuildLogEntry[];
  reason?: { message: string; step?: string; logEntries: BuildLogEntry[] };
  cpuCount: number;
  memoryMB: number;
  createdAt: string;
  updatedAt: string;
  finishedAt?: string;
  /** Steps taken from the cache / run, once finished. */
  cached?: number;
  ran?: number;
  /** Lines of the steps' output in `logs` (at most BUILD_OUTPUT_LINES). */
  outputLines?: number;
}

/** The builds' records on disk: `<dataDir>/builds/<buildID>.json`, written aside and renamed. */
export class BuildRecordFiles {
  /** Per build: a write in flight, and whether the record changed since it began. */
  private readonly saving = new Map<string, { again: boolean; done: Promise<void> }>();

  constructor(
    private readonly buildsDir: string,
    private readonly log: Logger,
  ) {}

  /** Writes the build's record (aside, then renamed) in the background; changes during a write make one more. */
  save(b: BuildRecord): void {
    const busy = this.saving.get(b.buildID);
    if (busy) {
      busy.again = true;
      return;
    }
    const file = join(this.buildsDir, `${b.buildID}.json`);
    const state = { again: false, done: Promise.resolve() };
    state.done = (async () => {
      await mkdir(this.buildsDir, { recursive: true, mode: 0o700 });
      do {
        state.again = false;
        await writeFile(`${file}.tmp`, JSON.stringify(b));
        await rename(`${file}.tmp`, file);
      } while (state.again as boolean); // set again by a status that came while this one was written
    })()
      .catch((err: unknown) => this.log.warn({ err, buildID: b.buildID }, 'could not record the build status'))
      .finally(() => this.saving.delete(b.buildID));
    this.saving.set(b.buildID, state);
  }

  /** Resolves once the build records changed so far are on disk (shutdown). */
  async flush(): Promise<void> {
    await Promise.all([...this.saving.values()].map((s) => s.done));
  }
}
