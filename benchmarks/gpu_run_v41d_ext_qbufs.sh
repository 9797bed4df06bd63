#!/usr/bin/env bash
# One device call (NOTES.md attention v41): two Q buffers on the extended
# path's dynamic scheduler as the default (build/ext5: the ext self-test of
# this code). jaxdnn builds in the background while ext5 checks every
# extended case in every variant (bf16, f16) and times the timed cases; then
# the full GPU test suite.
#   bash benchmarks/gpu_run_v41d_ext_qbufs.sh OUTDIR   (carry build/ext5)
source "$(dirname "$0")/device_call.sh" 585 "$@"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
build_jaxdnn &
bin="$repo/build/ext5/sm90_attention_ext_selftest"
st check-ext5-bf16 150 "$bin" bf16
st check-ext5-f16 150 "$bin" f16
grep -h FAIL "$out"/check-*.log | head
echo "== timed cases (ext5, default variant, ms)"
grep -hE '^  timing' "$out/check-ext5-bf16.log" | grep "variant -1" | sed -E 's/ +timing T //; s/ +variant +-?[0-9]+: +/=/; s/ ms .*//'
wait; cat "$out/build.rc"
( cd /tmp && timeout "$(left 480)" python3 -m pytest "$repo/tests" -q -p no:cacheprovider -k gpu -n 14 \
    --timeout 150 -rfE -p no:benchmark ) > "$out/tests.log" 2>&1
echo "pytest exit $?"; grep -E "^FAILED|^ERROR" "$out/tests.log" | head -30; tail -1 "$out/tests.log"
