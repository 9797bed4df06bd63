#!/usr/bin/env bash
# One device call (NOTES.md attention v43): the fused backward's head-major
# grid in groups of G (batch, head)s, key-block-major within a group
# (JAXDNN_ATTENTION_SM90_BWD_HEAD_GROUP=G; 1 = the order before), so that
# the last group's heaviest key blocks do not start last. jaxdnn fwd+bwd,
# GPU-busy through jax, d128 causal seq 2k-16k and the harness's packed
# documents, then non-causal at 4096 (where only L2 locality can change),
# two alternating rounds per setting.
#   bash benchmarks/gpu_run_v43_bwd_head_group.sh OUTDIR
source "$(dirname "$0")/device_call.sh" 585 "$@"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
build_jaxdnn; cat "$out/build.rc"
for round in 1 2; do
  for g in ${GROUPS_AB:-1 2 4 8}; do
    kt "causal-g$g-r$round" JAXDNN_ATTENTION_SM90_BWD_HEAD_GROUP=$g --dim 128 --seqs 2048,4096,8192,16384 \
      --impls jaxdnn --ops fwd+bwd --causal 1 --packed
  done
done
for round in 1 2; do
  for g in ${GROUPS_AB:-1 2 4 8}; do
    kt "nc-g$g-r$round" JAXDNN_ATTENTION_SM90_BWD_HEAD_GROUP=$g --dim 128 --seqs 4096 \
      --impls jaxdnn --ops fwd+bwd --causal 0
  done
done
