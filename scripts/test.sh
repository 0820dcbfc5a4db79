#!/bin/sh
# npm test: the tests, with the type check and the lint (scripts/checks.sh) running beside them
# instead of before them. The suite leaves its two cores about 18% idle (its daemons wait on the
# kernel and on each other), and the checks, about 100 s of CPU in two single-threaded processes,
# ran alone for about 55 s of wall time before the first test started.
# Exits non-zero when a test or a check fails; the checks' output follows the tests'.
log=$(mktemp)
scripts/checks.sh >"$log" 2>&1 &
checks=$!
vitest run "$@"
tests=$?
wait "$checks"
checked=$?
cat "$log"
rm -f "$log"
[ "$checked" -eq 0 ] || echo "npm test: the type check or the lint failed (above)" >&2
[ "$tests" -eq 0 ] && [ "$checked" -eq 0 ]
