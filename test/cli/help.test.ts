import type { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import { buildProgram } from '../../src/cli/program.js';

function leaves(cmd: Command, path: string[] = []): { path: string; cmd: Command }[] {
  const subs = cmd.commands.filter((c) => c.name() !== 'help');
  if (subs.length === 0) return [{ path: path.join(' '), cmd }];
  return [{ path: path.join(' ') || '(top)', cmd }, ...subs.flatMap((c) => leaves(c, [...path, c.name()]))];
}

function helpOf(cmd: Command): string {
  let out = '';
  cmd.configureOutput({ writeOut: (s) => (out += s), writeErr: (s) => (out += s) });
  cmd.outputHelp();
  return out;
}

const all = leaves(buildProgram());

describe('cubectl --help', () => {
  it('covers the verbs of the brief', () => {
    expect(all.map((l) => l.path)).toEqual(
      expect.arrayContaining([
        'density',
        'nodes',
        'node cordon',
        'node uncordon',
        'node drain',
        'node delete',
        'sandbox create',
        'sandbox ls',
        'sandbox exec',
        'sandbox pause',
        'sandbox resume',
        'sandbox rm',
        'config show',
        'config reload',
        'config set',
        'events',
      ]),
    );
  });

  it.each(all.map((l) => [l.path, l.cmd] as const))('%s: description, options, global --json/--api, examples', (_path, cmd) => {
    const text = helpOf(cmd);
    expect(cmd.description().length).toBeGreaterThan(20);
    expect(text).toContain('--json');
    expect(text).toContain('--api <url>');
    expect(text).toMatch(/Examples:\n {2}\S/);
  });
});
