#!/usr/bin/env bash
# One device call for two forward changes (NOTES.md attention v28):
# (Ran once, 2026-11-22: the compile-time switch and the 192-key blocks were then
# removed, split max kept at head dim 64 only; NOTES.md attention v28.)
#   split max: the softmax's row maximum over four partial maxima (a chain of
#     kBlockN / 32 + 2 instead of kBlockN / 8), compile-time
#     JAXDNN_SM90_FWD_SPLIT_MAX (default 1): self-test binaries built both ways
#     here (build/fwdab/fwd_splitmax{0,1}), alternating processes;
#   192-key blocks at head dim 64 (dense non-causal; variant bit 32 / the
#     switch JAXDNN_ATTENTION_SM90_D64_BLOCKN=192).
#   1. jaxdnn builds in the background while the self-tests check (split max
#      on: every head dim, dense and extended; 192-key blocks bf16 and f16) and
#      time (split max 0 vs 1, d64 and d128, ROUNDS rounds);
#   2. through jax (kernel_timing.py, GPU-busy): d64 forward with and without
#      the 192-key switch, alternating.
#   bash benchmarks/gpu_run_v28_fwd.sh OUTDIR   (carry .whl and build/fwdab)
source "$(dirname "$0")/device_call.sh" 580 "$@"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
source "$repo/benchmarks/tokamax_site.sh" > /dev/null 2>&1
build_jaxdnn &
b=$repo/build/fwdab
st check-split1-bf16 100 "$b/fwd_splitmax1" bf16 -1
st check-split1-ext-bf16 80 "$b/ext_splitmax1" bf16
st check-n192-bf16 40 "$b/fwd_splitmax1" bf16 35 64
st check-n192-f16 40 "$b/fwd_splitmax1" f16 35 64
grep -h FAIL "$out"/check-*.log | head -10
for round in $(seq 1 "${ROUNDS:-2}"); do
  for v in 0 1; do
    [ $((budget - SECONDS)) -lt 200 ] && continue
    st time-split$v-d128-r$round 60 "$b/fwd_splitmax$v" bf16 -1 128
    st time-split$v-d64-r$round 60 "$b/fwd_splitmax$v" bf16 -1 64
  done
done
echo "== self-test TFLOP/s (d128 / d64 grid cases), split max 0 vs 1"
grid_tflops '^\((8,2048|4,4096|2,8192|1,16384|16,1024|32,512),' "$out"/time-*.log
grep -hE "16384,16384,16,16,64|4096,4096,16,16,64" "$out"/check-n192-*.log | cut -c1-120
wait; cat "$out/build.rc"
for round in 1 2; do
  impls=jaxdnn; [ "$round" = 1 ] && impls=jaxdnn,cudnn
  kt d64-n128-r$round A=default --seqs "${SEQS:-1024,2048,4096,8192,16384}" --dim 64 --impls $impls --ops fwd --causal 0
  kt d64-n192-r$round JAXDNN_ATTENTION_SM90_D64_BLOCKN=192 --seqs "${SEQS:-1024,2048,4096,8192,16384}" --dim 64 --impls jaxdnn --ops fwd --causal 0
done
