#!/usr/bin/env bash
# Hardware counters of the norm kernels (ncu, clocks left alone).
source "$(dirname "$0")/profile_setup.sh" "$@"
cd /tmp
timeout 400 "$ncu" --clock-control none --kernel-name regex:"Norm(Fwd|Bwd)(Vec|Ring)Kernel" \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
  --section MemoryWorkloadAnalysis python3 "$repo/benchmarks/profile_norms.py" > "$out/ncu.txt" 2>&1
echo "ncu exit $?"
grep -E "NormFwdVec|NormBwdRing|DRAM Throughput|Memory Throughput|Duration|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Stall|Warp Cycles Per Issued|Dynamic Shared|Waves Per SM" "$out/ncu.txt" | head -120
