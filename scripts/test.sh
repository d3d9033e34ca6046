#!/usr/bin/env bash
# Every test: installs, builds native + wasm, runs GoogleTest (ctest) and node --test.
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
took() { echo "test.sh: $1 took $((SECONDS - t0)) s" >&2; t0=$SECONDS; }
bash scripts/setup.sh || exit 1
took setup
bash scripts/build.sh || exit 1
took build

rc=0
ctest --test-dir build --output-on-failure -j2 2>&1 | tee build/ctest.log || rc=1
took ctest
# Two files at a time (one per core): every server a test starts listens on an ephemeral port
# (serve --port 0, Miniflare's default, mesh-dev.sh on a port the test just had the kernel
# pick), and mesh-dev.sh returns only once wrangler's whole process group is gone, so files
# never collide on a port. docs/testing.md "How node --test runs".
node --test --test-concurrency=2 --test-reporter=tap tests/wasm/ tests/workers/ 2>&1 | tee build/node-test.log || rc=1
took "node --test"

# Sanitizers (scripts/fuzz.sh builds build-asan with clang: ASan + UBSan, -O2 -g): the
# native suite again, then each libFuzzer harness for a few seconds on its seed corpus.
# On by default (CI runs it); KNOT_SANITIZE_TESTS=0 skips it locally. It fits CI's 20-minute
# budget because every compile is ccache-hit in a fresh clone at any path (no absolute paths
# in compile flags, CCACHE_BASEDIR, em++ behind ccache too): see README "Test timing".
rm -f build/ctest-asan.log build/fuzz.log
if [ "${KNOT_SANITIZE_TESTS:-1}" != 0 ]; then
  bash scripts/fuzz.sh --build-only || rc=1
  took "sanitizer build"
  # The statistical tests (thousands of seeded generations: 5 min under ASan) run in the plain
  # ctest above; under the sanitizers their code paths are covered by the greedy and few-seed
  # tests of the same files.
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j2 \
      -E 'SampledGenerationsAreDistributedAsPlainOnes|SchemaAtTemperatureOneOver20Seeds' 2>&1 | tee build/ctest-asan.log || rc=1
  took "ctest (ASan + UBSan)"
  bash scripts/fuzz.sh "${KNOT_FUZZ_SECONDS:-5}" 2>&1 | tee build/fuzz.log || rc=1
  took "fuzz smoke"
  [ -s build/ctest-asan.log ] && grep -qE 'out of [1-9]' build/ctest-asan.log || rc=1
fi

# One closing line over every runner.
native_total=$(grep -oE 'out of [0-9]+' build/ctest.log | tail -1 | grep -oE '[0-9]+' || echo 0)
native_failed=$(grep -oE '[0-9]+ tests failed' build/ctest.log | tail -1 | grep -oE '^[0-9]+' || echo 0)
node_pass=$(grep -E '^# pass ' build/node-test.log | tail -1 | grep -oE '[0-9]+' || echo 0)
node_fail=$(grep -E '^# fail ' build/node-test.log | tail -1 | grep -oE '[0-9]+' || echo 0)
asan_total=$(grep -oE 'out of [0-9]+' build/ctest-asan.log 2>/dev/null | tail -1 | grep -oE '[0-9]+' || echo 0)
asan_failed=$(grep -oE '[0-9]+ tests failed' build/ctest-asan.log 2>/dev/null | tail -1 | grep -oE '^[0-9]+' || echo 0)
fuzz_ok=$(grep -c '"status": "ok"' build/fuzz.log 2>/dev/null || true)
fuzz_fail=$(grep -c '"status": "fail"' build/fuzz.log 2>/dev/null || true)
passed=$((native_total - native_failed + node_pass + asan_total - asan_failed + fuzz_ok))
failed=$((native_failed + node_fail + asan_failed + fuzz_fail))
[ "$failed" -eq 0 ] || rc=1
[ "$passed" -gt 0 ] || rc=1
echo "$passed passed, $failed failed"
exit $rc
