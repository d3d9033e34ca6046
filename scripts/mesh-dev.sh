#!/usr/bin/env bash
# mesh-dev.sh — serve MODEL.knot as a whole mesh under `wrangler dev`, locally: upload it to
# local R2 (progress bar), write the Worker configs for a topology cut from its header
# (scripts/mesh-config.mjs: the entry + one script per station and vocab shard + the
# warden), start them all in one `wrangler dev`, print the URL, send one chat completion
# through the OpenAI endpoint and print it, then keep serving until Ctrl-C.
#   usage: scripts/mesh-dev.sh MODEL.knot [MESSAGE]
#   env: KNOT_PORT (8787), KNOT_STATIONS (2), KNOT_SHARDS (2), KNOT_API_KEY (none),
#        KNOT_ONCE=1 (stop after the chat completion), KNOT_MESH_DIR (build/mesh)
set -euo pipefail
cd "$(dirname "$0")/.."
knot=${1:?usage: scripts/mesh-dev.sh MODEL.knot [MESSAGE]}
message=${2:-Tell me a story.}
port=${KNOT_PORT:-8787}
dir=${KNOT_MESH_DIR:-build/mesh}
export CLOUDFLARE_CF_FETCH_ENABLED=false WRANGLER_SEND_METRICS=false

mkdir -p "$dir"
echo "== mesh: Worker configs for $knot" >&2
mapfile -t configs < <(node scripts/mesh-config.mjs "$knot" "$dir" --stations "${KNOT_STATIONS:-2}" --shards "${KNOT_SHARDS:-2}")
echo "== mesh: upload $knot to local R2" >&2
node bin/knotwork.mjs upload "$knot" --persist "$dir/state/v3"

args=()
for c in "${configs[@]}"; do args+=(-c "$c"); done
vars=()
if [ -n "${KNOT_API_KEY:-}" ]; then vars=(--var "API_KEY:$KNOT_API_KEY"); fi
echo "== mesh: wrangler dev (${#configs[@]} Worker scripts) on port $port" >&2
setsid npx wrangler dev "${args[@]}" "${vars[@]}" --persist-to "$dir/state" --ip 127.0.0.1 --port "$port" \
  --show-interactive-dev-session=false >"$dir/wrangler.log" 2>&1 &
pid=$!  # its own process group (setsid): npx, wrangler and workerd end together
# TERM the group, then wait for every member (workerd outlives npx by a moment; under load the
# port kept answering after this script had exited), KILL what is left after 10 s.
stop() {
  kill -TERM -- "-$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 -- "-$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL -- "-$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  # a KILLed member is gone (its sockets closed) only once the kernel has reaped it
  for _ in $(seq 1 50); do kill -0 -- "-$pid" 2>/dev/null || break; sleep 0.1; done
}
trap stop EXIT
trap 'exit 130' INT TERM

url="http://127.0.0.1:$port"
for _ in $(seq 1 240); do
  if ! kill -0 "$pid" 2>/dev/null; then cat "$dir/wrangler.log" >&2; echo "mesh: wrangler dev exited" >&2; exit 1; fi
  if curl -sf -o /dev/null -H "authorization: Bearer ${KNOT_API_KEY:-}" "$url/v1/models"; then break; fi
  sleep 0.5
done
curl -sf -o /dev/null -H "authorization: Bearer ${KNOT_API_KEY:-}" "$url/v1/models" || { cat "$dir/wrangler.log" >&2; echo "mesh: no answer on $url" >&2; exit 1; }
echo "== mesh: serving at $url  (OpenAI API: $url/v1, chat page: $url/; log: $dir/wrangler.log)" >&2
echo "== mesh: one chat completion through $url/v1/chat/completions" >&2
OPENAI_API_KEY=${KNOT_API_KEY:-} node scripts/chat-once.mjs "$url" "$message" 48
if [ "${KNOT_ONCE:-}" = 1 ]; then exit 0; fi
echo "== mesh: serving at $url until Ctrl-C" >&2
wait "$pid"
