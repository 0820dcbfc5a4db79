// Build statuses outlive a restart of cubed: each build's record is written under
// <data-dir>/builds/, a new TemplateBuilder restores them, and one that was building when the
// daemon stopped is `error` saying so (it registered nothing). request() and restore() never touch
// the runtime, so the builder here has none.
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CubeletConfigSchema, MasterConfigSchema } from '../../src/config/schema.js';
import { TemplateBuilder, type BuildRecord, type TemplateBuilderOptions } from '../../src/templates/build/build.js';
import { TemplateStore } from '../../src/templates/store.js';

let dataDir: string;

function builder(): TemplateBuilder {
  const config = { master: MasterConfigSchema.parse({}), cubelet: CubeletConfigSchema.parse({}) };
  const o = { dataDir, templates: new TemplateStore(dataDir), config: () => config, log: pino({ level: 'silent' }) };
  return new TemplateBuilder(o as Omit<TemplateBuilderOptions, 'driver' | 'network'> as TemplateBuilderOptions);
}

beforeAll(async () => {
  dataDir = await mkdtemp(join(tmpdir(), 'cubed-test-build-status-'));
});
afterAll(() => rm(dataDir, { recursive: true, force: true }));

describe('build statuses across a restart', () => {
  it('restores waiting builds as they were and ends one that was building with an error that says why', async () => {
    const first = builder();
    const waiting = first.request({ name: 'app:v1' });
    const building = first.request({ name: 'other' });
    await first.flush();
    // What the file holds when the daemon died mid-build.
    const file = join(dataDir, 'builds', `${building.buildID}.json`);
    const rec = JSON.parse(await readFile(file, 'utf8')) as BuildRecord;
    await writeFile(file, JSON.stringify({ ...rec, status: 'building', logs: [{ timestamp: rec.createdAt, level: 'info', message: 'Building' }] }));
    await mkdir(join(dataDir, 'builds'), { recursive: true });
    await writeFile(join(dataDir, 'builds', 'broken.json'), '{');
    await writeFile(join(dataDir, 'builds', 'other.json'), '{"status":"building"}');

    const second = builder();
    await second.restore();
    expect(second.get('app', waiting.buildID)).toMatchObject({ status: 'waiting', refs: ['app:v1'] });
    const ended = second.get('other', building.buildID);
    expect(ended).toMatchObject({ status: 'error', reason: { message: expect.stringContaining('cubed stopped during the build') } });
    expect(ended.finishedAt).toBeDefined();
    expect(ended.logs.map((l) => l.message)).toEqual(['Building', expect.stringMatching(/^Build failed: cubed stopped/)]);
    await second.flush();
    // ... and stays so at the next start.
    const third = builder();
    await third.restore();
    expect(third.get('other', building.buildID).status).toBe('error');
    expect(third.list('app').map((b) => b.buildID)).toEqual([waiting.buildID]);
  });
});
