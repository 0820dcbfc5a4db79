#!/bin/sh
# npm test: the tests (vitest run, with npm test's arguments) and, beside them at the lowest CPU
# priority, the checks (scripts/checks.sh: type check, lint, layout). The suite leaves about a
# fifth of the two cores idle (waits on daemons, timers, the kernel's cleanup); the checks, about
# 90 s of CPU and 49 s alone, ran before it and added their whole time to CI. At nice 19 they take
# only what the tests leave. Exits non-zero when either fails; the checks report after the tests.
out=$(mktemp)
start=$(date +%s)
(
  nice -n 19 scripts/checks.sh
  rc=$?
  echo "npm test: the checks ended (exit $rc) $(($(date +%s) - start)) s after the start"
  exit "$rc"
) >"$out" 2>&1 &
checks=$!
vitest run "$@"
tests=$?
wait "$checks"
checks=$?
cat "$out"
rm -f "$out"
[ "$checks" -eq 0 ] || echo "npm test: the checks failed (scripts/checks.sh, above)" >&2
[ "$tests" -eq 0 ] && [ "$checks" -eq 0 ]
