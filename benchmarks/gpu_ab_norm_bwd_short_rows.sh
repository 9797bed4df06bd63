#!/usr/bin/env bash
# The norm backward on short rows (512-2048 wide), one process per setting
# (each switch is read once per process), XLA in each as the drift reference:
# default, more blocks per SM (JAXDNN_NORM_BWD_BLOCKS_PER_SM), more rows per
# block (JAXDNN_NORM_BWD_BLOCK_THREADS), then the norm backward tests with the
# two biggest settings on.
#   bash benchmarks/gpu_ab_norm_bwd_short_rows.sh OUTDIR   (after the build)
source "$(dirname "$0")/device_call.sh" "${NORM_AB_BUDGET:-200}" "$@"
cases=${CASES:-16384x1024,16384x2048,32768x4096}
for sw in A=default JAXDNN_NORM_BWD_BLOCKS_PER_SM=4 JAXDNN_NORM_BWD_BLOCK_THREADS=512 JAXDNN_NORM_BWD_BLOCK_THREADS=1024 \
          "JAXDNN_NORM_BWD_BLOCKS_PER_SM=4 JAXDNN_NORM_BWD_BLOCK_THREADS=512"; do
  name=$(echo "${sw}" | tr ' =' '_-')
  [ $((budget - SECONDS)) -lt 25 ] && { echo "-- $name: skipped (time)"; continue; }
  ( cd /tmp && env $sw timeout "$(left 60)" python3 -m jaxdnn.bench norms --cases "$cases" \
      --impls xla --gpu-busy --out "$out/norm-bwd-ab-$name.json" ) > "$out/norm-bwd-ab-$name.txt" 2>&1
  echo "-- $name (exit $?)"
  grep -E " bwd +(jaxdnn|xla)" "$out/norm-bwd-ab-$name.txt" | cut -c1-150
done
if [ $((budget - SECONDS)) -ge 40 ]; then
  ( cd /tmp && JAXDNN_NORM_BWD_BLOCKS_PER_SM=4 JAXDNN_NORM_BWD_BLOCK_THREADS=1024 \
      timeout "$(left 90)" python3 -m pytest "$repo/tests/test_norms.py" -q -p no:cacheprovider \
      -k "gpu or gradients" ) > "$out/tests-norm-bwd-switches.log" 2>&1
  echo "norm tests with the switches: exit $?; $(tail -1 "$out/tests-norm-bwd-switches.log")"
fi
