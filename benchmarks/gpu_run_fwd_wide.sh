#!/usr/bin/env bash
# One device call for the head dim 128 forward's wide kv blocks (variant bit 32:
# 176 keys, + 64: 160 keys; dense non-causal):
#   1. jaxdnn builds in the background while the self-test (carried in
#      build/sm90, built here by build_sm90_selftests.sh) checks the d128 cases
#      against the fp32 reference with variants 3 (128-key blocks), 35 (176)
#      and 99 (160), bf16 and f16, and times them;
#   2. GPU-busy A/Bs through jax (benchmarks/kernel_timing.py, non-causal d128,
#      jaxdnn only), one process per JAXDNN_ATTENTION_SM90_D128_BLOCKN setting
#      (WIDTHS, default "128 176 160"), ROUNDS times alternating, cuDNN once;
#   3. EXTRA: one more command line if set.
#   bash benchmarks/gpu_run_fwd_wide.sh OUTDIR
source "$(dirname "$0")/device_call.sh" 570 "$@"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
source "$repo/benchmarks/tokamax_site.sh"
( cd "$repo" && python3 -m pip install --no-build-isolation --no-deps -v . > "$out/build.log" 2>&1
  echo "build exit $?" > "$out/build.rc" ) &
b=${BIN:-$repo/build/sm90}
if [ "${SELF:-1}" != 0 ]; then
  for dv in bf16:3 bf16:35 bf16:99 f16:35 f16:99; do
    dt=${dv%:*} v=${dv#*:}
    timeout "$(left 90)" "$b/sm90_attention_selftest" "$dt" "$v" 128 > "$out/self-$dt-v$v.log" 2>&1
    echo "self $dt v$v: exit $?; $(grep -c FAIL "$out/self-$dt-v$v.log") FAIL lines;" \
         "$(grep -c 'ALL PASSED' "$out/self-$dt-v$v.log") ALL PASSED"
  done
  for dv in bf16:3 bf16:35 bf16:99 f16:35 f16:99; do
    dt=${dv%:*} v=${dv#*:}
    echo "-- $dt v$v (non-causal grid)"; grep -E "^\((8|4|2|1),(2048|4096|8192|16384),.*,0\)" "$out/self-$dt-v$v.log" | cut -c1-120
  done
fi
wait; cat "$out/build.rc"
for round in $(seq 1 "${ROUNDS:-2}"); do
  for w in ${WIDTHS:-128 176 160}; do
    [ $((budget - SECONDS)) -lt 45 ] && { echo "width $w round $round: skipped (time)"; continue; }
    impls=jaxdnn; [ "$round" = 1 ] && [ "$w" = 128 ] && impls=jaxdnn,cudnn
    ( cd /tmp && JAXDNN_ATTENTION_SM90_D128_BLOCKN=$w timeout "$(left 120)" python3 \
        "$repo/benchmarks/kernel_timing.py" --attention --dim 128 --seqs "${SEQS:-1024,2048,4096,8192,16384}" \
        --causal 0 --impls $impls --out "$out/kt-w$w-r$round.json" ) 2>&1 | grep -E "^attn" > "$out/kt-w$w-r$round.txt"
    echo "-- width $w, round $round"; grep " fwd " "$out/kt-w$w-r$round.txt" | cut -c1-140
  done
done
if [ -n "${EXTRA:-}" ]; then
  echo "== extra: $EXTRA"
  ( cd /tmp && timeout "$(left 300)" bash -c "$EXTRA" ) > "$out/extra.txt" 2>&1
  echo "exit $?"; tail -40 "$out/extra.txt" | cut -c1-170
fi
