#!/usr/bin/env bash
# The main job: build, convert the default model to .knot, inspect and verify it, generate
# text from it natively and with the wasm module under Node; then serve it as a mesh of
# Workers under `wrangler dev` (scripts/mesh-dev.sh: upload to local R2 with progress,
# start every Worker, print the URL, one chat completion through the OpenAI endpoint) and
# keep serving until Ctrl-C (KNOT_ONCE=1: stop after that completion).
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
name=$(basename "$model"); name=${name%.*}
knot=build/$name.knot
rm -f "$knot"
echo "== convert $model -> $knot" >&2
$KNOT convert "$model" "$knot"
echo "== inspect" >&2
$KNOT inspect "$knot"
echo "== verify" >&2
$KNOT verify "$knot"
echo "== generate (native)" >&2
$KNOT generate "$knot" -p "$prompt" -n 64
echo
echo "== generate (wasm under Node)" >&2
node bin/knotwork.mjs generate "$knot" -p "$prompt" -n 64
echo
bash scripts/mesh-dev.sh "$knot" "${KNOT_MESSAGE:-Tell me a story.}"
