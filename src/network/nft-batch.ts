// Group commit for small nftables changes (a sandbox's egress set elements): each `nft -f` is a
// process start, a netlink ruleset fetch and a set rebuild in the kernel, ~25 ms here, and a
// burst of creates would queue one behind the other. Scripts that arrive while one transaction
// runs go together in the next: one transaction for the whole group, so its cost is shared.
// A failed group is retried script by script, so each caller gets its own script's outcome.
// A script may be a function, rendered when its group runs (a whole-table replacement must see
// every change queued before it).

export type NftRunner = (script: string) => Promise<void>;

export type NftScript = string | (() => string);

interface Pending {
  script: NftScript;
  resolve: () => void;
  reject: (e: unknown) => void;
}

const text = (s: NftScript) => (typeof s === 'string' ? s : s());

export class NftBatch {
  private pending: Pending[] = [];
  private running = false;
  /** Transactions run so far (tests, benchmarks). */
  transactions = 0;

  constructor(private readonly run: NftRunner) {}

  /** Applies `script` (nft commands, each line complete) in the next transaction. */
  apply(script: NftScript): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.pending.push({ script, resolve, reject });
      if (!this.running) void this.drain();
    });
  }

  private async drain(): Promise<void> {
    this.running = true;
    while (this.pending.length > 0) {
      const group = this.pending.splice(0);
      this.transactions++;
      try {
        await this.run(group.map((p) => text(p.script)).join(''));
        for (const p of group) p.resolve();
      } catch (e) {
        if (group.length === 1) {
          group[0]!.reject(e);
          continue;
        }
        for (const p of group) {
          this.transactions++;
          await this.run(text(p.script)).then(p.resolve, p.reject);
        }
      }
    }
    this.running = false;
  }
}
