#!/usr/bin/env bash
# Before/after rows of the engine in one run: the `engine` bench binary of an earlier commit
# (BASE, a release `deps/` directory) and of this checkout, alternating, on the packaged models:
#   - greedy generation, 128 new tokens after a 16-id prompt, file weights (`engine generate`);
#   - the T = 512 forward with full capture on SmolLM2, file and f32 weights, best of 3
#     (`engine forward … 3 all`).
# Each row is preceded by the count of other runnable tasks (least of 5 samples, this sampler
# excluded); a row that saw more than 1 is marked `loaded` and is not a result.
#
# Usage: BASE=/path/to/base-target/release/deps [ROUNDS=2] [THREADS=2] scripts/bench_before_after.sh
# Output: one JSON line a row on stdout (tee it into benches/results/).
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=${BASE:?set BASE to the release deps/ directory of the earlier build}
ROUNDS=${ROUNDS:-2}
export RAYON_NUM_THREADS=${THREADS:-2}
CACHE=${SINKLAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sinklab}
cargo build --release --quiet --bench engine
newest() { ls -t "$1"/engine-* 2>/dev/null | grep -v '\.d$' | head -n 1; }
NEW=$(newest "${CARGO_TARGET_DIR:-target}/release/deps")
OLD=$(newest "$BASE")
[ -x "$NEW" ] && [ -x "$OLD" ] || { echo "bench_before_after: engine binary missing (new: $NEW, base: $OLD)" >&2; exit 2; }
runnable() {
  local m=1000 r
  for _ in 1 2 3 4 5; do read -r _ _ _ r _ < /proc/loadavg; r=${r%/*}; [ "$r" -lt "$m" ] && m=$r; sleep 0.2; done
  echo $((m - 1))
}
row() {  # row LABEL SIDE BINARY ARGS...: one JSON line
  local label=$1 side=$2 bin=$3; shift 3
  local busy; busy=$(runnable)
  local js; js=$("$bin" "$@" 2>/dev/null | tail -n 1) || js='{"error": "failed"}'
  echo "{\"row\": \"$label\", \"side\": \"$side\", \"runnable_others\": $busy, \"loaded\": $([ "$busy" -gt 1 ] && echo true || echo false), \"run\": $js}"
}
echo "# bench_before_after: base $OLD, new $NEW ($(git rev-parse --short HEAD)), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs), threads $RAYON_NUM_THREADS, $(date -u +%FT%TZ)"
for r in $(seq "$ROUNDS"); do
  for m in smollm2 gemma3-270m qwen2.5-coder-0.5b; do
    f=$(ls "$CACHE/$m/model/"*.gguf 2>/dev/null | head -n 1) || true
    [ -n "$f" ] || { echo "# $m not fetched: skipped"; continue; }
    ids=$("$NEW" ids "$f" "The history of mathematics is long and full of surprises." 16)
    for side in before after; do
      bin=$NEW; [ "$side" = before ] && bin=$OLD
      row "generate/$m" "$side" "$bin" generate "$f" "$ids" 128
    done
  done
  f=$(ls "$CACHE/smollm2/model/"*.gguf | head -n 1)
  ids=$("$NEW" ids "$f" "The theory of attention sinks says that heads park their attention on the first token when they have nothing to do." 512)
  for w in file f32; do
    for side in before after; do
      bin=$NEW; [ "$side" = before ] && bin=$OLD
      SINKLAB_WEIGHTS=$w row "forward512/smollm2/$w" "$side" "$bin" forward "$f" "$ids" 3 all
    done
  done
done
