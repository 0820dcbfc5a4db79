// What one benchmark iteration does, apart from the runner and its connect/protobuf client:
// `cubectl` lists the modes in its help without loading them (bench/runner.ts).
export type BenchMode = 'create-only' | 'create-delete' | 'create-exec-delete' | 'pause-resume';
export const BENCH_MODES: readonly BenchMode[] = ['create-only', 'create-delete', 'create-exec-delete', 'pause-resume'];
