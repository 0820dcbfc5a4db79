// `cubectl events`: what happened (creates, failures with their 1305xx reason, config reloads...).
import type { Command } from 'commander';
import type { EventView } from '../../api/types.js';
import { CubeClientError } from '../client.js';
import { clientFor, examples, globals, numberArg, printJson } from '../io.js';

export function eventLine(e: EventView): string {
  const where = [e.nodeID, e.sandboxID].filter(Boolean).join(' ');
  return `${e.at}  ${e.kind.padEnd(17)}  ${where ? `${where}  ` : ''}${e.message}${e.code ? ` [${e.code}]` : ''}${e.durationMs === undefined ? '' : ` (${e.durationMs} ms)`}\n`;
}

export function register(program: Command): void {
  program
    .command('events')
    .summary('recent events; --follow streams new ones')
    .description(
      'Print recent events, oldest first. With --follow, keep printing new ones from the watch stream until interrupted; when cubed restarts or cannot be reached it reconnects (0.5 s to 10 s backoff, a line on stderr each time) and goes on after the last event printed.',
    )
    .option('--follow', 'stream new events as they happen', false)
    .option('--since <id>', 'only events after this event id', numberArg({ int: true, min: 0 }))
    .option('--limit <n>', 'at most this many past events', numberArg({ int: true, min: 1 }), 100)
    .addHelpText(
      'after',
      `\nJSON (--json): an array of EventView; with --follow one EventView per line (NDJSON).\n` +
        examples('cubectl events', 'cubectl events --follow', 'cubectl events --follow --json | jq -c "select(.code)"'),
    )
    .action(async (o: { follow: boolean; since?: number; limit: number }, cmd: Command) => {
      const client = clientFor(cmd);
      const { json } = globals(cmd);
      if (!o.follow) {
        const events = await client.events({ limit: o.limit, ...(o.since === undefined ? {} : { since: o.since }) });
        if (json) printJson(events);
        else process.stdout.write(events.map(eventLine).join('') || 'no events\n');
        return;
      }
      let lastID = o.since ?? -1;
      const print = (e: EventView) => {
        if (e.id <= lastID) return; // already printed before a reconnect
        lastID = e.id;
        process.stdout.write(json ? `${JSON.stringify(e)}\n` : eventLine(e));
      };
      const abort = new AbortController();
      // A call, not the property: the flag changes while the stream is awaited (narrowing would say it cannot).
      const aborted = () => abort.signal.aborted;
      const stop = () => abort.abort();
      process.once('SIGINT', stop);
      process.once('SIGTERM', stop);
      // A daemon restart or a network blip must not end a follow: reconnect with backoff and
      // resume after the last event printed (the snapshot carries the recent ones).
      let backoffMs = 500;
      let first = true;
      try {
        while (!aborted()) {
          try {
            for await (const m of client.watch(abort.signal)) {
              backoffMs = 500;
              if (m.type === 'snapshot') {
                const recent = m.snapshot.events.filter((e) => e.id > lastID);
                (first ? recent.slice(-o.limit) : recent).forEach(print);
                first = false;
              } else if (m.type === 'event') print(m.event);
            }
            if (aborted()) break;
            process.stderr.write(`cubectl: the watch stream ended; reconnecting in ${backoffMs / 1000}s\n`);
          } catch (e) {
            if (aborted()) break;
            // A refusal (bad key, 4xx) will not heal by waiting; a lost or unreachable daemon may.
            if (e instanceof CubeClientError && e.status < 500) throw e;
            process.stderr.write(`cubectl: the watch stream was lost (${(e as Error).message}); reconnecting in ${backoffMs / 1000}s\n`);
          }
          await new Promise((r) => setTimeout(r, backoffMs));
          backoffMs = Math.min(backoffMs * 2, 10_000);
        }
      } finally {
        process.off('SIGINT', stop);
        process.off('SIGTERM', stop);
      }
    });
}
