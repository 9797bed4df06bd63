#!/usr/bin/env bash
# Hardware counters of the CUDA attention forward (ncu, clocks left alone).
set -uo pipefail
out=${1:-${OUT:?give an output folder}}
repo=$(cd "$(dirname "$0")/.." && pwd)
export XLA_PYTHON_CLIENT_PREALLOCATE=false
( cd "$repo" && python3 -m pip install --no-build-isolation --no-deps . ) > "$out/build.log" 2>&1 || exit 1
cd /tmp
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
timeout 300 "$ncu" --clock-control none --kernel-name regex:"AttentionFwd" -c 1 \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
  --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section InstructionStats \
  --section SourceCounters python3 "$repo/benchmarks/profile_attention.py" > "$out/ncu.txt" 2>&1
echo "ncu exit $?"
grep -v "^==PROF==" "$out/ncu.txt" | grep -E "Duration|Throughput|Occupancy|Registers|Stall|Warp Cycles|Issued|Pipe|Bank|Executed Ipc|L2 Hit|Shared|Local|est" | head -80
