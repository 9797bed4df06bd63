#!/usr/bin/env bash
# Per-kernel durations (ncu, clocks left alone) of the attention backward as
# jax runs it, to place the gap between the self-test and the jax timings:
# d128 at seq 2048 / 4096 / 8192, deterministic=False (the unordered fused
# dQ from 4096) and deterministic=True (ordered fused from 8192, two-kernel
# below), one line per kernel launch.
#   bash benchmarks/profile_attention_bwd.sh OUTDIR   (jaxdnn installed, or SKIP_BUILD unset)
source "$(dirname "$0")/profile_setup.sh" "$@"
cd /tmp
for args in "2048" "2048 --cudnn" "4096" "4096 --cudnn" "8192" "8192 --deterministic" "8192 --cudnn" \
    "2048 --causal" "8192 --causal" "8192 --causal --cudnn"; do
  name=$(echo "$args" | tr -d ' -')
  # Two jitted calls run; the last lines are the second call's launches (all
  # kernels: XLA's fusions and cuDNN's too, so the anchor's lines compare).
  timeout 120 "$ncu" --clock-control none --section SpeedOfLight \
    --launch-skip "${LAUNCH_SKIP:-0}" \
    python3 "$repo/benchmarks/profile_attention_bwd.py" $args > "$out/ncu-$name.txt" 2>&1
  echo "== $args (exit $?)"
  grep -E "^  [A-Za-z].*\(|Duration" "$out/ncu-$name.txt" | grep -B1 Duration | grep -vE "^--" | paste - - \
    | sed -E 's/\s+/ /g' | cut -c1-160 | tail -${TAIL:-10}
done
