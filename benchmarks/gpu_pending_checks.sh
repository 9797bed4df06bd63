#!/usr/bin/env bash
# The GPU checks of the attention kernels written without a GPU run and kept
# behind default-off switches (docs/perf/attention.md): the fused backward at
# head dim 96 (JAXDNN_ATTENTION_SM90_BWD_FUSED_D96) and the row-broadcast bias
# stage of the dK/dV bias kernel (JAXDNN_ATTENTION_SM90_BIAS_ROW_STAGE).
#   PART=check: build, the suites that reach them with both switches on,
#               memcheck modes dims and bias (about 400 s);
#   PART=bench: on the warm machine, each switch off and on in its own
#               process: the d96 grid against cuDNN, the mask table at 4096;
#               then benchmarks/attention_kernel_split.py (the paged decode's
#               kernels against the contiguous one's among them).
#   bash benchmarks/gpu_pending_checks.sh OUT
set -uo pipefail
out=${1:?give an output folder}
repo=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
export XLA_PYTHON_CLIENT_PREALLOCATE=false PACK=0

case "${PART:-check}" in
  check)
    STEPS=build bash "$repo/benchmarks/gpu_run.sh" "$out/b" > "$out/build.txt" 2>&1
    tail -1 "$out/build.txt"
    # Each switch with its own suites, so a failure names its kernel.
    JAXDNN_ATTENTION_SM90_BWD_FUSED_D96=1 STEPS=tests SHARDS=8 BUDGET=120 \
      TESTS="$repo/tests/attention/test_head_dims_sm90.py" \
      bash "$repo/benchmarks/gpu_run.sh" "$out/t96" --tb=short -q > "$out/tests-d96.txt" 2>&1
    JAXDNN_ATTENTION_SM90_BIAS_ROW_STAGE=1 STEPS=tests SHARDS=8 BUDGET=100 \
      TESTS="$repo/tests/attention/test_mask_sm90.py $repo/tests/attention/test_bias_sm90.py" \
      bash "$repo/benchmarks/gpu_run.sh" "$out/tmask" --tb=short -q > "$out/tests-rowstage.txt" 2>&1
    grep -E "^shard|FAILED|Error" "$out"/tests-*.txt | head -40
    cd /tmp || exit 1
    # dims with the fused backward forced at every length (both dQ modes).
    JAXDNN_ATTENTION_SM90_BWD_FUSED_D96=1 JAXDNN_ATTENTION_SM90_BWD=2 timeout 110 compute-sanitizer \
      --tool memcheck --error-exitcode 9 python3 "$repo/tests/cuda/memcheck_smoke.py" cuda dims \
      > "$out/memcheck-dims.txt" 2>&1
    echo "memcheck dims exit $?"
    JAXDNN_ATTENTION_SM90_BIAS_ROW_STAGE=1 timeout 110 compute-sanitizer --tool memcheck --error-exitcode 9 \
      python3 "$repo/tests/cuda/memcheck_smoke.py" cuda bias > "$out/memcheck-bias.txt" 2>&1
    echo "memcheck bias exit $?"
    ;;
  bench)
    cd /tmp || exit 1
    for v in 0 1; do
      JAXDNN_ATTENTION_SM90_BWD_FUSED_D96=$v timeout 150 python3 -m jaxdnn.bench attention --only dense \
        --dims 96 --seqs 2048,4096,8192,16384 --gpu-busy --no-torch --out "$out/d96-fused$v.json" \
        > "$out/d96-fused$v.txt" 2>&1
      JAXDNN_ATTENTION_SM90_BIAS_ROW_STAGE=$v timeout 100 python3 -m jaxdnn.bench attention --only mask \
        --seqs 4096 --gpu-busy --no-torch --out "$out/mask-rowstage$v.json" > "$out/mask-rowstage$v.txt" 2>&1
    done
    # Where the small paged decodes lose to the contiguous one, kernel by kernel.
    timeout 120 python3 "$repo/benchmarks/attention_kernel_split.py" "$out/split.txt" > /dev/null 2>&1
    tail -n 3 "$out"/*.txt
    ;;
esac
