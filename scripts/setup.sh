#!/usr/bin/env bash
# Installs what the builds and tests need on a fresh Debian 12 (apt + npm only).
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(build-essential cmake git googletest libxxhash0 libgtest-dev libgmock-dev nlohmann-json3-dev emscripten nodejs npm chromium
      clang libclang-rt-14-dev ccache libboost-dev
      clang-19 lld-19)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node/npm may come from elsewhere (e.g. NodeSource); only require the commands.
if command -v node >/dev/null && command -v npm >/dev/null; then
  tmp=(); for p in "${missing[@]}"; do [[ $p == nodejs || $p == npm ]] || tmp+=("$p"); done; missing=("${tmp[@]}")
fi
if ((${#missing[@]})); then
  echo "setup: apt-get install ${missing[*]}" >&2
  SUDO=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
    SUDO=sudo
  fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi
