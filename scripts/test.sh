#!/usr/bin/env bash
# Every test: installs, builds native + wasm, runs GoogleTest (ctest) and node --test.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1
bash scripts/build.sh || exit 1

rc=0
ctest --test-dir build --output-on-failure -j2 2>&1 | tee build/ctest.log || rc=1
node --test --test-reporter=tap tests/wasm/ tests/workers/ 2>&1 | tee build/node-test.log || rc=1

# One closing line over both runners.
native_total=$(grep -oE 'out of [0-9]+' build/ctest.log | tail -1 | grep -oE '[0-9]+' || echo 0)
native_failed=$(grep -oE '[0-9]+ tests failed' build/ctest.log | tail -1 | grep -oE '^[0-9]+' || echo 0)
node_pass=$(grep -E '^# pass ' build/node-test.log | tail -1 | grep -oE '[0-9]+' || echo 0)
node_fail=$(grep -E '^# fail ' build/node-test.log | tail -1 | grep -oE '[0-9]+' || echo 0)
passed=$((native_total - native_failed + node_pass))
failed=$((native_failed + node_fail))
[ "$failed" -eq 0 ] || rc=1
[ "$passed" -gt 0 ] || rc=1
echo "$passed passed, $failed failed"
exit $rc
