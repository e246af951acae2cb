#!/usr/bin/env bash
# Installs the baselines of the engine benchmarks, idempotently:
#   - cmake and g++ from Debian (to build llama.cpp from source),
#   - llama-cpp-python from PyPI into the venv $VENV (built from source, niced),
#   - transformers / accelerate (its GGUF loading) / torch / gguf / numpy are expected in $VENV already (checked, not installed).
#
# ISA: llama.cpp is built for the ISA of this machine (GGML_NATIVE=ON) unless BASELINE_ISA=avx2,
# which forces AVX2+FMA+F16C and turns every AVX-512 path off (use it when sinklab is built without
# AVX-512, or to compare on the AVX2 ISA). The chosen ISA is written to
# $VENV/llama_cpp_isa.txt and printed by the bench scripts next to every llama.cpp row.
#
# Usage: VENV=/work/venv [BASELINE_ISA=native|avx2] [LLAMA_CPP_VERSION=0.3.16] scripts/bench_baselines.sh
set -euo pipefail
VENV=${VENV:?set VENV to the Python venv that receives llama-cpp-python (e.g. /work/venv)}
BASELINE_ISA=${BASELINE_ISA:-native}
LLAMA_CPP_VERSION=${LLAMA_CPP_VERSION:-}
PY="$VENV/bin/python"
[ -x "$PY" ] || { echo "bench_baselines: no python at $PY" >&2; exit 2; }

# 1. Debian toolchain.
need=()
command -v cmake >/dev/null || need+=(cmake)
command -v g++ >/dev/null || need+=(g++)
command -v make >/dev/null || need+=(make)
if [ ${#need[@]} -gt 0 ]; then
  echo "bench_baselines: installing ${need[*]} from Debian" >&2
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"
fi

# 2. The Python side of the other baselines must already be there.
"$PY" - <<'PY'
import importlib.util, sys
missing = [m for m in ("torch", "transformers", "accelerate", "gguf", "numpy") if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"bench_baselines: missing in the venv: {', '.join(missing)} (install them with pip first)")
PY

# 3. llama-cpp-python, built from source for the chosen ISA.
case "$BASELINE_ISA" in
  native) ISA_ARGS="-DGGML_NATIVE=ON" ;;
  avx2) ISA_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AVX_VNNI=OFF" ;;
  *) echo "bench_baselines: BASELINE_ISA must be native or avx2, got '$BASELINE_ISA'" >&2; exit 2 ;;
esac
# No BLAS, no OpenMP surprises: the CPU backend alone, thread count chosen per call (n_threads).
CMAKE_ARGS_WANT="$ISA_ARGS -DGGML_BLAS=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF"
stamp="$VENV/llama_cpp_isa.txt"
if "$PY" -c "import llama_cpp" 2>/dev/null && [ -f "$stamp" ] && grep -qx "$BASELINE_ISA" "$stamp"; then
  echo "bench_baselines: llama-cpp-python $("$PY" -c 'import llama_cpp; print(llama_cpp.__version__)') already built for ISA '$BASELINE_ISA'" >&2
else
  spec="llama-cpp-python"; [ -n "$LLAMA_CPP_VERSION" ] && spec="llama-cpp-python==$LLAMA_CPP_VERSION"
  echo "bench_baselines: building $spec from source (ISA $BASELINE_ISA; takes a while on 2 cores)" >&2
  CMAKE_ARGS="$CMAKE_ARGS_WANT" CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2} \
    nice -n 10 "$VENV/bin/pip" install --no-cache-dir --force-reinstall --no-deps --no-binary llama-cpp-python "$spec"
  # Its pure-Python dependencies (typing-extensions, numpy, diskcache, jinja2), from wheels.
  "$VENV/bin/pip" install --quiet "$spec" >/dev/null
  echo "$BASELINE_ISA" > "$stamp"
fi
"$PY" -c "import llama_cpp; print('llama-cpp-python', llama_cpp.__version__); print(llama_cpp.llama_print_system_info().decode())"
