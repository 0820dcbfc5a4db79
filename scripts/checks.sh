#!/bin/sh
# npm test's checks before the tests: the type check and the lint, side by side. Each is one
# single-threaded process over the whole tree (typescript-eslint builds its own program), and
# nothing else runs then: one after the other left a core idle for about a minute of CI.
# Exits non-zero when either fails; both always run to the end, so both report.
npm run -s typecheck &
typecheck=$!
npm run -s lint
lint=$?
wait "$typecheck"
typecheck=$?
[ "$typecheck" -eq 0 ] && [ "$lint" -eq 0 ]
