#!/usr/bin/env bash
# Build once, check the kernel variants on the GPU tests, then time jaxdnn's
# norm kernels under each launch variant (env knobs read by the CUDA
# launcher: forward block threads, backward ring stages) on the target cases.
#   bash benchmarks/sweep_norms.sh OUTDIR "FWD_BLOCK BWD_STAGES" ...
set -uo pipefail
out=${1:-${OUT:?give an output folder}}
shift
repo=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
( cd "$repo" && python3 -m pip install --no-build-isolation --no-deps -v . ) > "$out/build.log" 2>&1 \
  || { tail -50 "$out/build.log"; exit 1; }
cd /tmp
for variant in "$@"; do
  set -- $variant
  export JAXDNN_NORM_FWD_BLOCK=$1 JAXDNN_NORM_BWD_STAGES=$2
  echo "== fwd block=$1 bwd stages=$2"
  timeout 200 python3 -m pytest "$repo/tests/test_norms.py" -q -x -k "gpu" -p no:cacheprovider 2>&1 | tail -1
  timeout 150 python3 -m jaxdnn.bench norms --cases 32768x4096,8192x8192 --impls "" \
    --out "$out/sweep_b$1_s$2.json" 2>&1 | grep -E "jaxdnn|ceiling"
done
