import React from 'react';
import { describe, expect, it } from 'vitest';
import { render } from 'ink-testing-library';
import { storeFrom, withStore } from '../test/tui/console.js';
import type { KeyView } from '../src/api/types.js';
import { KeysView, SnapshotsView, TemplatesView } from './CatalogViews.js';

describe('templates and snapshots views', () => {
  it('shows per template its digest, size, layers, build status, the nodes holding it and the sandboxes using it', () => {
    const store = storeFrom(undefined, { view: 'templates' });
    store.setState((s) => ({
      data: {
        ...s.data,
        templates: [
          { templateID: 'host', nodes: ['node-a', 'node-b'] },
          {
            templateID: 'py',
            nodes: ['node-a'],
            digest: 'sha256:0123456789abcdef',
            sizeBytes: 300 * 2 ** 20,
            layers: 3,
            source: 'build',
            buildID: 'b1',
            build: 'error',
            created: '2026-12-01T10:00:00Z',
          },
        ],
      },
    }));
    const f = render(withStore(store, <TemplatesView height={8} width={80} />)).lastFrame()!;
    expect(f).toMatch(/^TEMPLATE +DIGEST +SIZE +LAYERS +BUILD +NODES +SANDBOXES/m);
    // The recorded stream has 3 live sandboxes of host.
    expect(f).toMatch(/^host +- +- +- +- +2 +3/m);
    expect(f).toMatch(/^py +0123456789ab +300M +3 +error +1 +0/m);
    for (const l of f.split('\n')) expect(l.length).toBeLessThanOrEqual(80);
  });

  it('lists snapshots with where they live and what they keep', () => {
    const store = storeFrom(undefined, { view: 'snapshots' });
    store.setState((s) => ({
      data: {
        ...s.data,
        snapshots: [
          {
            snapshotID: 'snap-1',
            names: ['base'],
            sandboxID: 'sb-0001',
            nodeID: 'node-a',
            templateID: 'host',
            runtime: 'ns',
            keeps: 'filesystem',
            spec: { cpus: 1, memoryMiB: 256, diskGiB: 1 },
            metadata: {},
            createdAt: new Date().toISOString(),
          },
        ],
      },
    }));
    const f = render(withStore(store, <SnapshotsView height={8} width={100} />)).lastFrame()!;
    expect(f).toMatch(/^snap-1 +base +sb-0001 +node-a +host +filesystem/m);
    expect(f.split('\n').join(' ')).toContain('from sb-0001 on node-a, template host, ns keeps filesystem');
  });

  it('lists API keys with each quota as used/limit, marks one at its limit, and shows no secret', () => {
    const key = (over: Partial<KeyView>): KeyView => ({
      id: 'key-0a1b2c3d',
      name: 'admin',
      role: 'admin',
      quotas: {},
      createdAt: '2026-12-01T10:00:00.000Z',
      createdBy: 'system',
      usage: { sandboxes: 0, vcpus: 0, memoryMiB: 0 },
      limits: { sandboxes: 0, vcpus: 0, memory_mib: 0, creates_per_sec: 0 },
      ...over,
    });
    const rl = key({
      id: 'key-9f8e7d6c',
      name: 'rl-team',
      role: 'user',
      quotas: { sandboxes: 20, memory_mib: 8192 },
      createdBy: 'key-0a1b2c3d',
      usage: { sandboxes: 20, vcpus: 2.5, memoryMiB: 5120 },
      limits: { sandboxes: 20, vcpus: 0, memory_mib: 8192, creates_per_sec: 5 },
    });
    const store = storeFrom(undefined, { view: 'keys' });
    // A record with a field no view should ever print: were it sent, nothing shows it.
    store.setState((s) => ({ data: { ...s.data, keys: [key({}), { ...rl, hash: 'deadbeefcafe' } as KeyView] } }));
    store.setState((s) => ({ ui: { ...s.ui, selected: { keys: 'key-9f8e7d6c' } } }));
    const f = render(withStore(store, <KeysView height={8} width={80} />)).lastFrame()!;
    expect(f).toMatch(/^KEY +NAME +ROLE +SANDBOXES +VCPUS +MEM +CREATE\/S +CREATED/m);
    expect(f).toMatch(/^key-0a1b2c3d +admin +admin +0\/- +0\/- +0Mi\/- +- +2026-12-01/m);
    expect(f).toMatch(/^key-9f8e7d6c +rl-team +user +20\/20 +2\.5\/- +5\.0Gi\/8\.0Gi +5 +2026-12-01/m);
    const detail = f.split('\n').join(' ').replace(/\s+/g, ' ');
    expect(detail).toContain(
      'holds 20 sandbox(es) of 20, 2.5 vCPU (no limit), 5.0Gi of 8.0Gi, creates/s of 5 | own quotas sandboxes=20 memory_mib=8192, the rest default | created 2026-12-01T10:00:00.000Z by key-0a1b2c3d',
    );
    expect(f).not.toContain('deadbeef');
    for (const l of f.split('\n')) expect(l.length).toBeLessThanOrEqual(80);
  });
});
