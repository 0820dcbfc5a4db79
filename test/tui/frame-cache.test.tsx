// Ink's output stage replaced (src/tui/frame-cache.ts): the frames are the bytes Ink's own stage
// writes, for the console's every view and overlay over updates and for what the console does not
// draw itself (clips, wide characters, links, other escapes); a changed line is parsed afresh, and
// the cache holds two frames at most.
import React from 'react';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';

// Colours on (before Ink loads), 24-bit, so the lines carry compound SGR codes for the cache to get wrong.
process.env.FORCE_COLOR = '3';
delete process.env.NO_COLOR;
const { Text, Box } = await import('ink');
const { render } = await import('ink-testing-library');
const { installFrameCache } = await import('../../src/tui/frame-cache.js');
const { App } = await import('../../components/App.js');
const { recordingActions, storeFrom } = await import('./console.js');
const { withUsage } = await import('../../src/tui/model.js');
const { pickSkin } = await import('../../src/tui/skins.js');
const { setConn, setUi, flash } = await import('../../src/tui/store.js');

const COLORS = ['red', 'green', 'yellow'] as const;
function Rows({ tick }: { tick: number }) {
  return (
    <Box flexDirection="column">
      {Array.from({ length: 6 }, (_, i) => (
        <Text key={i} color={COLORS[(i + tick) % 3]} inverse={i === tick % 6}>
          {`row ${i} ${i === 2 ? `tick ${tick}` : 'same'}`}
        </Text>
      ))}
    </Box>
  );
}

/** What the console never draws but Ink's stage handles: a horizontal clip, wide characters, a link, other escapes, lines below the frame. */
function Odd({ tick }: { tick: number }) {
  return (
    <Box flexDirection="column" height={8}>
      <Box width={12} overflowX="hidden">
        <Text color="cyan">{`clipped ${tick} ${'x'.repeat(30)}`}</Text>
      </Box>
      <Text>{`\x1b[38;2;255;136;0m24-bit\x1b[39m \x1b[1;3;31mcompound ${tick}\x1b[0m \x1b[38;5;200m256\x1b[m plain`}</Text>
      <Text>
        <Text color="green">漢字 wide {tick}</Text> and 😀 emoji
      </Text>
      <Text>{`\x1b]8;;https://example.com\x07link ${tick}\x1b]8;;\x07 after`}</Text>
      <Text>{`erase\x1b[2K inside ${tick % 2}`}</Text>
      <Text bold dimColor color="#ff8800">
        {`both intensities ${tick}`}
      </Text>
      <Box height={2} overflowY="hidden" flexDirection="column">
        {['a', 'b', 'c', 'd'].map((l) => (
          <Text key={l} backgroundColor="blue">{`${l}${tick}`}</Text>
        ))}
      </Box>
    </Box>
  );
}

function frames(el: (tick: number) => React.ReactElement): string[] {
  const { lastFrame, rerender, unmount } = render(el(0));
  const out = [lastFrame()!];
  for (const t of [1, 2, 1, 0, 4, 4, 5]) {
    rerender(el(t));
    out.push(lastFrame()!);
  }
  unmount();
  return out;
}

const settle = () => new Promise((r) => setImmediate(() => setTimeout(r, 0)));

/** The console itself: every view and overlay, with updates in between; one frame per step. */
async function consoleFrames(): Promise<string[]> {
  const store = storeFrom();
  store.setState((s) => ({ settings: { ...s.settings, skin: pickSkin('dark') } }));
  const r = render(<App store={store} actions={recordingActions()} />);
  const out: string[] = [];
  const steps: (() => void)[] = [
    () => setUi(store, { view: 'nodes', selected: { nodes: 'node-b' } }),
    () => setUi(store, { view: 'sandboxes' }),
    () =>
      store.setState((s) => ({
        data: withUsage(
          s.data,
          s.data.sandboxOrder.map((id, i) => ({
            sandboxID: id,
            cpuPercent: 10 * i,
            memoryBytes: 2 ** 24 * (i + 1),
            memoryLimitBytes: 2 ** 28,
            pids: i + 1,
            diskLimitBytes: 2 ** 30,
            netRxBytes: 1000 * i,
            netTxBytes: 99,
          })),
        ),
      })),
    () =>
      setUi(store, {
        selected: { ...store.getState().ui.selected, sandboxes: store.getState().data.sandboxOrder[1]! },
        marked: [store.getState().data.sandboxOrder[0]!],
      }),
    () => setUi(store, { view: 'pool' }),
    () => setUi(store, { view: 'events' }),
    () => setUi(store, { view: 'config' }),
    () => setUi(store, { view: 'triage' }),
    () =>
      store.setState((s) => ({
        data: {
          ...s.data,
          templates: [
            { templateID: 'host', nodes: ['node-a'] },
            {
              templateID: 'py',
              nodes: ['node-a', 'node-b'],
              digest: 'sha256:0123456789abcdef',
              sizeBytes: 3 * 2 ** 20,
              layers: 2,
              source: 'build',
              build: 'error',
            },
          ],
        },
        ui: { ...s.ui, view: 'templates' },
      })),
    () =>
      store.setState((s) => ({
        data: {
          ...s.data,
          keys: [
            {
              id: 'key-0a1b2c3d',
              name: 'rl',
              role: 'user',
              quotas: { sandboxes: 2 },
              createdAt: '2026-12-01T10:00:00.000Z',
              createdBy: 'system',
              usage: { sandboxes: 2, vcpus: 2, memoryMiB: 512 },
              limits: { sandboxes: 2, vcpus: 0, memory_mib: 0, creates_per_sec: 0 },
            },
          ],
        },
        ui: { ...s.ui, view: 'keys' },
      })),
    () => setUi(store, { view: 'nodes', overlay: { kind: 'help', offset: 3 } }),
    () => setUi(store, { overlay: { kind: 'describe', offset: 0, target: { kind: 'node', id: 'node-b' } } }),
    () => setUi(store, { overlay: { kind: 'describe', offset: 2, target: { kind: 'sandbox', id: store.getState().data.sandboxOrder[0]! } } }),
    () => setUi(store, { overlay: null, view: 'sandboxes', wide: true, pan: 2 }),
    () => flash(store, 'config v3 loaded: 2 change(s)', 'bad', ['a: 1 -> 2', 'b: x -> y']),
    () => setConn(store, { state: 'stale', error: 'ECONNREFUSED', attempt: 2 }),
  ];
  await settle();
  out.push(r.lastFrame()!);
  for (const step of steps) {
    step();
    await settle();
    out.push(r.lastFrame()!);
  }
  r.unmount();
  return out;
}

describe('frame cache', () => {
  beforeAll(() => {
    // The console's clocks (ages, what is left) read the same time in both runs.
    vi.useFakeTimers({ toFake: ['Date'] });
    vi.setSystemTime(new Date('2026-12-02T12:00:00Z'));
  });
  afterAll(() => {
    vi.useRealTimers();
  });

  it('renders the bytes Ink renders alone, and keeps at most two frames of lines', async () => {
    const plain = { rows: frames((t) => <Rows tick={t} />), odd: frames((t) => <Odd tick={t} />), console: await consoleFrames() };
    expect(plain.rows[0]).toContain('\x1b[');
    expect(plain.console.join('\n')).toMatch(/\x1b\[7m/);
    expect(plain.odd[0]).toContain('\x1b[38;2;255;136;0m24-bit');
    expect(plain.odd[1]).toContain('漢字');
    const cache = await installFrameCache();
    expect(cache).not.toBeNull();
    expect(await installFrameCache()).toBe(cache);
    expect(frames((t) => <Rows tick={t} />)).toEqual(plain.rows);
    // Six lines a frame: this frame's map and the last one's, nothing older.
    expect(cache!.previous.styledChars.size).toBeLessThanOrEqual(6);
    expect(cache!.previous.rows.size).toBeLessThanOrEqual(6);
    expect(cache!.current.styledChars.size).toBe(0);
    expect(frames((t) => <Odd tick={t} />)).toEqual(plain.odd);
    const cached = await consoleFrames();
    expect(cached).toHaveLength(plain.console.length);
    for (const [i, f] of cached.entries()) expect(f, `console frame ${i}`).toBe(plain.console[i]);
  });
});
