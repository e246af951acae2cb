#!/usr/bin/env bash
# The engine and training rows of BENCHMARKS.md in one run, side by side:
#   1. scripts/bench_engine.sh on SmolLM2 (machine limits, generation, T = 512 full-capture
#      forward, T = 2048 statistics) against transformers (and llama.cpp when installed);
#   2. `cargo bench --bench train_step` three times (sinklab and PyTorch, each ratio refused
#      when another process was runnable before a side ran).
# With BASE_BENCH_DIR pointing at the release `deps/` of an earlier commit's build
# (`git worktree add /tmp/base <rev> && CARGO_TARGET_DIR=/tmp/base-target cargo build --release
# --bench engine --bench train_step`), the same forward and training rows of that build are
# interleaved with this one's (before / after in one run).
#
# Settings: VENV (default /work/venv), OUT (default out/bench_speed), THREADS (2).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-/work/venv}
OUT=${OUT:-out/bench_speed}
THREADS=${THREADS:-2}
export RAYON_NUM_THREADS=$THREADS
mkdir -p "$OUT"
CACHE=${SINKLAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sinklab}
M=$(ls "$CACHE"/smollm2/model/*.gguf | head -n 1)

newest() { ls -t "$1"/"$2"-* 2>/dev/null | grep -v '\.d$' | head -n 1; }
runnable() {  # other runnable tasks: least of 5 samples minus this sampler
  local m=1000 r
  for _ in 1 2 3 4 5; do read -r _ _ _ r _ < /proc/loadavg; r=${r%/*}; [ "$r" -lt "$m" ] && m=$r; sleep 0.2; done
  echo $((m - 1))
}

echo "== 1. engine rows (scripts/bench_engine.sh)" >&2
VENV=$VENV OUT="$OUT/engine" LOAD_MODELS=smollm2 GEN_MODELS=smollm2 FWD_MODELS=smollm2 BIG=0 \
  THREADS=$THREADS scripts/bench_engine.sh

cargo build --release --quiet --bench engine --bench train_step
NEW=${CARGO_TARGET_DIR:-target}/release/deps
echo "== 2. training step, 3 runs (cargo bench --bench train_step)" >&2
for i in 1 2 3; do
  if [ -n "${BASE_BENCH_DIR:-}" ]; then
    echo "-- before (BASE_BENCH_DIR), run $i, other runnable tasks: $(runnable)"
    SINKLAB_PYTHON="$VENV/bin/python" "$(newest "$BASE_BENCH_DIR" train_step)"
  fi
  echo "-- after (this commit), run $i"
  SINKLAB_PYTHON="$VENV/bin/python" "$(newest "$NEW" train_step)"
done | tee "$OUT/train_step.txt"

if [ -n "${BASE_BENCH_DIR:-}" ]; then
  echo "== 3. forward T = 512, full capture, before / after, both weight modes" >&2
  IDS=$("$(newest "$NEW" engine)" ids "$M" "The theory of attention sinks says that heads park their attention on the first token when they have nothing to do." 512)
  for w in file f32; do
    for side in before after; do
      bin=$(newest "$NEW" engine); [ "$side" = before ] && bin=$(newest "$BASE_BENCH_DIR" engine)
      r=$(runnable)
      j=$(SINKLAB_WEIGHTS=$w "$bin" forward "$M" "$IDS" 3 all)
      echo "{\"side\": \"$side\", \"weights\": \"$w\", \"runnable_others\": $r, \"run\": $j}"
    done
  done | tee "$OUT/forward_before_after.jsonl"
fi
