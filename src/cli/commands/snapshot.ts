// `cubectl snapshot ls|rm`: the kept sandbox snapshots (taken with `sandbox snapshot`).
import type { Command } from 'commander';
import type { SnapshotView } from '../../api/types.js';
import { clientFor, examples, globals, printJson, table } from '../io.js';

export function snapshotsTable(list: SnapshotView[]): string {
  if (list.length === 0) return 'no snapshots\n';
  return table(
    ['snapshot', 'names', 'from sandbox', 'node', 'template', 'runtime', 'keeps', 'created'],
    list.map((s) => [s.snapshotID, s.names.join(',') || '-', s.sandboxID, s.nodeID, s.templateID, s.runtime, s.keeps, s.createdAt]),
  );
}

export function register(program: Command): void {
  const snapshot = program
    .command('snapshot')
    .summary('ls, rm sandbox snapshots')
    .description(
      'List and remove kept sandbox snapshots (take one with `cubectl sandbox snapshot ID`; make a sandbox from one with `cubectl sandbox create --template SNAPSHOT`).',
    )
    .addHelpText('after', examples('cubectl snapshot ls', 'cubectl snapshot rm warm'));

  snapshot
    .command('ls')
    .description('List the snapshots, oldest first: names, the sandbox and node they were taken from, template, runtime and what they keep (ns: filesystem).')
    .option('--sandbox <id>', 'only those taken from this sandbox')
    .option('--name <name>', 'only the one with this name')
    .addHelpText('after', '\nJSON (--json): an array of SnapshotView.\n' + examples('cubectl snapshot ls', 'cubectl snapshot ls --sandbox $id --json'))
    .action(async (o: { sandbox?: string; name?: string }, cmd: Command) => {
      const list = await clientFor(cmd).snapshots({
        ...(o.sandbox === undefined ? {} : { sandboxID: o.sandbox }),
        ...(o.name === undefined ? {} : { name: o.name }),
      });
      if (globals(cmd).json) printJson(list);
      else process.stdout.write(snapshotsTable(list));
    });

  snapshot
    .command('rm')
    .description('Remove snapshots by id or name. Sandboxes made from them go on: their layers are their own.')
    .argument('<ref...>', 'snapshot ids or names')
    .addHelpText(
      'after',
      '\nJSON (--json): an array of {snapshot, removed: true}.\n' + examples('cubectl snapshot rm snap-0123456789abcdef', 'cubectl snapshot rm warm cold'),
    )
    .action(async (refs: string[], _o: unknown, cmd: Command) => {
      const client = clientFor(cmd);
      for (const ref of refs) await client.deleteSnapshot(ref);
      if (globals(cmd).json) printJson(refs.map((snapshot) => ({ snapshot, removed: true })));
      else process.stdout.write(refs.map((r) => `${r} removed`).join('\n') + '\n');
    });
}
