#!/usr/bin/env bash
# One device call (NOTES.md attention v41): the extended forward's producer
# votes from precomputed segment ranges (sm90_segment_ranges.cuh; build/ext3),
# against v41a's last-block flag alone (build/ext1) and ext3 with two Q
# buffers (build/ext4, -DJAXDNN_SM90_FWD_EXT_Q_BUFS=2). jaxdnn builds in the
# background while ext3 is checked in every extended case and variant (bf16,
# f16; ext4 the timed cases) and ROUNDS (default 3) alternating rounds time the
# three; then the GPU tests of the extended features and the harness at seq
# 8192 (dense and packed documents, GPU-busy).
#   bash benchmarks/gpu_run_v41b_seg_ranges.sh OUTDIR   (carry build/ext1, build/ext3, build/ext4)
# Builds as gpu_run_v41a_ext_last.sh says.
source "$(dirname "$0")/device_call.sh" 580 "$@"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
build_jaxdnn &
bin() { echo "$repo/build/ext$1/sm90_attention_ext_selftest"; }
st check-ext3-bf16 150 "$(bin 3)" bf16
st check-ext3-f16 150 "$(bin 3)" f16
st check-ext4-bf16 60 "$(bin 4)" bf16 time
grep -h FAIL "$out"/check-*.log | head
for round in $(seq 1 "${ROUNDS:-3}"); do
  for b in 1 3 4; do st "t-ext$b-r$round" 60 "$(bin $b)" bf16 time; done
done
echo "== timed cases, default variant (ms; ext1: last-block flag, ext3: + segment ranges, ext4: + two Q buffers)"
ext_timings "$out"/t-*.log
wait; cat "$out/build.rc"
gpu_tests "${TEST_TIMEOUT:-200}" "gpu and (segment or packed or window or length or causal or everything or softcap)"
[ $((budget - SECONDS)) -gt 60 ] && ( cd /tmp && timeout "$(left 150)" python3 -m jaxdnn.bench attention \
  --dims 128 --seqs 8192 --only dense,packed --no-torch --gpu-busy --out "$out/packed.json" \
  > "$out/packed.txt" 2>&1; echo "packed exit $?"; grep -E "packed|b2s8192" "$out/packed.txt" | grep -v WARN )
