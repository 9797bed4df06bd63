#!/usr/bin/env bash
# One device call: build, then GPU-busy timing from CUPTI records
# (benchmarks/kernel_timing.py) for the norms and the d128 attention grid,
# then ncu stall profiles of the fused attention backward against cuDNN's at
# seq 8192 and of the LayerNorm forward. Everything goes to the folder given.
#   bash benchmarks/gpu_run_kernel_timing.sh OUTDIR
set -uo pipefail
out=${1:-${OUT:?give an output folder}}
repo=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
budget=${BUDGET:-560}
left() { local l=$((budget - SECONDS)); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 1 ] && l=1; echo "$l"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
( cd "$repo" && python3 -m pip install --no-build-isolation --no-deps . ) > "$out/build.log" 2>&1 \
  || { tail -30 "$out/build.log"; exit 1; }
cd /tmp
echo "== kernel timing"
timeout "$(left ${TIMING_TIMEOUT:-300})" python3 "$repo/benchmarks/kernel_timing.py" ${TIMING_ARGS:---norms --attention} \
  --out "$out/kernel-timing.json" 2>&1 | grep -v "^W\|^I0\|Warning" | tee "$out/kernel-timing.txt"
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
sections="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis"
for args in "8192:AttnBwdFused" "8192 --cudnn:bprop" ; do
  a=${args%%:*}; k=${args##*:}; name=$(echo "$a" | tr -d ' -')
  [ $((budget - SECONDS)) -lt 40 ] && break
  timeout "$(left 90)" "$ncu" --clock-control none $sections --kernel-name regex:"$k" --launch-skip 1 --launch-count 1 \
    python3 "$repo/benchmarks/profile_attention_bwd.py" $a > "$out/ncu-full-$name.txt" 2>&1
  echo "== ncu $a (exit $?)"
done
