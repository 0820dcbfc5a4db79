import { defineConfig } from 'vitest/config';

// Tests create real kernel objects (netns, cgroups, mounts) and start real daemons:
// files run in separate forks, a few at a time, so two cores are not oversubscribed.
export default defineConfig({
  test: {
    include: ['test/**/*.test.ts', 'test/**/*.test.tsx', 'components/**/*.test.tsx', 'src/**/*.test.ts'],
    pool: 'forks',
    maxWorkers: 2,
    testTimeout: 60_000,
    hookTimeout: 60_000,
    reporters: ['default'],
    globalSetup: ['test/global-setup.ts'],
  },
});
