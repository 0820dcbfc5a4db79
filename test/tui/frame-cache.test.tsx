// Ink's parsed lines carried between frames (src/tui/frame-cache.ts): the frames are the same
// bytes as without it, a changed line is parsed afresh, and the cache holds two frames at most.
import React from 'react';
import { describe, expect, it } from 'vitest';

// Colours on (before Ink loads) so the lines carry ANSI styles for the cache to get wrong.
process.env.FORCE_COLOR = '1';
const { Text, Box } = await import('ink');
const { render } = await import('ink-testing-library');
const { installFrameCache } = await import('../../src/tui/frame-cache.js');

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

function frames(): string[] {
  const { lastFrame, rerender, unmount } = render(<Rows tick={0} />);
  const out = [lastFrame()!];
  for (const t of [1, 2, 1, 0, 4, 4, 5]) {
    rerender(<Rows tick={t} />);
    out.push(lastFrame()!);
  }
  unmount();
  return out;
}

describe('frame cache', () => {
  it('renders the same frames as Ink alone, and keeps at most two frames of lines', async () => {
    const plain = frames();
    expect(plain[0]).toContain('\x1b[');
    const cache = await installFrameCache();
    expect(cache).not.toBeNull();
    expect(await installFrameCache()).toBe(cache);
    expect(frames()).toEqual(plain);
    // Six lines a frame: this frame's map and the last one's, nothing older.
    expect(cache!.previous.styledChars.size).toBeLessThanOrEqual(6);
    expect(cache!.current.styledChars.size).toBe(0);
  });
});
