// Colour skins as semantic tokens (components never name a colour). `mono` has none, and
// NO_COLOR (https://no-color.org: any non-empty value) forces it whatever --skin says.

export const SKIN_NAMES = ['dark', 'light', '16', 'mono'] as const;
export type SkinName = (typeof SKIN_NAMES)[number];

export interface Skin {
  name: SkinName;
  ok?: string;
  warn?: string;
  bad?: string;
  accent?: string;
  dim?: string;
  title?: string;
  /** While the stream is STALE: every tone is the dim one and table rows are drawn faint, mono included. */
  faded?: boolean;
}

const SKINS: Record<SkinName, Skin> = {
  dark: { name: 'dark', ok: '#5fd75f', warn: '#ffd75f', bad: '#ff5f5f', accent: '#5fafff', dim: '#8a8a8a', title: '#d7afff' },
  light: { name: 'light', ok: '#007f00', warn: '#875f00', bad: '#c00000', accent: '#0050c0', dim: '#6c6c6c', title: '#6000a0' },
  '16': { name: '16', ok: 'green', warn: 'yellow', bad: 'red', accent: 'cyan', dim: 'gray', title: 'magenta' },
  mono: { name: 'mono' },
};

export function isSkinName(s: string): s is SkinName {
  return (SKIN_NAMES as readonly string[]).includes(s);
}

export function pickSkin(name: SkinName, env: NodeJS.ProcessEnv = process.env): Skin {
  return env.NO_COLOR ? SKINS.mono : SKINS[name];
}

export type Tone = 'ok' | 'warn' | 'bad' | 'accent' | 'dim' | 'title';

export function colorOf(skin: Skin, tone: Tone | undefined): string | undefined {
  if (skin.faded) return skin.dim;
  return tone ? skin[tone] : undefined;
}

const faded = new Map<Skin, Skin>();

/** The skin tables use while their data is stale (one object per skin, so rows re-render only when the state flips). */
export function fadedSkin(skin: Skin): Skin {
  let f = faded.get(skin);
  if (!f) faded.set(skin, (f = { ...skin, faded: true }));
  return f;
}
