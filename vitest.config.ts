import { defineConfig } from 'vitest/config';

// Tests create real kernel objects (netns, cgroups, mounts) and start real daemons:
// files run in separate forks, two at a time on two cores (three took a whole run from 853 to 837 s
// with the cores 9% idle instead of 18%: the suite is CPU-bound, and more workers only add load).
// The microvm project boots emulated guests (seconds each under TCG): its own, longer timeouts.
// vitest queues the projects' files by project name, and its one file (about 70 s on CI) ran last
// while the other worker had nothing left: named so it sorts first, it starts beside the others.
const MICROVM = ['test/microvm/**/*.test.ts'];
export default defineConfig({
  test: {
    pool: 'forks',
    maxWorkers: 2,
    testTimeout: 60_000,
    hookTimeout: 60_000,
    reporters: ['default'],
    globalSetup: ['test/global-setup.ts'],
    projects: [
      {
        extends: true,
        test: {
          name: 'node',
          include: ['test/**/*.test.ts', 'test/**/*.test.tsx', 'components/**/*.test.tsx', 'src/**/*.test.ts'],
          exclude: [...MICROVM, '**/node_modules/**'],
        },
      },
      { extends: true, test: { name: 'microvm', include: MICROVM, testTimeout: 240_000, hookTimeout: 240_000 } },
    ],
  },
});
