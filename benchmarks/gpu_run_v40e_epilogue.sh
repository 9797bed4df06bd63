#!/usr/bin/env bash
# (The probe code is in commit f924af9, reverted.)
# One device call (NOTES.md attention v40): where the short tiles lose.
#   1. a timing probe without the forward's O staging and stores (build/v40e,
#      -DJAXDNN_SM90_FWD_PROBE_NO_O; its outputs are wrong, so its checks
#      fail) against the default (build/v40a): 131 dense non-causal and 25
#      causal, head dim 128, ROUNDS rounds (default 2);
#   2. jaxdnn against cuDNN through jax in isolation (kernel_timing.py,
#      GPU-busy, forward, seq 2048-16384, causal and not), two rounds.
#   bash benchmarks/gpu_run_v40e_epilogue.sh OUTDIR   (carry build/v40a, build/v40e)
source "$(dirname "$0")/device_call.sh" 480 "$@"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
build_jaxdnn &
bin() { echo "$repo/build/v40$1/sm90_attention_selftest"; }
for round in $(seq 1 "${ROUNDS:-2}"); do
  for b in a e; do st "nc-$b-r$round" 30 "$(bin $b)" bf16 131 128; st "c-$b-r$round" 30 "$(bin $b)" bf16 25 128; done
done
echo "== self-test TFLOP/s, d128 dense non-causal 131 (a: default, e: no O stores)"
grid_tflops '^\((16,1024|8,2048|4,4096|2,8192|1,16384),[0-9]+,16,16,128,0\)' "$out"/nc-*.log
echo "== self-test TFLOP/s, d128 causal 25"
grid_tflops '^\((16,1024|8,2048|4,4096|2,8192|1,16384),[0-9]+,16,16,128,1\)' "$out"/c-*.log
wait; cat "$out/build.rc"
for round in 1 2; do
  kt "iso-r$round" A=default --dim 128 --seqs 2048,4096,8192,16384 --impls jaxdnn,cudnn --ops fwd --causal 0,1
done
