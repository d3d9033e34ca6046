#!/usr/bin/env bash
# build-wasm.sh — compile the C++ core + wasm/ ABI into ONE standalone wasm module,
# build/wasm/knotwork.wasm (no Emscripten JS runtime: bindings/loader.mjs instantiates it),
# and beside it the relaxed-SIMD module build/wasm/knotwork-relaxed.wasm (same ABI; the
# loader picks it only where relaxed SIMD validates and passes a known-answer probe).
#
# The relaxed module: Emscripten 3.1.6's clang-14 has no relaxed-dot builtin, so
# core/kernels/kernels_wasm_relaxed.cpp is compiled by clang-19 against Emscripten's
# sysroot (em++ --cflags), kernels.cpp and wasm/abi.cpp are recompiled by em++ with
# -DKNOT_WASM_RELAXED (Simd table = the relaxed one, kw_relaxed_probe export), every other
# object is the baseline's. It is linked by lld-19's wasm-ld with exactly the wasm-ld
# arguments em++ used for the baseline link (em++ -v), and NOT post-processed by
# binaryen: binaryen 108 decodes the final relaxed opcodes as their pre-final meanings
# and rewrites them. (LLVM 14's wasm-ld drops the opcode's operand, so lld-19 it is.)
# Without clang-19 / lld-19 (scripts/setup.sh installs them) only the baseline is built.
#
# And build/wasm/knotwork-mt.wasm, the threaded module for Node and browsers (not Workers):
# every source again with -pthread -DKNOT_WASM_THREADS, linked by wasm-ld with em++'s link
# arguments, the -mt system libraries and an imported shared memory (see the section below
# and docs/wasm.md); bindings/threads.mjs runs it.
#
# usage: scripts/build-wasm.sh [--clean]
#
# Objects are compiled one at a time (the build machine is shared) and reused when the
# source and every header it includes (em++ -MMD) are older than the object, and the
# flags are unchanged. With ccache on PATH every em++ compile goes through it (base dir =
# the checkout, compiler identified by em++'s version), so a fresh clone at any path (CI)
# reuses the objects another checkout compiled. After linking, the module's import list
# is checked against the imports bindings/loader.mjs provides; anything else fails the build.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$ROOT/build/wasm"
OBJ="$OUT/obj"
INC="$ROOT/build/wasm-include"
export NODE_PATH="${NODE_PATH:-/usr/share/nodejs}"  # Debian's emscripten needs it
cd "$ROOT"  # ccache writes the .d dependency lists relative to the checkout

if [[ "${1:-}" == "--clean" ]]; then rm -rf "$OUT" "$INC"; fi
mkdir -p "$OBJ" "$INC"

# nlohmann_json is header-only; expose ONLY it (never -I/usr/include: glibc headers
# would shadow the wasm sysroot).
if [[ ! -e "$INC/nlohmann" ]]; then ln -s /usr/include/nlohmann "$INC/nlohmann"; fi

# NDEBUG: assert() would pull in stdio (fprintf to stderr -> WASI fd_* imports).
CXXFLAGS_COMMON=(-std=c++20 -DNDEBUG -msimd128 -fwasm-exceptions -Wall -Wextra -Wno-unused-parameter
                 -I"$ROOT/core" -I"$ROOT/wasm" -I"$INC")
# Hot loops get -O3; the rest -O2 keeps the module small and the build short.
opt_for() {
  case "$(basename "$1")" in
    kernels*|quant*|forward*) echo -O3 ;;
    *) echo -O2 ;;
  esac
}
LDFLAGS=(-O2 -msimd128 -fwasm-exceptions -sSTANDALONE_WASM --no-entry
         -sALLOW_MEMORY_GROWTH=1 -sINITIAL_MEMORY=16MB -sMAXIMUM_MEMORY=128MB
         -sTOTAL_STACK=1MB)

# core/sources.txt (the list CMake reads too) minus native-only files, plus the ABI.
SRCS=()
while read -r lib src where; do
  [[ -z "$lib" || "$lib" == \#* || "$where" == native || "$where" == wasm-relaxed ]] && continue
  SRCS+=("$ROOT/core/$src")
done < "$ROOT/core/sources.txt"
for f in "$ROOT"/wasm/*.cpp; do SRCS+=("$f"); done

# Flags fingerprint: a change of flags rebuilds everything.
STAMP="$OBJ/flags.stamp"
# sed, not head: head closes the pipe early and em++ (python) fails with EPIPE under pipefail
EMXX_VERSION="$(em++ --version | sed -n 1p)"
FLAGS_NOW="$EMXX_VERSION ${CXXFLAGS_COMMON[*]}"
CCACHE=()
if command -v ccache >/dev/null; then
  CCACHE=(ccache)
  export CCACHE_BASEDIR="$ROOT" CCACHE_COMPILERCHECK="string:$EMXX_VERSION"
fi
if [[ ! -f "$STAMP" || "$(cat "$STAMP")" != "$FLAGS_NOW" ]]; then
  rm -f "$OBJ"/*.o "$OBJ"/*.d
  printf '%s' "$FLAGS_NOW" > "$STAMP"
fi

# True when obj is missing or older than any dependency listed in its .d file.
stale() {
  local o="$1" d="$2"
  [[ -f "$o" && -f "$d" ]] || return 0
  local deps dep
  deps="$(sed -e 's/^[^:]*://' -e 's/\\$//' "$d")"
  for dep in $deps; do
    [[ -e "$dep" && ! "$dep" -nt "$o" ]] || return 0
  done
  return 1
}

# Compiles run in the background, at most NJOBS at once; each failure is written to FAILS and
# reported (with the compiler's own message above it) once the loop's jobs are done.
NJOBS="${KNOT_JOBS:-$(nproc 2>/dev/null || echo 2)}"
FAILS="$(mktemp)"
trap 'rm -f "$FAILS"' EXIT
bg() {  # bg CMD...: run CMD in the background (throttled)
  while (( $(jobs -rp | wc -l) >= NJOBS )); do wait -n || true; done
  { "$@" || echo "failed: ${*: -1}" >> "$FAILS"; } &
}
bg_wait() {  # wait for every background compile; exit 1 naming the failed outputs
  wait
  if [[ -s "$FAILS" ]]; then cat "$FAILS" >&2; exit 1; fi
}

T0=$(date +%s)
OBJS=()
built=0
for src in "${SRCS[@]}"; do
  rel="${src#$ROOT/}"
  name="${rel//\//_}"
  o="$OBJ/${name%.cpp}.o"
  d="$OBJ/${name%.cpp}.d"
  OBJS+=("$o")
  if stale "$o" "$d"; then
    opt="$(opt_for "$src")"
    echo "em++ $opt $rel" >&2
    bg "${CCACHE[@]}" em++ "${CXXFLAGS_COMMON[@]}" "$opt" -MMD -MF "$d" -c "$src" -o "$o"
    built=$((built + 1))
  fi
done
bg_wait
# Drop objects whose source disappeared.
for o in "$OBJ"/*.o; do
  [[ -e "$o" ]] || continue
  keep=0
  for k in "${OBJS[@]}"; do [[ "$k" == "$o" ]] && keep=1 && break; done
  if [[ $keep == 0 ]]; then rm -f "$o" "${o%.o}.d"; fi
done

WASM="$OUT/knotwork.wasm"
TMPW="$OUT/knotwork.new.wasm"  # em++ picks the output kind from the extension
echo "em++ link (${#OBJS[@]} objects, $built recompiled)" >&2
em++ -v "${LDFLAGS[@]}" "${OBJS[@]}" -o "$TMPW" 2> "$OUT/link.log" || { cat "$OUT/link.log" >&2; exit 1; }

# Import check: the module may import only what bindings/loader.mjs implements.
# (Node 20 parses relaxed SIMD only behind a flag; only the import list is read here.)
check_imports() {
node ${2:-} --input-type=module - "$1" "$ROOT/bindings/loader.mjs" "${3:-PROVIDED_IMPORTS}" <<'JS'
import {readFileSync} from "node:fs";
import {pathToFileURL} from "node:url";
const [wasmPath, loaderPath, listName] = process.argv.slice(2);
const PROVIDED_IMPORTS = (await import(pathToFileURL(loaderPath).href))[listName];
const mod = new WebAssembly.Module(readFileSync(wasmPath));
const imports = WebAssembly.Module.imports(mod).map(i => `${i.module}.${i.name}`);
const bad = imports.filter(i => !PROVIDED_IMPORTS.includes(i));
console.error(`imports: ${imports.join(", ")}`);
if (bad.length) {
  console.error(`build-wasm: unexpected imports (not provided by bindings/loader.mjs): ${bad.join(", ")}`);
  process.exit(1);
}
JS
}
check_imports "$TMPW"
mv "$TMPW" "$WASM"
echo "built $WASM: $(stat -c %s "$WASM") bytes in $(( $(date +%s) - T0 )) s" >&2

# em++'s wasm-ld command line (from the -v log), minus its output and our objects; the
# threaded and relaxed links reuse it.
mapfile -t LDARGS < <(python3 - "$OUT/link.log" "$OBJ" <<'PY'
import shlex, sys
log, objdir = sys.argv[1], sys.argv[2]
args = next(a for a in map(shlex.split, open(log)) if a and "wasm-ld" in a[0].rsplit("/", 1)[-1])[1:]
out, skip = [], False
for a in args:
    if skip: skip = False; continue
    if a == "-o": skip = True; continue
    if a.startswith(objdir + "/"): continue
    out.append(a)
print("\n".join(out))
PY
)

# ---- the threaded module ----------------------------------------------------------------
# build/wasm/knotwork-mt.wasm: every source recompiled with -pthread (atomics, bulk memory)
# and -DKNOT_WASM_THREADS (wasm/abi_threads.cpp's pool; kernel scratch thread_local), linked
# by wasm-ld with em++'s arguments, the -mt system libraries and an imported shared memory
# (--shared-memory --import-memory, same 128 MB cap). No Emscripten pthread JS runtime:
# bindings/threads.mjs instantiates it once per worker thread on the one memory. em++
# refuses -pthread with -sSTANDALONE_WASM, hence the direct wasm-ld link.
T2=$(date +%s)
MOBJ="$OUT/obj-mt"
mkdir -p "$MOBJ"
MT_FLAGS=(-pthread -DKNOT_WASM_THREADS)
MSTAMP="$MOBJ/flags.stamp"
MFLAGS_NOW="$FLAGS_NOW ${MT_FLAGS[*]}"
if [[ ! -f "$MSTAMP" || "$(cat "$MSTAMP")" != "$MFLAGS_NOW" ]]; then
  rm -f "$MOBJ"/*.o "$MOBJ"/*.d
  printf '%s' "$MFLAGS_NOW" > "$MSTAMP"
fi
MOBJS=()
mbuilt=0
for src in "${SRCS[@]}"; do
  rel="${src#$ROOT/}"; name="${rel//\//_}"
  o="$MOBJ/${name%.cpp}.o"; d="$MOBJ/${name%.cpp}.d"
  MOBJS+=("$o")
  if stale "$o" "$d"; then
    opt="$(opt_for "$src")"
    echo "em++ -pthread $opt $rel" >&2
    bg "${CCACHE[@]}" em++ "${CXXFLAGS_COMMON[@]}" "${MT_FLAGS[@]}" "$opt" -MMD -MF "$d" -c "$src" -o "$o"
    mbuilt=$((mbuilt + 1))
  fi
done
bg_wait
for o in "$MOBJ"/*.o; do
  [[ -e "$o" ]] || continue
  keep=0
  for k in "${MOBJS[@]}"; do [[ "$k" == "$o" ]] && keep=1 && break; done
  if [[ $keep == 0 ]]; then rm -f "$o" "${o%.o}.d"; fi
done
MLDARGS=()
for a in "${LDARGS[@]}"; do
  case "$a" in  # the thread-safe builds of the system libraries
    -lc|-ldlmalloc|-lcompiler_rt|-lsockets) MLDARGS+=("$a-mt") ;;
    -lc++-except|-lc++abi-except|-lunwind-except) MLDARGS+=("${a%-except}-mt-except") ;;
    -lGL|-lal|-lhtml5) ;;  # nothing of ours uses them
    *) MLDARGS+=("$a") ;;
  esac
done
MWASM="$OUT/knotwork-mt.wasm"
MTMP="$OUT/knotwork-mt.new.wasm"
echo "wasm-ld link, threaded (${#MOBJS[@]} objects, $mbuilt recompiled)" >&2
wasm-ld-14 -o "$MTMP" "${MOBJS[@]}" "${MLDARGS[@]}" --shared-memory --import-memory --export=_emscripten_thread_init
check_imports "$MTMP" "" PROVIDED_IMPORTS_MT
mv "$MTMP" "$MWASM"
echo "built $MWASM: $(stat -c %s "$MWASM") bytes in $(( $(date +%s) - T2 )) s" >&2

# ---- the relaxed-SIMD module ------------------------------------------------------------
CLANG19=/usr/lib/llvm-19/bin/clang++
LLD19=/usr/lib/llvm-19/bin/wasm-ld
RWASM="$OUT/knotwork-relaxed.wasm"
if [[ ! -x "$CLANG19" || ! -x "$LLD19" ]]; then
  echo "build-wasm: no clang-19/lld-19 (scripts/setup.sh installs them): $RWASM not built" >&2
  rm -f "$RWASM"
  exit 0
fi
T1=$(date +%s)
ROBJ="$OUT/obj-relaxed"
mkdir -p "$ROBJ"
# clang-19 against Emscripten's sysroot: em++'s own compile flags, wasm exceptions, and
# the CPU features of the clang-14 objects plus relaxed SIMD.
read -r -a EMCFLAGS <<< "$(em++ --cflags | sed -n 1p)"
CLANG19_FLAGS=()
for f in "${EMCFLAGS[@]}"; do [[ "$f" == -fignore-exceptions ]] || CLANG19_FLAGS+=("$f"); done
CLANG19_FLAGS+=(-mcpu=mvp -msign-ext -mmutable-globals -msimd128 -mrelaxed-simd)
RSTAMP="$ROBJ/flags.stamp"
RFLAGS_NOW="$FLAGS_NOW | $("$CLANG19" --version | sed -n 1p) ${CLANG19_FLAGS[*]}"
if [[ ! -f "$RSTAMP" || "$(cat "$RSTAMP")" != "$RFLAGS_NOW" ]]; then
  rm -f "$ROBJ"/*.o "$ROBJ"/*.d
  printf '%s' "$RFLAGS_NOW" > "$RSTAMP"
fi
RELAXED_SRCS=()
while read -r lib src where; do
  [[ "$where" == wasm-relaxed ]] && RELAXED_SRCS+=("$ROOT/core/$src")
done < "$ROOT/core/sources.txt"
ROBJS=()
rbuilt=0
for o in "${OBJS[@]}"; do  # baseline objects, minus the two recompiled with -DKNOT_WASM_RELAXED
  case "$(basename "$o")" in core_kernels_kernels.o|wasm_abi.o) ;; *) ROBJS+=("$o") ;; esac
done
for src in "$ROOT/core/kernels/kernels.cpp" "$ROOT/wasm/abi.cpp"; do
  rel="${src#$ROOT/}"; name="${rel//\//_}"
  o="$ROBJ/${name%.cpp}.o"; d="$ROBJ/${name%.cpp}.d"
  ROBJS+=("$o")
  if stale "$o" "$d"; then
    echo "em++ -DKNOT_WASM_RELAXED $rel" >&2
    bg "${CCACHE[@]}" em++ "${CXXFLAGS_COMMON[@]}" -DKNOT_WASM_RELAXED "$(opt_for "$src")" -MMD -MF "$d" -c "$src" -o "$o"
    rbuilt=$((rbuilt + 1))
  fi
done
for src in "${RELAXED_SRCS[@]}"; do
  rel="${src#$ROOT/}"; name="${rel//\//_}"
  o="$ROBJ/${name%.cpp}.o"; d="$ROBJ/${name%.cpp}.d"
  ROBJS+=("$o")
  if stale "$o" "$d"; then
    echo "clang++-19 -O3 $rel" >&2
    bg "$CLANG19" "${CLANG19_FLAGS[@]}" "${CXXFLAGS_COMMON[@]}" -O3 -MMD -MF "$d" -c "$src" -o "$o"
    rbuilt=$((rbuilt + 1))
  fi
done
bg_wait
RTMP="$OUT/knotwork-relaxed.new.wasm"
echo "wasm-ld-19 link (${#ROBJS[@]} objects, $rbuilt recompiled)" >&2
"$LLD19" -o "$RTMP" "${ROBJS[@]}" "${LDARGS[@]}"
check_imports "$RTMP" --experimental-wasm-relaxed-simd
mv "$RTMP" "$RWASM"
echo "built $RWASM: $(stat -c %s "$RWASM") bytes in $(( $(date +%s) - T1 )) s" >&2
