#!/usr/bin/env bash
# One call on a lent GPU machine (no network there): caten importable from this checkout without
# pip (lark from a carried wheel in .whl/), then the CUDA runtime's tests, the benchmark against
# torch and the op-coverage suite, each under its own time limit. Logs go to $OUT.
#   [MODELS_S=N MODELS=resnet18,...] bash benchmarks/gpu_session.sh [TESTS_S BENCH_S SUITE_S] [bench_cuda.py args...]
# MODELS_S > 0 adds bench_models_gpu.py (real models against torch on the same GPU) before the suite.
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT"
T_TESTS=${1:-90}; T_BENCH=${2:-150}; T_SUITE=${3:-90}
shift $(( $# >= 3 ? 3 : $# ))
export PYTHONUNBUFFERED=1 CATEN_CACHE_DIR=/tmp/caten_cache
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv | tee "$OUT/gpu.txt"
# the installed layout in place (caten.grammar, caten.ops and caten.runtimes live outside caten/
# here): links, removed on exit; tests that run `python -m caten` with the checkout first then work
LINKS=()
for d in grammar ops runtimes; do
  if [ ! -e "$REPO/caten/$d" ]; then ln -s "../$d" "$REPO/caten/$d"; LINKS+=("$REPO/caten/$d"); fi
done
trap 'rm -f "${LINKS[@]}"' EXIT
python3 -m pip install -q --no-index --no-deps --target /tmp/site "$REPO"/.whl/*.whl 2>&1 | tail -2
export PYTHONPATH=$REPO:/tmp/site
cd /tmp || exit 1
python3 -c "import caten, torch, llvmlite; print('caten from', caten.__file__, 'torch', torch.__version__)"
echo "== tests (${T_TESTS}s)"
timeout "$T_TESTS" python3 -m pytest -q -p no:cacheprovider --timeout 60 -rs "$REPO/tests/test_gpu_kernels.py" \
  "$REPO/tests/test_device_host.py" "$REPO/tests/test_backends.py" -k "cuda" 2>&1 | tee "$OUT/tests.log" | tail -25
echo "== bench_cuda (${T_BENCH}s)"
timeout "$T_BENCH" python3 "$REPO/benchmarks/bench_cuda.py" --json "$OUT/bench.json" "$@" 2>&1 | tee "$OUT/bench.log"
if [ "${MODELS_S:-0}" -gt 0 ]; then
  echo "== bench_models_gpu (${MODELS_S}s)"
  timeout "$MODELS_S" python3 "$REPO/benchmarks/bench_models_gpu.py" --budget-s $(( MODELS_S * 3 / 5 )) \
    ${MODELS:+--only "$MODELS"} --json "$OUT/models.json" 2>&1 | tee "$OUT/models.log"
fi
echo "== test-runtime -r cuda, forward cases (${T_SUITE}s)"
timeout "$T_SUITE" python3 -m caten test-runtime -r cuda --no-gradients -j 8 -o "$OUT/cuda.md" > "$OUT/suite.log" 2>&1
echo "suite exit $?"; tail -15 "$OUT/suite.log"
