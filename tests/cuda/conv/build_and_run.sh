#!/usr/bin/env bash
# Builds the CUTLASS sm90 convolution self-tests (the forward's, the
# gradients' and the 1x1 forward GEMM's) and runs their check modes, then
# their bench modes. Needs nvcc (12.3+), jax, and the nvidia-cutlass wheel
# (or CUTLASS_INCLUDE pointing at a CUTLASS include folder with
# tools/util/include at ../tools/util/include). OUT (default /tmp) receives
# the binaries; STAGE=build or STAGE=run does only that half (a device call
# builds while jaxdnn builds); SELFTEST=fprop, grad or gemm1x1 builds and
# runs only that one (gemm1x1's check mode also runs with each tile width
# forced); JOBS (default: the cores) bounds the parallel nvcc processes
# (each CUTLASS unit takes a minute and a few GB). SANITIZE=1 also runs each
# check mode under compute-sanitizer memcheck and racecheck (logs beside the
# binaries; exit 9 on an error).
#   bash tests/cuda/conv/build_and_run.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
CUTLASS_INCLUDE=${CUTLASS_INCLUDE:-$(python3 -c "import cutlass_library, os; print(os.path.join(os.path.dirname(cutlass_library.__file__), 'source', 'include'))")}
JAX_INCLUDE=$(python3 -c "import jax; print(jax.ffi.include_dir())")
out=${OUT:-/tmp}
mkdir -p "$out"
stage=${STAGE:-all}
which=${SELFTEST:-all}
jobs=${JOBS:-$(nproc)}
start=$SECONDS
flags=(-std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Icpp -I"$CUTLASS_INCLUDE"
  -I"$CUTLASS_INCLUDE/../tools/util/include" -I"$JAX_INCLUDE" -DNDEBUG)
sm90=cpp/conv/sm90
fprop_srcs=(tests/cuda/conv/conv_fprop_sm90_selftest.cu $sm90/conv_fprop_sm90.cu $sm90/conv_fprop_sm90_n64.cu
  $sm90/conv_fprop_sm90_n128.cu $sm90/conv_sm90_aux.cu cpp/common/switches.cc)
grad_srcs=(tests/cuda/conv/conv_grad_sm90_selftest.cu $sm90/conv_dgrad_sm90.cu $sm90/conv_dgrad_sm90_n64.cu
  $sm90/conv_dgrad_sm90_n128.cu $sm90/conv_wgrad_sm90.cu $sm90/conv_wgrad_sm90_m64.cu
  $sm90/conv_wgrad_sm90_m128.cu $sm90/conv_sm90_aux.cu)
# The 1x1 GEMM's links the implicit-GEMM forward too (it compares the two).
gemm1x1_srcs=(tests/cuda/conv/conv1x1_gemm_sm90_selftest.cu $sm90/conv1x1_gemm_sm90.cu
  $sm90/conv1x1_gemm_sm90_n128.cu $sm90/conv1x1_gemm_sm90_n256.cu $sm90/conv_fprop_sm90.cu
  $sm90/conv_fprop_sm90_n64.cu $sm90/conv_fprop_sm90_n128.cu $sm90/conv_sm90_aux.cu cpp/common/switches.cc)
tests=()
for t in fprop grad gemm1x1; do
  if [ "$which" = all ] || [ "$which" = "$t" ]; then tests+=("$t"); fi
done
[ "${#tests[@]}" -gt 0 ] || { echo "SELFTEST must be fprop, grad, gemm1x1 or all"; exit 1; }

obj_of() { echo "$out/$(basename "$1").o"; }

if [ "$stage" != run ]; then
  # One nvcc per source, at most $jobs at once; any failure fails the build.
  declare -A seen=()
  srcs=()
  for t in "${tests[@]}"; do
    declare -n list="${t}_srcs"
    for src in "${list[@]}"; do
      [ -n "${seen[$src]:-}" ] || { seen[$src]=1; srcs+=("$src"); }
    done
  done
  pids=()
  for src in "${srcs[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do sleep 1; done
    nvcc "${flags[@]}" -c "$src" -o "$(obj_of "$src")" &
    pids+=($!)
  done
  failed=0
  for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
  [ "$failed" = 0 ] || { echo "build failed"; exit 1; }
  for t in "${tests[@]}"; do
    declare -n list="${t}_srcs"
    objs=()
    for src in "${list[@]}"; do objs+=("$(obj_of "$src")"); done
    nvcc -gencode=arch=compute_90a,code=sm_90a "${objs[@]}" -o "$out/conv_${t}_sm90_selftest"
  done
  echo "built ${tests[*]} in $((SECONDS - start)) s"
fi
[ "$stage" = build ] && exit 0
status=0
for t in "${tests[@]}"; do
  bin="$out/conv_${t}_sm90_selftest"
  echo "== $bin"
  "$bin" || status=$?
  if [ "$t" = gemm1x1 ]; then
    # Every case on each tile width too (the default picks per problem).
    for tile in 128 256; do
      echo "-- JAXDNN_CONV_1X1_GEMM=$tile"
      JAXDNN_CONV_1X1_GEMM=$tile "$bin" || status=$?
    done
  fi
  if [ -n "${SANITIZE:-}" ]; then
    for tool in ${SANITIZE_TOOLS:-memcheck racecheck}; do
      echo "-- compute-sanitizer $tool"
      timeout "${SANITIZE_SECONDS:-150}" compute-sanitizer --tool "$tool" --error-exitcode 9 "$bin" > "$out/${t}_$tool.log" 2>&1 \
        && echo "$tool clean" || { echo "$tool exit $?"; status=1; }
      tail -3 "$out/${t}_$tool.log"
    done
  fi
  if [ "$t" = fprop ]; then
    for tile in 64 128; do
      echo "-- JAXDNN_CONV_TILE_N=$tile"
      JAXDNN_CONV_TILE_N=$tile "$bin" bench || status=$?
    done
  elif [ "$t" = gemm1x1 ]; then
    for tile in auto 128 256; do
      echo "-- JAXDNN_CONV_1X1_GEMM=$tile"
      JAXDNN_CONV_1X1_GEMM=$tile "$bin" bench || status=$?
    done
  else
    "$bin" bench || status=$?
  fi
done
exit $status
