// Every cubectl verb, in the order --help lists them.
import type { Command } from 'commander';
import { register as bench } from './bench.js';
import { register as config } from './config.js';
import { register as density } from './density.js';
import { register as events } from './events.js';
import { register as key } from './key.js';
import { register as node } from './node.js';
import { register as nodes } from './nodes.js';
import { register as sandbox } from './sandbox.js';
import { register as snapshot } from './snapshot.js';
import { register as template } from './template.js';
import { register as volume } from './volume.js';

export const commands: ((program: Command) => void)[] = [density, nodes, node, sandbox, snapshot, volume, template, config, key, events, bench];
