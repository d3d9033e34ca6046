#!/usr/bin/env bash
# The main job: build, convert the default model to .knot, inspect and verify it,
# then generate text from it natively and with the wasm module under Node.
# Default model: ../shared/models/stories260K.gguf when present, else a random-weight
# model made with `knot synth` (its text is gibberish; it says so).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh >/dev/null

KNOT=build/bin/knot
model=${KNOT_MODEL:-../shared/models/stories260K.gguf}
prompt=${KNOT_PROMPT:-Once upon a time}
if [ ! -f "$model" ]; then
  echo "run: $model not found; generating a random-weight llama with knot synth (output will be gibberish)" >&2
  model=build/default-synth.gguf
  $KNOT synth --arch llama --hidden 256 --layers 4 --heads 8 --kv-heads 4 --ffn 768 --vocab 512 --type q8_0 "$model"
fi
echo "== convert $model -> build/default.knot" >&2
$KNOT convert "$model" build/default.knot
echo "== inspect" >&2
$KNOT inspect build/default.knot
echo "== verify" >&2
$KNOT verify build/default.knot
echo "== generate (native)" >&2
$KNOT generate build/default.knot -p "$prompt" -n 64
echo
echo "== generate (wasm under Node)" >&2
node bin/knotwork.mjs generate build/default.knot -p "$prompt" -n 64
echo
