#!/usr/bin/env bash
# The GPU checks of attention kernels written without a GPU run
# (docs/perf/attention.md): MLA's 128/64 with value at its own 64 columns
# (JAXDNN_ATTENTION_SM90_VALUE_DIM_64, default off), then the whole attention
# suite on the final code.
#   PART=check: build; tests/attention/test_mla.py and memcheck `dims` with
#               the switch on;
#   PART=suite: on the warm machine, tests/attention (8 shards, up to 8 min);
#   PART=bench: on the warm machine: the MLA table at 128/64 with the switch
#               off and on, against PyTorch's SDPA (192/128 for reference).
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
    (cd /tmp && JAXDNN_ATTENTION_SM90_VALUE_DIM_64=1 timeout 200 python3 -m pytest -q -n 6 \
      "$repo/tests/attention/test_mla.py" > "$out/tests-mla64.txt" 2>&1)
    tail -n 3 "$out/tests-mla64.txt"
    (cd /tmp && JAXDNN_ATTENTION_SM90_VALUE_DIM_64=1 timeout 150 compute-sanitizer --tool memcheck \
      --error-exitcode 9 python3 "$repo/tests/cuda/memcheck_smoke.py" cuda dims > "$out/memcheck-dims.txt" 2>&1)
    echo "memcheck dims exit $?"
    ;;
  suite)
    STEPS=tests SHARDS=8 BUDGET=560 TESTS="$repo/tests/attention" \
      bash "$repo/benchmarks/gpu_run.sh" "$out/t" --tb=short -q > "$out/tests-attention.txt" 2>&1
    grep -E "^shard|FAILED" "$out/tests-attention.txt" | head -40
    ;;
  bench)
    cd /tmp || exit 1
    for v in 0 1; do
      JAXDNN_ATTENTION_SM90_VALUE_DIM_64=$v timeout 200 python3 -m jaxdnn.bench attention --only mla \
        --mla-dims 128/64 --seqs 2048,4096,8192,16384 --gpu-busy --out "$out/mla64-$v.json" \
        > "$out/mla64-$v.txt" 2>&1
      grep -E "jaxdnn|torch" "$out/mla64-$v.txt" | head -40
    done
    ;;
esac
