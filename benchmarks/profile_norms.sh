#!/usr/bin/env bash
# Hardware counters of the norm kernels (ncu, clocks left alone).
set -uo pipefail
out=${1:-${OUT:?give an output folder}}
repo=$(cd "$(dirname "$0")/.." && pwd)
export XLA_PYTHON_CLIENT_PREALLOCATE=false
( cd "$repo" && python3 -m pip install --no-build-isolation --no-deps . ) > "$out/build.log" 2>&1 || exit 1
cd /tmp
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
timeout 400 "$ncu" --clock-control none --kernel-name regex:"Norm(Fwd|Bwd)(Vec|Ring)Kernel" \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
  --section MemoryWorkloadAnalysis python3 "$repo/benchmarks/profile_norms.py" > "$out/ncu.txt" 2>&1
echo "ncu exit $?"
grep -E "NormFwdVec|NormBwdRing|DRAM Throughput|Memory Throughput|Duration|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Stall|Warp Cycles Per Issued|Dynamic Shared|Waves Per SM" "$out/ncu.txt" | head -120
