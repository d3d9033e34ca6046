#!/usr/bin/env bash
# Native build (library, CLI build/bin/knot, tests, benchmarks) and the wasm module.
set -euo pipefail
cd "$(dirname "$0")/.."
# Paths relative to the checkout, so other checkouts of the tree hit the same cache.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$jobs"
bash scripts/build-wasm.sh
