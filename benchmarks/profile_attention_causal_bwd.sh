#!/usr/bin/env bash
# Why the causal d128 backward trails the non-causal one against cuDNN, and
# why the non-causal forward drops from s4096 to s8192 (ncu, clocks left alone):
#   1. per-kernel durations (SpeedOfLight) of the whole grad, jaxdnn and cuDNN,
#      causal s4096 / s8192 and non-causal s8192;
#   2. the fused backward kernel in detail (stall reasons, pipes, memory),
#      causal s8192 against non-causal s8192;
#   3. the forward kernel at s4096 and s8192 non-causal: L2 hit rate and
#      throughput, DRAM traffic, stalls.
#   bash benchmarks/profile_attention_causal_bwd.sh OUTDIR   (SKIP_BUILD=1 if installed)
source "$(dirname "$0")/profile_setup.sh" "$@"
cd /tmp
py="$repo/benchmarks/profile_attention_bwd.py"
for args in "4096 --causal" "4096 --causal --cudnn" "8192 --causal" "8192 --causal --cudnn" "8192"; do
  name=$(echo "$args" | tr -d ' -')
  timeout 120 "$ncu" --clock-control none --section SpeedOfLight python3 "$py" $args > "$out/ncu-$name.txt" 2>&1
  echo "== $args (exit $?)"
  grep -E "^  [A-Za-z].*\(|Duration" "$out/ncu-$name.txt" | grep -B1 Duration | grep -vE "^--" | paste - - \
    | sed -E 's/\s+/ /g' | cut -c1-150 | tail -${TAIL:-8}
done
detail() {  # name, kernel regex, args...
  local name=$1 kern=$2; shift 2
  timeout "${NCU_TIMEOUT:-150}" "$ncu" --clock-control none --kernel-name "regex:$kern" --launch-skip 1 \
    --launch-count 1 --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section SchedulerStats \
    python3 "$py" "$@" > "$out/ncu-detail-$name.txt" 2>&1
  echo "== detail $name (exit $?)"
  grep -E "Duration|SM Busy|Issue Slots Busy|Executed Ipc A|Shared Memory|L1/TEX Hit|L2 Hit|DRAM Throughput|Mem Pipes Busy|Stall|Warp Cycles Per Issued|No Eligible|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput" \
    "$out/ncu-detail-$name.txt" | sed -E 's/\s+/ /g' | cut -c1-150 | head -${HEAD:-32}
}
detail bwd-causal-s8192 AttnBwdFusedSm90Kernel 8192 --causal
detail bwd-s8192 AttnBwdFusedSm90Kernel 8192
detail fwd-s4096 AttnFwdSm90Kernel 4096
detail fwd-s8192 AttnFwdSm90Kernel 8192
