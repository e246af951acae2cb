#!/usr/bin/env bash
# A prebuilt llama.cpp for the engine benchmarks, for machines where building llama-cpp-python
# from source (scripts/bench_baselines.sh) takes too long: Debian's own llama.cpp packages
# (libllama0, libggml0 with its CPU backend in run-time-selected ISA variants: haswell = AVX2,
# skylakex / icelake / sapphirerapids = AVX-512, ...) in a Debian sid root made by debootstrap,
# and benches/llama_greedy.c compiled there against llama.h.
#
# Prints the LLAMA_CMD to give scripts/bench_engine.sh. Idempotent; needs root (debootstrap,
# chroot, bind mounts), about 3 min and 600 MB the first time.
#
# Usage: [ROOT=/tmp/sidroot] [BIG_DIR=/tmp/sinklab-big] scripts/llama_system.sh
#   then: LLAMA_CMD="$(scripts/llama_system.sh)" scripts/bench_engine.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=${ROOT:-/tmp/sidroot}
CACHE=${SINKLAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sinklab}
[ "$(id -u)" -eq 0 ] || { echo "llama_system: needs root (debootstrap, chroot)" >&2; exit 2; }
if [ ! -x "$ROOT/usr/bin/apt-get" ]; then
  command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >&2
  echo "llama_system: debootstrap sid into $ROOT (a few minutes)" >&2
  debootstrap --variant=minbase sid "$ROOT" http://deb.debian.org/debian >&2
fi
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
mountpoint -q "$ROOT/proc" || mount --bind /proc "$ROOT/proc"
if ! chroot "$ROOT" dpkg -s libllama-dev >/dev/null 2>&1; then
  # The registry mirror may serve a sid Release file past its Valid-Until date.
  echo "llama_system: installing llama.cpp from Debian sid" >&2
  chroot "$ROOT" sh -c 'apt-get -o Acquire::Check-Valid-Until=false update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends llama.cpp-tools libllama-dev libggml-dev gcc libc6-dev' >&2
fi
cp benches/llama_greedy.c "$ROOT/tmp/llama_greedy.c"
chroot "$ROOT" gcc -O2 -Wall -o /usr/local/bin/llama_greedy /tmp/llama_greedy.c -lllama -lggml -lggml-base >&2
# The models at the same path inside the root, so the driver's paths work there unchanged.
mkdir -p "$CACHE" "$ROOT$CACHE"
mountpoint -q "$ROOT$CACHE" || mount --bind "$CACHE" "$ROOT$CACHE"
# The driver's synthetic shapes (BIG_DIR of scripts/bench_engine.sh), likewise.
BIG_DIR=${BIG_DIR:-/tmp/sinklab-big}
mkdir -p "$BIG_DIR" "$ROOT$BIG_DIR"
mountpoint -q "$ROOT$BIG_DIR" || mount --bind "$BIG_DIR" "$ROOT$BIG_DIR"
V=$(chroot "$ROOT" dpkg-query -W -f '${Version}' libllama0)
echo "llama_system: llama.cpp (Debian libllama0 $V) ready" >&2
echo "chroot $ROOT env LLAMA_GREEDY_VERSION=debian-libllama0-$V /usr/local/bin/llama_greedy"
