#!/usr/bin/env bash
# The engine benchmarks: every row side by side in ONE run, same files, same thread count, release
# build. Prints one JSON line per measurement (also appended to $OUT/rows.jsonl) and, at the end,
# the Markdown rows of BENCHMARKS.md's engine table ($OUT/table.md).
#
# Refuses to run when the 1-minute load average exceeds $MAX_LOAD (0.5): absolute times on a
# busy 2-core machine are meaningless. BENCH_ALLOW_LOAD=1 runs anyway and labels every row
# "loaded" (with the load average seen before it), for checking that the scripts work.
# Between rows the 1-minute average still holds the benchmark's own previous row (2 threads), so
# each row is instead checked by sampling the number of runnable tasks (/proc/loadavg, field 4)
# right before it starts: the least of 5 samples over 1 s above 1 (the sampler itself) means
# another process is busy.
#
# Settings (environment):
#   VENV=/work/venv          Python with torch, transformers, gguf, llama-cpp-python
#                            (scripts/bench_baselines.sh installs the last one)
#   LLAMA_CMD=…              llama.cpp through benches/llama_greedy.c instead of llama-cpp-python
#                            (LLAMA_CMD="$(scripts/llama_system.sh)")
#   THREADS=2                threads for every tool
#   QUICK=1                  small settings (8 new tokens, T = 64 / 128, one rep, no big shapes)
#   BIG=0|1                  the synthetic Llama-3.1-8B / Qwen2-7B rows (default 1 unless QUICK)
#   BIG_DIR=/tmp/sinklab-big where the synthetic GGUFs go (≈ 4.9 + 4.3 GB; reused if present)
#   BIG_SHAPES="llama3.1-8b qwen2-7b"  BIG_T=512
#   BIG_AS_GB=20             address-space limit (prlimit) of the big rows, so that a build that
#                            dequantizes everything to f32 (32 GB) fails instead of exhausting RAM
#   LOAD_MODELS="smollm2 qwen2.5-coder-0.5b gemma3-270m"  GEN_MODELS="smollm2"  FWD_MODELS="smollm2"
#                            (an empty list skips those rows)
#   N_GEN=256 T_FWD=512 REPS=3 T_LONG=2048
#   OUT=out/bench_engine
#   PROFILE=release          cargo profile (PROFILE=dev only to smoke-test the scripts: rows say so)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-/work/venv}; PY="$VENV/bin/python"
THREADS=${THREADS:-2}
MAX_LOAD=${MAX_LOAD:-0.5}
QUICK=${QUICK:-0}
if [ "$QUICK" = 1 ]; then
  N_GEN=${N_GEN:-8}; T_FWD=${T_FWD:-64}; REPS=${REPS:-1}; T_LONG=${T_LONG:-128}; BIG=${BIG:-0}; BIG_T=${BIG_T:-16}
fi
N_GEN=${N_GEN:-256}; T_FWD=${T_FWD:-512}; REPS=${REPS:-3}; T_LONG=${T_LONG:-2048}
BIG=${BIG:-1}; BIG_T=${BIG_T:-512}; BIG_DIR=${BIG_DIR:-/tmp/sinklab-big}; BIG_AS_GB=${BIG_AS_GB:-20}
BIG_SHAPES=${BIG_SHAPES:-"llama3.1-8b qwen2-7b"}
LOAD_MODELS=${LOAD_MODELS-"smollm2 qwen2.5-coder-0.5b gemma3-270m"}
GEN_MODELS=${GEN_MODELS-smollm2}
FWD_MODELS=${FWD_MODELS-smollm2}
OUT=${OUT:-out/bench_engine}
export RAYON_NUM_THREADS=$THREADS OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS
CACHE=${SINKLAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sinklab}

load1() { cut -d' ' -f1 /proc/loadavg; }
runnable() {  # least number of runnable tasks over 5 samples, 0.2 s apart (this sampler counts 1:
  # read by the shell itself, since a pipeline of its own processes was counted too, 1–4 at idle)
  local m=1000 r
  for _ in 1 2 3 4 5; do read -r _ _ _ r _ < /proc/loadavg; r=${r%/*}; [ "$r" -lt "$m" ] && m=$r; sleep 0.2; done
  echo "$m"
}
over() { awk -v l="$1" -v m="$MAX_LOAD" 'BEGIN { exit !(l > m) }'; }
l=$(load1)
if over "$l" && [ "${BENCH_ALLOW_LOAD:-0}" != 1 ]; then
  echo "bench_engine: load average $l > $MAX_LOAD: refusing (machine not idle; BENCH_ALLOW_LOAD=1 labels the rows instead)" >&2
  exit 3
fi
[ -x "$PY" ] || { echo "bench_engine: no python at $PY (VENV)" >&2; exit 2; }
# llama.cpp rows need llama-cpp-python (VENV=$VENV scripts/bench_baselines.sh builds it; on
# machines where its native build crashes, BASELINE_ISA=avx2), or LLAMA_CMD: a command that runs
# benches/llama_greedy.c against a system llama.cpp (LLAMA_CMD="$(scripts/llama_system.sh)" makes
# one from Debian's packages, with no build of llama.cpp). Without either, those rows are skipped,
# each with a row that says so, and the rest of the table is still measured.
LLAMA_CMD=${LLAMA_CMD:-}
LLAMA=1
if [ -n "$LLAMA_CMD" ]; then
  $LLAMA_CMD load "$(ls "$CACHE"/smollm2/model/*.gguf 2>/dev/null | head -1)" "$THREADS" >/dev/null 2>&1 || { echo "bench_engine: LLAMA_CMD ($LLAMA_CMD) does not run" >&2; exit 2; }
else
  "$PY" -c "import llama_cpp" 2>/dev/null || { LLAMA=0; echo "bench_engine: llama-cpp-python missing in $VENV and no LLAMA_CMD: llama.cpp rows skipped (VENV=$VENV scripts/bench_baselines.sh, or LLAMA_CMD=\"\$(scripts/llama_system.sh)\")" >&2; }
fi
llama() {  # llama ROW MODE ARGS...: measure llama.cpp's MODE (load, generate, prefill), or a row saying why not
  local row=$1 mode=$2; shift 2
  if [ "$LLAMA" = 0 ]; then
    printf '{"row": "%s", "side": "llama.cpp", "error": "no llama.cpp: llama-cpp-python not installed in %s and no LLAMA_CMD"}\n' "$row" "$VENV" | tee -a "$ROWS"
  elif [ -n "$LLAMA_CMD" ]; then
    measure "$row" llama.cpp $LLAMA_CMD "$mode" "$@" "$THREADS"
  else
    measure "$row" llama.cpp $BASE "llama-$mode" "$@"
  fi
}
[ -x /usr/bin/time ] || { echo "bench_engine: /usr/bin/time missing (apt-get install time)" >&2; exit 2; }

PROFILE=${PROFILE:-release}
echo "bench_engine: $PROFILE build" >&2
nice -n 5 cargo build --profile "$PROFILE" --quiet --bin sinklab
BENCH_BIN=$(nice -n 5 cargo bench --profile "$PROFILE" --bench engine --no-run --message-format=json 2>/dev/null \
  | "$PY" -c 'import sys, json
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "engine" and m.get("executable"):
        print(m["executable"])')
PDIR=$PROFILE; [ "$PROFILE" = dev ] && PDIR=debug
SINKLAB=${CARGO_TARGET_DIR:-target}/$PDIR/sinklab
[ -x "$BENCH_BIN" ] && [ -x "$SINKLAB" ] || { echo "bench_engine: release build failed" >&2; exit 2; }

mkdir -p "$OUT"; ROWS="$OUT/rows.jsonl"; : > "$ROWS"
COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
CPU=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs)
ISA=$(grep -qw avx512f /proc/cpuinfo && echo avx512 || (grep -qw avx2 /proc/cpuinfo && echo avx2 || echo other))

# measure ROW SIDE CMD...: runs CMD under /usr/bin/time, adds the row label, process wall and max
# RSS, the load average before it, and prints/appends the JSON line. A failing command gives a row
# with its error (the run goes on).
measure() {
  local row=$1 side=$2; shift 2
  local l; l=$(load1)
  local busy; busy=$(runnable)
  local tf; tf=$(mktemp)
  local js
  js=$(/usr/bin/time -f '%e %M' -o "$tf" "$@" 2>"$OUT/last_stderr.txt" | tail -n 1) || true
  # No JSON line (a crash): the error is the first line of its stderr that is not a backtrace frame.
  local et; et=$(grep -v -E '^\s*$|^\s*[0-9]+: |^\s+at |^stack backtrace|^note: ' "$OUT/last_stderr.txt" | head -n 1 || true)
  BUSY="$busy" ET="$et" JS="$js" ROW="$row" SIDE="$side" LOAD="$l" TF="$tf" COMMIT="$COMMIT" CPU="$CPU" ISA="$ISA" MAXL="$MAX_LOAD" PROFILE="$PROFILE" "$PY" - <<'PY' | tee -a "$ROWS"
import json, os
try:
    d = json.loads(os.environ["JS"])
except ValueError:
    d = {"error": ("not JSON: " + os.environ["JS"][:300]) if os.environ["JS"] else "no output; stderr: " + os.environ["ET"]}
try:
    wall, rss = open(os.environ["TF"]).read().split()[-2:]
    d["proc_wall_s"], d["proc_max_rss_kb"] = float(wall), int(rss)
except Exception:
    pass
l = float(os.environ["LOAD"])
d.update(row=os.environ["ROW"], side=os.environ["SIDE"], load_avg=l, runnable_before=int(os.environ["BUSY"]), loaded=int(os.environ["BUSY"]) > 1,
         commit=os.environ["COMMIT"], profile=os.environ["PROFILE"], cpu=os.environ["CPU"], cpu_isa=os.environ["ISA"])
print(json.dumps(d))
PY
  if grep -q '"error"' <(tail -n 1 "$ROWS"); then
    echo "bench_engine: $row/$side failed; stderr tail:" >&2; tail -n 5 "$OUT/last_stderr.txt" >&2
  fi
  rm -f "$tf"
}

gguf_of() {  # the GGUF file of a packaged model
  local f; f=$(ls "$CACHE/$1/model/"*.gguf 2>/dev/null | head -n 1)
  [ -n "$f" ] || { echo "bench_engine: $1 not fetched (sinklab fetch $1)" >&2; return 1; }
  echo "$f"
}
BASE="$PY benches/engine_baselines.py --threads $THREADS"
TEXT="The theory of attention sinks says that heads park their attention on the first token when they have nothing to do."

# 0. The machine's limits every row is compared with: f32 GEMM (faer, THREADS threads) and copy
#    bandwidth.
measure "limits/machine" sinklab "$BENCH_BIN" limits

# 1. Load of each packaged model: sinklab vs llama.cpp, same GGUF.
for m in $LOAD_MODELS; do
  f=$(gguf_of "$m") || continue
  measure "load/$m" sinklab "$BENCH_BIN" load "$f"
  llama "load/$m" load "$f"
done

# 2. Greedy generation, N_GEN tokens after a 32-token prompt, KV cache: sinklab, llama.cpp, transformers.
for m in $GEN_MODELS; do
  f=$(gguf_of "$m") || continue
  ids=$("$BENCH_BIN" ids "$f" "$TEXT" 32)
  measure "generate/$m" sinklab "$BENCH_BIN" generate "$f" "$ids" "$N_GEN"
  measure "generate/$m" sinklab-f32 env SINKLAB_WEIGHTS=f32 "$BENCH_BIN" generate "$f" "$ids" "$N_GEN"
  measure "generate/$m" sinklab-q8 env SINKLAB_MATMUL=q8 "$BENCH_BIN" generate "$f" "$ids" "$N_GEN"
  llama "generate/$m" generate "$f" "$ids" "$N_GEN"
  measure "generate/$m" transformers $BASE torch-generate "$f" "$ids" "$N_GEN"
done

# 3. Forward with full capture at T_FWD: sinklab (every capture point) vs transformers eager with
#    attentions + hidden states.
for m in $FWD_MODELS; do
  f=$(gguf_of "$m") || continue
  ids=$("$BENCH_BIN" ids "$f" "$TEXT" "$T_FWD")
  measure "forward/$m" sinklab "$BENCH_BIN" forward "$f" "$ids" "$REPS" all
  measure "forward/$m" sinklab-f32 env SINKLAB_WEIGHTS=f32 "$BENCH_BIN" forward "$f" "$ids" "$REPS" all
  measure "forward/$m" transformers $BASE torch-forward "$f" "$ids" "$REPS"
  # Prefill: the same ids through a plain forward (no capture), exact and q8, against
  # llama.cpp's evaluation of them from an empty cache.
  measure "prefill/$m" sinklab "$BENCH_BIN" forward "$f" "$ids" "$REPS" none
  measure "prefill/$m" sinklab-q8 env SINKLAB_MATMUL=q8 "$BENCH_BIN" forward "$f" "$ids" "$REPS" none
  llama "prefill/$m" prefill "$f" "$ids" "$REPS"
done

# 4. Peak RSS of `sinklab real --json` (every statistic) at T_LONG, against the loaded model's
#    resident size (the sinklab load row of the same model, above).
for m in $FWD_MODELS; do
  f=$(gguf_of "$m") || continue
  ids=$("$PY" -c "import random; random.seed(0); print(','.join(str(random.randrange(3, 49000)) for _ in range($T_LONG - 1)))")
  measure "stats_T$T_LONG/$m" sinklab sh -c '"$0" real --model "$1" --tokens "$2" --bos yes --json > "$3" && echo "{\"tool\": \"sinklab\", \"mode\": \"real --json\", \"tokens\": $4}"' "$SINKLAB" "$f" "$ids" "$OUT/stats_T$T_LONG-$m.json" "$T_LONG"
done

# 5. Synthetic paper-scale shapes (random weights): `sinklab real` at BIG_T (peak RSS, wall) and
#    seconds per plain forward, beside llama.cpp's prefill of the same file.
if [ "$BIG" = 1 ]; then
  mkdir -p "$BIG_DIR"
  for s in $BIG_SHAPES; do
    f="$BIG_DIR/$s-q4km-seed0.gguf"
    if [ ! -s "$f" ]; then
      measure "synth/$s" sinklab sh -c '"$0" synth --shape "$1" --dtype q4km --seed 0 --out "$2" >/dev/null && printf "{\"tool\": \"sinklab\", \"mode\": \"synth\", \"bytes\": %s}\n" "$(stat -c %s "$2")"' "$SINKLAB" "$s" "$f"
    fi
    ids=$("$PY" -c "import random; random.seed(1); print(','.join(['1'] + [str(random.randrange(3, 100000)) for _ in range($BIG_T - 1)]))")
    measure "big_real/$s" sinklab prlimit --as=$((BIG_AS_GB << 30)) sh -c '"$0" real --model "$1" --tokens "$2" --bos no --json >/dev/null && echo "{\"tool\": \"sinklab\", \"mode\": \"real --json\", \"file_bytes\": $(stat -c %s "$1")}"' "$SINKLAB" "$f" "$ids"
    measure "big_forward/$s" sinklab prlimit --as=$((BIG_AS_GB << 30)) "$BENCH_BIN" forward "$f" "$ids" 1 none
    # llama.cpp's prefill of the same file and ids, beside it.
    llama "big_forward/$s" prefill "$f" "$ids" 1
  done
fi

# The Markdown rows.
ROWS="$ROWS" CACHE="$CACHE" "$PY" benches/engine_table.py | tee "$OUT/table.md"
