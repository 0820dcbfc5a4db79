// `cubectl config show|reload|set`: the config in force, hot reload, and one-key changes.
import type { Command } from 'commander';
import type { ConfigChange, ReloadResult } from '../../api/types.js';
import { clientFor, examples, ExitError, globals, printJson } from '../io.js';

const show = (v: unknown) => (v === undefined ? '(unset)' : JSON.stringify(v));

export function formatChanges(changes: ConfigChange[]): string {
  return changes.map((c) => `  ${c.path}: ${show(c.from)} -> ${show(c.to)}${c.needsRestart ? '   (needs a restart of cubed to take effect)' : ''}\n`).join('');
}

/** Prints a reload/set result; a rejection exits 1 after printing why. */
function report(cmd: Command, r: ReloadResult): void {
  if (globals(cmd).json) printJson(r);
  else if (!r.ok)
    process.stdout.write(`config rejected; version ${r.version} stays in force:\n${(r.error ?? []).map((e) => `  ${e.path}: ${e.message}\n`).join('')}`);
  else if (r.changes.length === 0) process.stdout.write(`config version ${r.version}: no change\n`);
  else process.stdout.write(`config version ${r.version}:\n${formatChanges(r.changes)}`);
  if (!r.ok) throw new ExitError('', 1);
}

/** VALUE is JSON when it parses (0.75, true, ["cpu","mem"]), else a plain string. */
export function parseValue(raw: string): unknown {
  try {
    return JSON.parse(raw) as unknown;
  } catch {
    return raw;
  }
}

export function register(program: Command): void {
  const config = program
    .command('config')
    .summary('show the config in force, reload it, set one key live')
    .description('The configuration cubed has in force (cubemaster.yaml and cubelet.toml), its hot reload, and changing one key live.')
    .addHelpText('after', examples('cubectl config show', 'cubectl config reload', 'cubectl config set host.quota.paused_resource_release_ratio 0.75'));

  config
    .command('show')
    .description('Print the config in force with its version, load time and files.')
    .addHelpText(
      'after',
      `\nJSON (--json): ConfigView {version, loadedAt, master, cubelet, files}.\n` +
        examples('cubectl config show', 'cubectl config show --json | jq .master.host'),
    )
    .action(async (_o: unknown, cmd: Command) => {
      const v = await clientFor(cmd).config();
      if (globals(cmd).json) return printJson(v);
      const [{ default: YAML }, { stringify: toToml }] = await Promise.all([import('yaml'), import('smol-toml')]);
      process.stdout.write(
        `# version ${v.version}, loaded ${v.loadedAt}\n# ${v.files.master}\n${YAML.stringify(v.master)}\n# ${v.files.cubelet}\n${toToml(v.cubelet as Record<string, unknown>)}\n`,
      );
    });

  config
    .command('reload')
    .description(
      'Re-read both files now (cubed also does it by itself when they change). Prints each changed key (keys that need a restart say so), or, when a file is invalid, each `key: reason` while the old config stays in force; exits 1 then.',
    )
    .addHelpText(
      'after',
      `\nJSON (--json): ReloadResult {ok, version, changes[], error[]}.\n` + examples('vi /etc/cubed/cubemaster.yaml && cubectl config reload'),
    )
    .action(async (_o: unknown, cmd: Command) => report(cmd, await clientFor(cmd).reloadConfig()));

  config
    .command('set')
    .description(
      'Set one key: cubed validates it, writes it to its file (comments kept) and applies it live. KEY is a dotted path as in docs/configuration.md; VALUE is read as JSON when it parses (numbers, true/false, lists), else as a string. An invalid value exits 2 and changes nothing.',
    )
    .argument('<key>', 'e.g. host.quota.paused_resource_release_ratio')
    .argument('<value>', 'e.g. 0.75, true, \'["cpu","mem"]\', 0.0.0.0:3000')
    .addHelpText(
      'after',
      examples(
        'cubectl config set host.quota.paused_resource_release_ratio 0.75',
        'cubectl config set scheduler.filter.enable_filters \'["cpu","mem","disk"]\'',
        'cubectl config set plugins.io.cubelet.internal.v1.network.allow_host_access true',
      ),
    )
    .action(async (key: string, value: string, _o: unknown, cmd: Command) => report(cmd, await clientFor(cmd).setConfig(key, parseValue(value))));
}
