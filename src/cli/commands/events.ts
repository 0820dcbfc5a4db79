// `cubectl events`: what happened (creates, failures with their 1305xx reason, config reloads...).
import type { Command } from 'commander';
import type { EventView } from '../../api/types.js';
import { clientFor, examples, ExitError, globals, numberArg, printJson } from '../io.js';

export function eventLine(e: EventView): string {
  const where = [e.nodeID, e.sandboxID].filter(Boolean).join(' ');
  return `${e.at}  ${e.kind.padEnd(17)}  ${where ? `${where}  ` : ''}${e.message}${e.code ? ` [${e.code}]` : ''}${e.durationMs === undefined ? '' : ` (${e.durationMs} ms)`}\n`;
}

export function register(program: Command): void {
  program
    .command('events')
    .summary('recent events; --follow streams new ones')
    .description('Print recent events, oldest first. With --follow, keep printing new ones from the watch stream until interrupted.')
    .option('--follow', 'stream new events as they happen', false)
    .option('--since <id>', 'only events after this event id', numberArg({ int: true, min: 0 }))
    .option('--limit <n>', 'at most this many past events', numberArg({ int: true, min: 1 }), 100)
    .addHelpText('after', `\nJSON (--json): an array of EventView; with --follow one EventView per line (NDJSON).\n` + examples('cubectl events', 'cubectl events --follow', 'cubectl events --follow --json | jq -c "select(.code)"'))
    .action(async (o: { follow: boolean; since?: number; limit: number }, cmd: Command) => {
      const client = clientFor(cmd);
      const { json } = globals(cmd);
      if (!o.follow) {
        const events = await client.events({ limit: o.limit, ...(o.since === undefined ? {} : { since: o.since }) });
        if (json) printJson(events);
        else process.stdout.write(events.map(eventLine).join('') || 'no events\n');
        return;
      }
      const print = (e: EventView) => process.stdout.write(json ? `${JSON.stringify(e)}\n` : eventLine(e));
      const abort = new AbortController();
      const stop = () => abort.abort();
      process.once('SIGINT', stop);
      process.once('SIGTERM', stop);
      try {
        for await (const m of client.watch(abort.signal)) {
          if (m.type === 'snapshot') m.snapshot.events.filter((e) => o.since === undefined || e.id > o.since).slice(-o.limit).forEach(print);
          else if (m.type === 'event') print(m.event);
        }
        if (!abort.signal.aborted) throw new ExitError('the watch stream ended (did cubed stop?)');
      } catch (e) {
        if (!abort.signal.aborted) throw e;
      } finally {
        process.off('SIGINT', stop);
        process.off('SIGTERM', stop);
      }
    });
}
