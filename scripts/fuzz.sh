#!/usr/bin/env bash
# scripts/fuzz.sh [SECONDS] [NAME...] — builds build-asan (clang-14: ASan + UBSan, libFuzzer
# coverage; also the GoogleTest suite under sanitizers) and runs each libFuzzer harness
# tests/fuzz/fuzz_NAME.cpp for SECONDS (default 60) on its seed corpus tests/fuzz/corpus/NAME,
# and each JS harness tests/fuzz/fuzz_NAME.mjs (the wire frame) for SECONDS. A NAME with both
# (frame: the C++ codec core/net/frame.h and the JS one) runs both: NAME is the libFuzzer
# harness, NAME-js the JS one (also as arguments: `fuzz.sh 60 frame frame-js`).
# New inputs go to build-asan/fuzz/NAME (the repo corpus stays small); a crash, leak, UB
# report, timeout or allocation past 1 GiB stops that harness and leaves the input in
# build-asan/fuzz/NAME-crash-*. One JSON line per harness: {"harness", "seconds", "execs",
# "status"}; exit status 1 when any harness failed.
#   --build-only   build, run nothing
set -uo pipefail
cd "$(dirname "$0")/.."
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
# -g (build-asan) makes ccache hash the working directory; the objects do not depend on it
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
secs=60
names=()
build_only=0
for a in "$@"; do
  case "$a" in
    --build-only) build_only=1 ;;
    [0-9]*) secs=$a ;;
    *) names+=("$a") ;;
  esac
done
jobs=$(nproc 2>/dev/null || echo 2)
cxx=$(command -v clang++-14 || command -v clang++) || { echo "fuzz.sh: clang++ not found (scripts/setup.sh installs clang-14)" >&2; exit 1; }
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$cxx" -DKNOT_SANITIZE=ON >/dev/null || exit 1
cmake --build build-asan -j"$jobs" >build-asan/build.log 2>&1 || { tail -40 build-asan/build.log; exit 1; }
[ "$build_only" -eq 1 ] && exit 0

if [ ${#names[@]} -eq 0 ]; then
  for f in tests/fuzz/fuzz_*.cpp; do n=$(basename "$f" .cpp); names+=("${n#fuzz_}"); done
  for f in tests/fuzz/fuzz_*.mjs; do n=$(basename "$f" .mjs); names+=("${n#fuzz_}-js"); done
fi
export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=0:abort_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
rc=0
total=0
for arg in "${names[@]}"; do
  # NAME: the libFuzzer harness when there is one, else the JS one; NAME-js: the JS one
  n=${arg%-js}
  js=0
  if [ "$arg" != "$n" ] || [ ! -f tests/fuzz/fuzz_"$n".cpp ]; then js=1; fi
  [ "$js" -eq 1 ] && [ ! -f tests/fuzz/fuzz_"$n".mjs ] && { echo "fuzz.sh: no harness tests/fuzz/fuzz_$n.mjs" >&2; rc=1; continue; }
  label=$n; [ "$js" -eq 1 ] && [ -f tests/fuzz/fuzz_"$n".cpp ] && label=$n-js
  work=build-asan/fuzz/$n
  mkdir -p "$work"
  log=build-asan/fuzz/$label.log
  if [ "$js" -eq 1 ]; then
    # a JS harness (seeded mutation, no libFuzzer): prints its own JSON line with "execs"
    nice node tests/fuzz/fuzz_"$n".mjs "$secs" >"$log" 2>&1
    st=$?
    execs=$(grep -oE '"execs":[0-9]+' "$log" | tail -1 | grep -oE '[0-9]+$' || echo 0)
  else
    nice build-asan/bin/fuzz_"$n" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
      -print_final_stats=1 -artifact_prefix="build-asan/fuzz/$n-" "$work" tests/fuzz/corpus/"$n" >"$log" 2>&1
    st=$?
    execs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo 0)
  fi
  total=$((total + ${execs:-0}))
  status=ok
  if [ $st -ne 0 ]; then status=fail; rc=1; grep -E 'ERROR|SUMMARY|runtime error|==[0-9]+==' "$log" | head -5 >&2; fi
  echo "{\"harness\": \"$label\", \"seconds\": $secs, \"execs\": ${execs:-0}, \"status\": \"$status\"}"
done
echo "{\"total_execs\": $total, \"date\": \"$(date -u +%Y-%m-%dT%H:%MZ)\"}"
exit $rc
