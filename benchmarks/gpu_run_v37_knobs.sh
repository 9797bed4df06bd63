#!/usr/bin/env bash
# One device call after the v36 grid (NOTES.md attention v37), switches only:
#   1. the d128 non-causal forward on the default cluster grid (132 CTAs)
#      against 128 (JAXDNN_ATTENTION_SM90_CLUSTER_GRID=128: 16 whole waves of
#      the 2048 tiles, four SMs idle under the power limit), two rounds;
#   2. the d128 causal forward at 16384 (one CTA per tile) against the dynamic
#      scheduler in tile order (JAXDNN_ATTENTION_SM90_DYNAMIC=1) and chunked
#      order (=lpt), two rounds.
#   bash benchmarks/gpu_run_v37_knobs.sh OUTDIR
source "$(dirname "$0")/device_call.sh" 585 "$@"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
build_jaxdnn; cat "$out/build.rc"
kt_rounds nc-g132 A=default nc-g128 JAXDNN_ATTENTION_SM90_CLUSTER_GRID=128 --dim 128 \
  --seqs 2048,4096,8192,16384 --impls jaxdnn --ops fwd --causal 0
for round in 1 2; do
  kt c16k-default-r$round A=default --dim 128 --seqs 16384 --impls jaxdnn --ops fwd --causal 1
  kt c16k-dyn1-r$round JAXDNN_ATTENTION_SM90_DYNAMIC=1 --dim 128 --seqs 16384 --impls jaxdnn --ops fwd --causal 1
  kt c16k-lpt-r$round JAXDNN_ATTENTION_SM90_DYNAMIC=lpt --dim 128 --seqs 16384 --impls jaxdnn --ops fwd --causal 1
done
