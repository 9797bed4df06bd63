#!/usr/bin/env bash
# Hardware counters (ncu, clocks left alone) of the fused Hopper attention
# backward kernel as jax runs it, for the fused backward analysis' question
# (docs/perf/attention.md): is a step bound by shared-memory
# bandwidth or by latency? One launch each at d128 s8192 (variant 5, the
# default), d128 s8192 variant 0, d64 s8192 (variant 12): tensor-pipe and
# shared-memory utilization, warp stall reasons, source counters.
#   bash benchmarks/profile_attention_bwd_detail.sh OUTDIR   (SKIP_BUILD=1 if installed)
source "$(dirname "$0")/profile_setup.sh" "$@"
cd /tmp
run() {  # name, variant, profile_attention_bwd.py args...
  local name=$1 variant=$2; shift 2
  JAXDNN_ATTENTION_SM90_BWD_FUSED_VARIANT=$variant timeout "${NCU_TIMEOUT:-150}" "$ncu" --clock-control none \
    --kernel-name regex:AttnBwdFusedSm90Kernel --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section Occupancy \
    python3 "$repo/benchmarks/profile_attention_bwd.py" "$@" > "$out/ncu-$name.txt" 2>&1
  echo "== $name (exit $?)"
  grep -E "Duration|SM Busy|Issue Slots Busy|Executed Ipc A|Shared Memory|L1/TEX Hit|Mem Pipes Busy|Stall|Warp Cycles Per Issued|Achieved Occupancy|Compute \(SM\) Throughput|Memory Throughput" \
    "$out/ncu-$name.txt" | sed -E 's/\s+/ /g' | cut -c1-150 | head -${HEAD:-40}
}
run d128-s8192-v5 5 8192
run d128-s8192-v0 0 8192
run d64-s8192-v12 12 8192 --dim 64
