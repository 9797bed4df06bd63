#!/usr/bin/env bash
# One device call for the split-KV decode plan fitted to the GPU's waves
# (FitDecodeSplitPlanToWaves; NOTES.md attention v33), and the d64 grid with
# the v30/v31 defaults:
#   1. jaxdnn builds in the background while the decode self-test (build/dec)
#      checks every case, then times the fitted plan and sweeps the split
#      counts (batch 1 and 16, 16k and 128k keys);
#   2. the GPU decode tests;
#   3. the harness: decode (twice), then the d64 grid beside cuDNN.
#   bash benchmarks/gpu_run_v33_decode.sh OUTDIR   (carry .whl and build/dec)
source "$(dirname "$0")/device_call.sh" 580 "$@"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
source "$repo/benchmarks/tokamax_site.sh" > /dev/null 2>&1
build_jaxdnn &
st dec-check 120 "$repo/build/dec/decode_split_selftest" check
st dec-sweep 150 "$repo/build/dec/decode_split_selftest" sweep
grep -h -E "FAIL|timing|sweep" "$out"/dec-*.log | head -30
wait; cat "$out/build.rc"
gpu_tests 120 "gpu and decode"
for round in 1 2; do
  ( cd /tmp && timeout "$(left 90)" python3 -m jaxdnn.bench attention --dims 128 --only decode --no-torch \
    --gpu-busy --out "$out/decode-r$round.json" > "$out/decode-r$round.txt" 2>&1; echo "decode exit $?" )
  grep -E "^  decode" "$out/decode-r$round.txt"
done
[ $((budget - SECONDS)) -gt 120 ] && ( cd /tmp && timeout "$(left 200)" python3 -m jaxdnn.bench attention \
  --dims 64 --no-torch --only dense --gpu-busy --out "$out/grid-d64.json" > "$out/grid-d64.txt" 2>&1
  echo "grid exit $?" )
