// `cubectl volume ls|create|get|rm`: volumes (E2B's Volume API; mounted with volumeMounts at a
// sandbox's create), every key's.
import type { Command } from 'commander';
import type { VolumeView } from '../../api/types.js';
import { clientFor, examples, globals, printJson, table } from '../io.js';

const GIB = 1024 ** 3;
const gib = (b: number): string => `${Math.round((b / GIB) * 100) / 100} GiB`;

export function volumesTable(list: VolumeView[]): string {
  if (list.length === 0) return 'no volumes\n';
  return table(
    ['volume', 'name', 'owner', 'node', 'size', 'created'],
    list.map((v) => [v.volumeID, v.name, v.owner ?? '-', v.nodeID, gib(v.sizeBytes), v.createdAt]),
  );
}

export function volumeDetail(v: VolumeView): string {
  const rows: [string, string][] = [
    ['volume', v.volumeID],
    ['name', v.name],
    ['owner', v.owner ?? '-'],
    ['node', v.nodeID],
    ['size', gib(v.sizeBytes)],
    ['used', v.usedBytes === undefined ? '-' : gib(v.usedBytes)],
    ['mounted by', v.mountedBy?.length ? v.mountedBy.join(', ') : '-'],
    ['created', v.createdAt],
  ];
  return rows.map(([k, val]) => `${`${k}:`.padEnd(12)}${val}`).join('\n') + '\n';
}

export function register(program: Command): void {
  const volume = program
    .command('volume')
    .summary('ls, create, get, rm volumes')
    .description(
      "Volumes: a directory with a size limit on one node (ns: a btrfs subvolume of its store) that outlives sandboxes and is mounted into several at once (E2B volumeMounts: a sandbox is placed on its volumes' node).",
    )
    .addHelpText('after', examples('cubectl volume create data --size 5 --owner key-0123abcd', 'cubectl volume ls', 'cubectl volume rm data'));

  volume
    .command('ls')
    .description("List every key's volumes, oldest first: name, owning key, node and size limit.")
    .addHelpText('after', '\nJSON (--json): an array of VolumeView.\n' + examples('cubectl volume ls', 'cubectl volume ls --json'))
    .action(async (_o: unknown, cmd: Command) => {
      const list = await clientFor(cmd).volumes();
      if (globals(cmd).json) printJson(list);
      else process.stdout.write(volumesTable(list));
    });

  volume
    .command('create')
    .description("Make an empty volume. Its name is unique per owning key; a user key's volumeMounts find the volumes it owns by name.")
    .argument('<name>', '1-63 letters, digits, . _ -')
    .option('--size <gib>', 'size limit in GiB (default: volumes.default_gib)', Number)
    .option('--owner <keyID>', 'the API key (id) it belongs to (default: the admin key asking)')
    .option('--node <nodeID>', 'the node to keep it on (default: the one with the most free store among those offering ns)')
    .addHelpText(
      'after',
      '\nJSON (--json): the VolumeView.\n' + examples('cubectl volume create data', 'cubectl volume create data --size 0.5 --owner key-0123abcd'),
    )
    .action(async (name: string, o: { size?: number; owner?: string; node?: string }, cmd: Command) => {
      const v = await clientFor(cmd).createVolume({
        name,
        ...(o.size !== undefined ? { sizeGiB: o.size } : {}),
        ...(o.owner !== undefined ? { owner: o.owner } : {}),
        ...(o.node !== undefined ? { nodeID: o.node } : {}),
      });
      if (globals(cmd).json) printJson(v);
      else process.stdout.write(`${v.volumeID} created (${v.name}, ${gib(v.sizeBytes)} on ${v.nodeID})\n`);
    });

  volume
    .command('get')
    .description('Show a volume by id or name: its size used, the sandboxes that mount it, and (with --json) the token of its content API.')
    .argument('<ref>', 'volume id or name')
    .addHelpText(
      'after',
      '\nJSON (--json): the VolumeView with usedBytes, mountedBy and token.\n' +
        examples('cubectl volume get data', 'cubectl volume get vol-0123456789abcdef --json'),
    )
    .action(async (ref: string, _o: unknown, cmd: Command) => {
      const v = await clientFor(cmd).volume(ref);
      if (globals(cmd).json) printJson(v);
      else process.stdout.write(volumeDetail(v));
    });

  volume
    .command('rm')
    .description('Delete volumes by id or name, and what they hold. Refused (409, 130430) while a sandbox mounts one.')
    .argument('<ref...>', 'volume ids or names')
    .addHelpText(
      'after',
      '\nJSON (--json): an array of {volume, removed: true}.\n' + examples('cubectl volume rm data', 'cubectl volume rm vol-0123456789abcdef scratch'),
    )
    .action(async (refs: string[], _o: unknown, cmd: Command) => {
      const client = clientFor(cmd);
      for (const ref of refs) await client.deleteVolume(ref);
      if (globals(cmd).json) printJson(refs.map((v) => ({ volume: v, removed: true })));
      else process.stdout.write(refs.map((r) => `${r} removed`).join('\n') + '\n');
    });
}
