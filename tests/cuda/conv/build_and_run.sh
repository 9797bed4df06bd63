#!/usr/bin/env bash
# Builds the CUTLASS sm90 forward-convolution self-test with the command in
# conv_fprop_sm90_selftest.cu's header and runs its check mode, then its
# bench mode. Needs nvcc (12.3+), jax, and the nvidia-cutlass wheel (or
# CUTLASS_INCLUDE pointing at a CUTLASS include folder with tools/util/include
# at ../tools/util/include). OUT (default /tmp) receives the binary; STAGE=build
# or STAGE=run does only that half (a device call builds while jaxdnn builds).
#   bash tests/cuda/conv/build_and_run.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
CUTLASS_INCLUDE=${CUTLASS_INCLUDE:-$(python3 -c "import cutlass_library, os; print(os.path.join(os.path.dirname(cutlass_library.__file__), 'source', 'include'))")}
JAX_INCLUDE=$(python3 -c "import jax; print(jax.ffi.include_dir())")
out=${OUT:-/tmp}
mkdir -p "$out"
bin="$out/conv_fprop_sm90_selftest"
stage=${STAGE:-all}
start=$SECONDS
flags=(-std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Icpp -I"$CUTLASS_INCLUDE"
  -I"$CUTLASS_INCLUDE/../tools/util/include" -I"$JAX_INCLUDE" -DNDEBUG)
srcs=(tests/cuda/conv/conv_fprop_sm90_selftest.cu cpp/conv/sm90/conv_fprop_sm90.cu
  cpp/conv/sm90/conv_fprop_sm90_n64.cu cpp/conv/sm90/conv_fprop_sm90_n128.cu cpp/common/switches.cc)
if [ "$stage" != run ]; then
  # One nvcc per source, side by side (each CUTLASS tile unit takes about a minute).
  objs=()
  for src in "${srcs[@]}"; do
    obj="$out/$(basename "$src").o"
    objs+=("$obj")
    nvcc "${flags[@]}" -c "$src" -o "$obj" &
  done
  wait
  nvcc -gencode=arch=compute_90a,code=sm_90a "${objs[@]}" -o "$bin"
fi
[ "$stage" = run ] || echo "built $bin in $((SECONDS - start)) s"
[ "$stage" = build ] && exit 0
status=0
"$bin" || status=$?
for tile in 64 128; do
  echo "-- JAXDNN_CONV_TILE_N=$tile"
  JAXDNN_CONV_TILE_N=$tile "$bin" bench || status=$?
done
exit $status
