#!/usr/bin/env bash
# One device call after v35 (NOTES.md attention v35): why the clusters lost.
#   1. the self-test (build/v35) at d128: 3, then 131 printing its cluster
#      grid (JAXDNN_ATTENTION_SM90_CLUSTER_GRID=1), then 131 on a forced grid
#      of 132 and of 128 CTAs, two rounds;
#   2. through jax (GPU-busy): the d128 causal forward by default and with the
#      dynamic scheduler everywhere (JAXDNN_ATTENTION_SM90_DYNAMIC=lpt), two rounds.
#   bash benchmarks/gpu_run_v35b_probe.sh OUTDIR   (carry build/v35)
source "$(dirname "$0")/device_call.sh" 585 "$@"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
build_jaxdnn &
b=$repo/build/v35/sm90_attention_selftest
for round in 1 2; do
  st v3-r$round 45 "$b" bf16 3 128
  st v131-probe-r$round 45 JAXDNN_ATTENTION_SM90_CLUSTER_GRID=1 "$b" bf16 131 128
  st v131-g132-r$round 45 JAXDNN_ATTENTION_SM90_CLUSTER_GRID=132 "$b" bf16 131 128
  st v131-g128-r$round 45 JAXDNN_ATTENTION_SM90_CLUSTER_GRID=128 "$b" bf16 131 128
done
grep -h "cluster grid" "$out"/v131-probe-r1.log
echo "== self-test TFLOP/s, d128 non-causal"
grid_tflops '^\((16,1024|8,2048|4,4096|2,8192|1,16384),[0-9]+,16,16,128,0\)' "$out"/v*-r*.log
wait; cat "$out/build.rc"
kt_rounds d128c-default A=default d128c-dynamic JAXDNN_ATTENTION_SM90_DYNAMIC=lpt --dim 128 \
  --seqs 2048,4096,8192,16384 --impls jaxdnn --ops fwd --causal 1
