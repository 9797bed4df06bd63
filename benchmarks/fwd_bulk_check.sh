#!/usr/bin/env bash
# The bulk-copy (TMA) forward: correctness on the GPU tests, then timing with
# it on and off (JAXDNN_NORM_FWD_BULK) on the target cases.
set -uo pipefail
out=${1:-${OUT:?give an output folder}}
repo=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
( cd "$repo" && python3 -m pip install --no-build-isolation --no-deps . ) > "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
cd /tmp
timeout 240 python3 -m pytest "$repo/tests/test_norms.py" -q -x -p no:cacheprovider \
  -k "forward or residual or gpu or without" 2>&1 | tail -3
for b in 1 0; do
  echo "== JAXDNN_NORM_FWD_BULK=$b"
  JAXDNN_NORM_FWD_BULK=$b timeout 150 python3 -m jaxdnn.bench norms \
    --cases 32768x4096,8192x8192,4096x12288,16384x1024 --impls xla --out "$out/fwd_bulk$b.json" \
    2>&1 | grep -E " fwd |ceiling"
done
