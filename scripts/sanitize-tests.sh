#!/usr/bin/env bash
# The GoogleTest suite under ASan + UBSan and a short run of every fuzz harness — the
# sanitizer section of scripts/test.sh on its own (test.sh runs it by default;
# KNOT_SANITIZE_TESTS=0 skips it there).
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/fuzz.sh --build-only || exit 1
rc=0
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j2 || rc=1
bash scripts/fuzz.sh "${KNOT_FUZZ_SECONDS:-5}" || rc=1
exit $rc
