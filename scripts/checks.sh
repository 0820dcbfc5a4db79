#!/bin/sh
# npm test's checks, beside the tests (scripts/test.sh): the type check, the lint and the
# layout (Prettier, .prettierrc.json; `npx prettier --write .` fixes it), side by side. Each is one
# single-threaded process over the whole tree (typescript-eslint builds its own program): one after
# the other left a core idle for about a minute of CI.
# Exits non-zero when any fails; all run to the end, so all report.
npm run -s typecheck &
typecheck=$!
npx prettier --check --log-level warn . &
layout=$!
npm run -s lint
lint=$?
wait "$typecheck"
typecheck=$?
wait "$layout"
layout=$?
[ "$layout" -eq 0 ] || echo "checks: layout differs from Prettier's in the files above: npx prettier --write ." >&2
[ "$typecheck" -eq 0 ] && [ "$lint" -eq 0 ] && [ "$layout" -eq 0 ]
