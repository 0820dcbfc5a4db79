// How much a build context may hold, apart from the recipe code (zod, yaml, tar) that reads it:
// `cubectl` shows the defaults in its help without loading that code (templates/recipe.ts).

/** What a build context may hold: past it `cubectl template build` stops (a link to a big tree is a link, but a big tree is still big). */
export interface ContextBound {
  maxBytes: number;
  maxEntries: number;
}
export const DEFAULT_CONTEXT_BOUND: ContextBound = { maxBytes: 1 << 30, maxEntries: 100_000 };
