// A full-body text that scrolls (help, describe): lines wrapped to the width under their own
// indent, a title line with the position, and the visible slice. The farthest it can scroll is
// reported back so the scroll keys stop at the end.
import React, { useEffect, useMemo } from 'react';
import { Text } from 'ink';
import { cut } from '../src/tui/format.js';
import { colorOf, type Skin } from '../src/tui/skins.js';

/**
 * Wraps each line to `width` at spaces, keeping its own spacing (aligned columns stay aligned);
 * continuation lines go under the line's indent plus `hang`. Pure.
 */
export function paneLines(lines: readonly string[], width: number, hang = 0): string[] {
  return lines.flatMap((l) => {
    if (l.length <= width) return [l];
    const lead = l.length - l.trimStart().length;
    const pad = ' '.repeat(Math.min(lead + hang, Math.floor(width / 2)));
    const out: string[] = [];
    let rest = l;
    while (rest.length > (out.length ? width - pad.length : width)) {
      const room = out.length ? width - pad.length : width;
      let at = rest.lastIndexOf(' ', room);
      if (at <= (out.length ? 0 : lead)) at = room;
      out.push((out.length ? pad : '') + rest.slice(0, at).trimEnd());
      rest = rest.slice(at).trimStart();
    }
    out.push((out.length ? pad : '') + rest);
    return out;
  });
}

export interface PaneProps {
  title: string;
  lines: readonly string[];
  offset: number;
  height: number;
  width: number;
  skin: Skin;
  /** Extra indent of continuation lines (help: under the description column). */
  hang?: number;
  onMax?: (max: number) => void;
}

export function Pane({ title, lines, offset, height, width, skin, hang = 0, onMax }: PaneProps) {
  const all = useMemo(() => paneLines(lines, width, hang), [lines, width, hang]);
  const h = Math.max(1, height - 1);
  const max = Math.max(0, all.length - h);
  useEffect(() => onMax?.(max), [max, onMax]);
  const start = Math.min(offset, max);
  const shown = all.slice(start, start + h);
  const position = all.length > h ? `  ${start + 1}-${start + shown.length} of ${all.length}, j/k scroll` : '';
  return (
    <>
      <Text bold color={colorOf(skin, 'title')}>
        {cut(`${title}${position}   esc closes`, width)}
      </Text>
      {shown.map((l, i) => (
        <Text key={i} wrap="truncate">
          {l || ' '}
        </Text>
      ))}
    </>
  );
}
