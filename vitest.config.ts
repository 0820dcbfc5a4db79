import { defineConfig } from 'vitest/config';

// Tests create real kernel objects (netns, cgroups, mounts) and start real daemons:
// files run in separate forks, two at a time on two cores (three took a whole run from 853 to 837 s
// with the cores 9% idle instead of 18%: the suite is CPU-bound, and more workers only add load).
// The microvm project boots emulated guests (seconds each under TCG): its own, longer timeouts.
// vitest queues the projects' files by project name, and its one file (about 70 s on CI) ran last
// while the other worker had nothing left: named so it sorts first, it starts beside the others.
const MICROVM = ['test/microvm/**/*.test.ts'];
// The chaos test (2 replicas, 3 nodes, their own Redis and MariaDB, faults for a minute or more):
// the longest file of the suite, so it too has a project whose name sorts before the others'.
const CHAOS = ['test/chaos/**/*.test.ts'];
// Files that run in the test process alone (no daemon, no kernel object, no module-level hook or
// process-wide setting such as FORCE_COLOR) share one process per worker instead of one each
// (isolate: false): a fresh process and its imports per file cost more than the tests of most of
// these. These files (88 when measured): 15.5 and 21.5 s shared against 124 and 97 s one process each
// (alternating, load 9-10).
// A file not listed runs in a process of its own, the safe default; one listed must leave nothing
// behind that the next file could see.
const SHARED = [
  'components/**/*.test.tsx',
  'test/{model,scheduler,control,alerts}/**/*.test.ts',
  'test/tui/{at80,describe,format,keymap,log-follow,model,preview,reconnect,screen,skins,sorting,sse,triage}.test.{ts,tsx}',
  'test/cubelet/{deaths,end-status,fences,node-events,heartbeat-still,host-claims,node-view,output-log,state-machine,usage}.test.ts',
  'test/config/{edit,paths,shipped,solo-restart,store}.test.ts',
  'test/bench/{runner,stats,e2b-http-replicas}.test.ts',
  'test/e2b/{connect-protocol,matrix,signature,watchers,wire}.test.ts',
  'test/network/{egress-rules,host-scan,ipam,nft-batch,refill,wait-stats}.test.ts',
  'test/cli/{client-stream,help,terminal}.test.ts',
  'test/api/{auth,dns-answer,http-body}.test.ts',
  'test/templates/{build-node,build-status,layer-gc,pull,recipe,relay,steps}.test.ts',
  'test/runtime/{fsx,microvm-agent-channel,ns-builtins,sim-driver}.test.ts',
  'test/cluster/{placement-overlay,sync}.test.ts',
  'test/store/group-commit.test.ts',
];
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
          exclude: [...MICROVM, ...CHAOS, ...SHARED, '**/node_modules/**'],
        },
      },
      { extends: true, test: { name: 'shared', include: SHARED, isolate: false } },
      { extends: true, test: { name: 'chaos', include: CHAOS } },
      { extends: true, test: { name: 'microvm', include: MICROVM, testTimeout: 240_000, hookTimeout: 240_000 } },
    ],
  },
});
